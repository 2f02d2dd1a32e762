//! Measuring the pipeline on this machine: what `hetgen profile` reports and `hetgen plan`
//! sizes clusters from.
//!
//! The engine times every stage of every sample (CPU time, summed over threads). Running it
//! flat out for a while gives the two numbers sizing needs: samples per second on these cores,
//! and CPU-seconds per sample, which does not depend on how many cores ran it.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{Engine, EpochPlan, PipelineError, ShardWork};

/// One stage's share of the work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    /// Stage name (`source`, then the spec's stages).
    pub name: String,
    /// CPU-seconds per sample.
    pub cpu_seconds_per_sample: f64,
    /// Fraction of the pipeline's CPU time.
    pub share: f64,
}

/// What a profiling run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Samples processed.
    pub samples: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Worker threads.
    pub threads: usize,
    /// Throughput on those threads.
    pub samples_per_s: f64,
    /// CPU-seconds per sample over all stages.
    pub cpu_seconds_per_sample: f64,
    /// Per stage, in pipeline order.
    pub stages: Vec<StageCost>,
}

/// Run the engine's pipeline over epoch plans of `shard_size`-sample shards for about
/// `budget` (always at least one batch), in batches of `batch_size`.
pub fn measure(
    engine: &Engine,
    seed: u64,
    shard_size: u32,
    batch_size: u32,
    budget: Duration,
) -> Result<Measurement, PipelineError> {
    let before: Vec<Duration> = engine.stage_times().into_iter().map(|(_, t)| t).collect();
    let start = Instant::now();
    let mut samples = 0u64;
    let mut epoch = 0;
    'run: loop {
        let plan = EpochPlan::new(seed, epoch, engine.samples_per_epoch(), shard_size, 0, 1);
        for shard in &plan.shards {
            let mut over = false;
            let work = ShardWork {
                epoch,
                shard: shard.id,
                ids: &shard.sample_ids,
                batch_size,
            };
            engine.run_shard(work, &mut |batch| {
                samples += batch.len() as u64;
                over = start.elapsed() >= budget;
                !over
            })?;
            if over {
                break 'run;
            }
        }
        epoch += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    let spent: Vec<(String, f64)> = engine
        .stage_times()
        .into_iter()
        .zip(before)
        .map(|((name, t), b)| (name, t.saturating_sub(b).as_secs_f64()))
        .collect();
    let total: f64 = spent.iter().map(|(_, s)| s).sum();
    let per = |s: f64| {
        if samples == 0 {
            0.0
        } else {
            s / samples as f64
        }
    };
    Ok(Measurement {
        samples,
        seconds,
        threads: engine.threads(),
        samples_per_s: samples as f64 / seconds.max(1e-9),
        cpu_seconds_per_sample: per(total),
        stages: spent
            .into_iter()
            .map(|(name, s)| StageCost {
                name,
                cpu_seconds_per_sample: per(s),
                share: if total > 0.0 { s / total } else { 0.0 },
            })
            .collect(),
    })
}
