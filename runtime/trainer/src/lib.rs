//! # hetgen-trainer
//!
//! hetgen's training loop on libtorch (through `tch`): the model zoo of the spec, optimizers and
//! learning-rate schedules written on plain tensors (so their state checkpoints exactly), a
//! bounded prefetch that overlaps input with compute, one replica per GPU with averaged
//! gradients, the per-step metric line SageMaker scrapes, and checkpoints that resume a run
//! bit-for-bit on CPU.
//!
//! The launcher calls [`train`] with a function that opens the input stream at a [`Position`]
//! (or at the start); [`evaluate`] scores a saved model on another stream; [`drain`] takes the
//! batches without a model, to measure what the input alone delivers.

mod checkpoint;
mod device;
mod drain;
mod error;
mod evaluate;
mod input;
mod metrics;
mod models;
pub mod optim;
mod replicas;
mod saved;
pub mod schedule;
mod train;

use std::path::PathBuf;

pub use drain::{INPUT_ONLY, drain};
pub use error::TrainError;
pub use evaluate::{Evaluation, evaluate};
pub use metrics::{StepRecord, step_line};
pub use models::{MODEL_FILE, MODEL_INFO_FILE, ModelInfo};
pub use train::{report, train, train_observed};

#[doc(no_inline)]
pub use hetgen_env::{SUMMARY_FILE, SUMMARY_LINE_PREFIX, Summary};

#[doc(no_inline)]
pub use hetgen_pipeline::{BatchStream, BoxError, Position};

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

/// The folder holding libtorch's shared libraries, as found at build time (empty when torch-sys
/// found libtorch on the loader's path). For diagnostics: "which libtorch is this?".
pub fn libtorch_lib_dir() -> &'static str {
    LIBTORCH_LIB_DIR
}

/// [`libtorch_lib_dir`] as a constant.
pub const LIBTORCH_LIB_DIR: &str = include_str!(concat!(env!("OUT_DIR"), "/libtorch_lib_dir.txt"));
