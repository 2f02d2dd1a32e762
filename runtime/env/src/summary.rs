//! What a training run reports: `summary.json` in the trainer's output data folder, and the same
//! JSON on one `hetgen-summary` line of its log. The trainer writes it; the launcher returns it;
//! `hetgen deploy --local` and `hetgen bench` read it back.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::EnvError;

/// First word of the log line carrying the run's [`Summary`] as JSON.
pub const SUMMARY_LINE_PREFIX: &str = "hetgen-summary";

/// Name of the summary file in the trainer's output data folder ([`crate::Paths::output_data_dir`]).
pub const SUMMARY_FILE: &str = "summary.json";

/// What a training run did.
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
    /// Where the batches came from: the launcher fills it in from the input it built (empty
    /// from the trainer alone). Flattened: its keys stand beside the others in the JSON.
    #[serde(flatten)]
    pub input: InputReport,
}

/// What a run's input did, as only the input knows it: the data client (remote or hybrid) or
/// this host's own pipeline (local). Every key defaults, so older summaries still read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InputReport {
    /// Batches this process trained on per source, when its input was the data service: each
    /// data host by name and `local` for this host's own pipeline (hybrid input).
    pub batches_by_source: BTreeMap<String, u64>,
    /// Threads of this host's own pipeline: the whole input without data hosts, the hybrid
    /// share beside them (0: none).
    pub local_threads: u32,
    /// Backup copies of shards a source fell behind on, streamed from another source too
    /// (hedging; 0 without data hosts).
    pub backup_shards: u64,
    /// Batches dropped because another copy had delivered them (a hedged shard, or a server
    /// given up on that still sent).
    pub duplicate_batches: u64,
}

impl Summary {
    /// The `hetgen-summary {...}` log line.
    pub fn line(&self) -> String {
        format!(
            "{SUMMARY_LINE_PREFIX} {}",
            serde_json::to_string(self).expect("a summary serializes")
        )
    }

    /// Writes `summary.json` into an output data folder (the launcher adds what only it knows to
    /// the trainer's summary).
    pub fn write(&self, output_data_dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string(self).expect("a summary serializes");
        std::fs::create_dir_all(output_data_dir)?;
        std::fs::write(output_data_dir.join(SUMMARY_FILE), format!("{json}\n"))
    }

    /// Reads `summary.json` from an output data folder; `Ok(None)` when the trainer wrote none.
    pub fn read(output_data_dir: &Path) -> Result<Option<Summary>, EnvError> {
        crate::read_json(&output_data_dir.join(SUMMARY_FILE), false)
    }
}
