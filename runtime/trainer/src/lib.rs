//! # hetgen-trainer
//!
//! hetgen's training loop on libtorch (through `tch`): the model zoo of the spec, optimizers and
//! learning-rate schedules written on plain tensors (so their state checkpoints exactly), a
//! bounded prefetch that overlaps input with compute, one replica per GPU with averaged
//! gradients, the per-step metric line SageMaker scrapes, and checkpoints that resume a run
//! bit-for-bit on CPU.
//!
//! The launcher calls [`train`] with a function that opens the input stream at a [`Position`]
//! (or at the start); [`evaluate`] scores a saved model on another stream.

mod checkpoint;
mod device;
mod error;
mod evaluate;
mod input;
mod metrics;
mod models;
pub mod optim;
mod replicas;
pub mod schedule;
mod train;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use error::TrainError;
pub use evaluate::{Evaluation, evaluate};
pub use metrics::{StepRecord, step_line};
pub use models::{MODEL_FILE, MODEL_INFO_FILE, ModelInfo};
pub use train::{train, train_observed};

#[doc(no_inline)]
pub use hetgen_pipeline::{BatchStream, BoxError, Position};

/// First word of the per-step metric line (see [`step_line`]); the spec's built-in metric regexes
/// (`hetgen_spec::model::builtin_metrics`) match on it.
pub const STEP_LINE_PREFIX: &str = "hetgen-step";

/// First word of the line carrying the run's [`Summary`] as JSON.
pub const SUMMARY_LINE_PREFIX: &str = "hetgen-summary";

/// Name of the summary file written into [`Paths::output_data_dir`].
pub const SUMMARY_FILE: &str = "summary.json";

/// Where a run writes its results.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The trained model: [`MODEL_FILE`] and [`MODEL_INFO_FILE`].
    pub model_dir: PathBuf,
    /// The latest checkpoint, resumed from when present.
    pub checkpoint_dir: PathBuf,
    /// [`SUMMARY_FILE`].
    pub output_data_dir: PathBuf,
}

/// Overrides of the job's trainer settings, from the launcher's command line.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Replaces `job.trainer.device` when set.
    pub device: Option<hetgen_spec::model::Device>,
}

/// What a training run did, for the logs, `summary.json` and the launcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Optimizer steps taken in total, including those before a resume.
    pub steps: u64,
    /// Epochs the run reached (an epoch counts once any of its batches was trained on).
    pub epochs_started: u32,
    /// Samples trained on in total, including those before a resume.
    pub samples: u64,
    /// Mean wall time of a step in this process, after the warm-up steps (the first
    /// `min(5, steps / 5)` are skipped: allocator and kernel selection make them slow).
    pub mean_step_ms: f64,
    /// Mean time a step waited for its batch, same steps.
    pub mean_wait_ms: f64,
    /// Total wait over total step wall time, same steps: the share of time the input stalled.
    pub stall_fraction: f64,
    /// Samples per second of wall time, same steps.
    pub samples_per_s: f64,
    /// Loss of the last step (0 when no step ever ran).
    pub final_loss: f64,
    /// `cpu` or `cuda`.
    pub device: String,
    /// The model, as the spec names it.
    pub model: String,
    /// Data-parallel replicas (one per GPU; 1 on CPU).
    pub replicas: usize,
    /// The step of the checkpoint this process resumed from, if any.
    pub resumed_from_step: Option<u64>,
}

/// The folder holding libtorch's shared libraries, as found at build time (empty when torch-sys
/// found libtorch on the loader's path). For diagnostics: "which libtorch is this?".
pub fn libtorch_lib_dir() -> &'static str {
    LIBTORCH_LIB_DIR
}

/// [`libtorch_lib_dir`] as a constant.
pub const LIBTORCH_LIB_DIR: &str = include_str!(concat!(env!("OUT_DIR"), "/libtorch_lib_dir.txt"));
