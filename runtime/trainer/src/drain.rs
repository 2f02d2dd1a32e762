//! The input alone: batches taken as the training loop takes them, then dropped.
//!
//! What it measures is the input's ceiling, the samples/s a trainer would see if its model step
//! cost nothing. That is the regime of a GPU host whose input is the bottleneck: the GPU does
//! the model's work, so the host's CPU spends only what taking batches costs. On a CPU-only
//! machine a real model step would run on the same core as the host's own pipeline, and any
//! comparison of input configurations would count that core twice (BENCHMARKS.md, "Hybrid
//! input"). `hetgen bench --input-only` runs every configuration through this.

use std::time::Instant;

use hetgen_pipeline::{BatchStream, BoxError, Position};
use hetgen_spec::model::{Job, Length};

use crate::input::{Check, Prefetcher};
use crate::metrics::{StepRecord, Timings};
use crate::models::ModelInfo;
use crate::{Summary, TrainError};

/// The `model` a drained run's [`Summary`] names.
pub const INPUT_ONLY: &str = "none (input only)";

/// Takes the batches `open(None)` streams through the trainer's prefetch (the same checks and
/// host tensors as [`crate::train`]) for as many steps as the job trains, and returns the
/// [`Summary`] of their timings (for [`crate::report`]). No model is built, nothing is
/// checkpointed or saved.
pub fn drain(
    job: &Job,
    open: &mut dyn FnMut(Option<Position>) -> Result<Box<dyn BatchStream>, BoxError>,
) -> Result<Summary, TrainError> {
    let trainer = job.trainer.builtin().ok_or(TrainError::NotBuiltin)?;
    let info = ModelInfo::of_job(job, trainer);
    let check = Check {
        shape: info.input_shape,
        classes: info.num_classes,
        pin: false,
    };
    let target = match trainer.length {
        Length::Steps(n) => Some(n),
        Length::Epochs(_) => None,
    };
    tracing::info!("input only: batches are taken and dropped, no model runs");
    let mut prefetch = Prefetcher::spawn(open(None).map_err(TrainError::Input)?, check)?;
    let mut timings = Timings::default();
    let (mut steps, mut samples, mut epochs_started) = (0u64, 0u64, 0u32);
    while target.is_none_or(|n| steps < n) {
        let started = Instant::now();
        let Some(item) = prefetch.next() else { break };
        let batch = item?.batch;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        steps += 1;
        samples += batch.len as u64;
        epochs_started = epochs_started.max(batch.epoch + 1);
        timings.push(&StepRecord {
            step: steps,
            epoch: batch.epoch,
            loss: 0.0,
            lr: 0.0,
            samples: batch.len,
            step_ms: elapsed,
            wait_ms: elapsed,
        });
    }
    prefetch.stop()?;
    let timing = timings.summary();
    let summary = Summary {
        steps,
        epochs_started,
        samples,
        mean_step_ms: timing.mean_step_ms,
        mean_wait_ms: timing.mean_wait_ms,
        stall_fraction: timing.stall_fraction,
        samples_per_s: timing.samples_per_s,
        final_loss: 0.0,
        device: "cpu".to_owned(),
        model: INPUT_ONLY.to_owned(),
        replicas: 0,
        resumed_from_step: None,
        input: Default::default(),
    };
    Ok(summary)
}
