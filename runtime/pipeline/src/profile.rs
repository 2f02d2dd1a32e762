//! Measuring the pipeline on this machine: what `hetgen profile` reports and `hetgen plan`
//! sizes clusters from.
//!
//! The engine times every stage of every sample (CPU time, summed over threads). Running it
//! flat out for a while gives the two numbers sizing needs: samples per second on these cores,
//! and CPU-seconds per sample, which does not depend on how many cores ran it.
//!
//! A user's Python dataset ([`measure_dataset`]) runs in hetgen's own worker processes, as on a
//! data host (the same seeding, collate and shared-memory batches): its CPU time is the
//! workers', read from `/proc`, and the profile adds what sizing a data host needs beyond the
//! rate: bytes per sample on the wire, each worker's memory, how long the dataset takes to
//! start, and how the rate scales from one worker to all of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::python::Workers;
use crate::python::usage::{Memory, Usage};
use crate::{Batch, Batches, Engine, EpochPlan, PipelineError, ShardWork, StreamPlan, StreamWork};

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
    let shape = Shape {
        seed,
        shard_size,
        batch_size,
    };
    run_for(engine, &shape, &mut |batch| {
        samples += batch.len() as u64;
        start.elapsed() < budget
    })?;
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

/// How the epochs a profile runs are cut.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The job's seed.
    pub seed: u64,
    /// Samples per shard.
    pub shard_size: u32,
    /// Samples per batch.
    pub batch_size: u32,
}

/// Runs `batches` over one epoch plan after another (one rank), handing each batch to `each`
/// until it returns `false`.
fn run_for(
    batches: &dyn Batches,
    shape: &Shape,
    each: &mut dyn FnMut(&Batch) -> bool,
) -> Result<(), PipelineError> {
    if let Some(shards) = batches.shards() {
        return run_streams(batches, shards, shape, each);
    }
    let mut epoch = 0;
    loop {
        let plan = EpochPlan::new(
            shape.seed,
            epoch,
            batches.samples_per_epoch(),
            shape.shard_size,
            0,
            1,
        );
        for shard in &plan.shards {
            let mut more = true;
            let work = ShardWork {
                epoch,
                shard: shard.id,
                ids: &shard.sample_ids,
                batch_size: shape.batch_size,
            };
            batches.run_shard(work, &mut |batch| {
                more = each(&batch);
                more
            })?;
            if !more {
                return Ok(());
            }
        }
        epoch += 1;
    }
}

/// [`run_for`] over a dataset of shards: a shard is read by one worker, so as many shards
/// are read at once as there are workers (each lane of them takes every `lanes`-th shard of
/// each epoch's order), their batches handed to `each` as they come.
fn run_streams(
    batches: &dyn Batches,
    shards: u32,
    shape: &Shape,
    each: &mut dyn FnMut(&Batch) -> bool,
) -> Result<(), PipelineError> {
    let lanes = batches.threads().clamp(1, shards as usize);
    let stop = AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(lanes);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..lanes)
            .map(|lane| {
                let (tx, stop) = (tx.clone(), &stop);
                scope.spawn(move || -> Result<(), PipelineError> {
                    for epoch in 0.. {
                        let plan = StreamPlan::new(shape.seed, epoch, shards, 0, 1);
                        for &shard in plan.shards.iter().skip(lane).step_by(lanes) {
                            let work = StreamWork {
                                epoch,
                                shard,
                                first_batch: 0,
                                batch_size: shape.batch_size,
                            };
                            batches.run_stream(work, &mut |batch, _| {
                                !stop.load(Ordering::Relaxed) && tx.send(batch).is_ok()
                            })?;
                            if stop.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        drop(tx);
        for batch in &rx {
            if !each(&batch) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        // Readers blocked on a full channel see it closed.
        drop(rx);
        readers
            .into_iter()
            .map(|r| r.join().expect("a shard reader panicked"))
            .collect::<Result<Vec<()>, _>>()
            .map(drop)
    })
}

/// One timed run of a Python dataset's workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkersRun {
    /// Worker processes (one per core they may use).
    pub workers: usize,
    /// Samples made while timed.
    pub samples: u64,
    /// Seconds timed.
    pub seconds: f64,
    /// Samples per second of all workers together.
    pub samples_per_s: f64,
    /// The workers' CPU-seconds per sample.
    pub cpu_seconds_per_sample: f64,
    /// Bytes per sample of the batches (what the wire carries, less a small header).
    pub bytes_per_sample: f64,
    /// How long starting the workers took: each imports the dataset's file and builds it.
    pub startup_s: f64,
    /// Each worker's memory at the end of the run.
    pub memory: Vec<Memory>,
}

/// What the caller's progress display is told.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// Running untimed, so that first-call costs (imports, caches) are not counted.
    WarmingUp,
    /// Timed: seconds of the budget spent, and samples so far.
    Timed { seconds: f64, samples: u64 },
}

/// Times `workers` (started `startup` ago) for about `budget` after a warm-up of about a tenth
/// of it (at least a batch per worker), calling `progress` after each batch.
pub fn measure_dataset(
    workers: &Workers,
    startup: Duration,
    shape: &Shape,
    budget: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<WorkersRun, PipelineError> {
    let warmup = budget / 10;
    let threads = workers.threads();
    let begun = Instant::now();
    let mut warm_batches = 0usize;
    // Set when the warm-up ends: the time and the workers' CPU then.
    let mut timed: Option<(Instant, Usage)> = None;
    let (mut samples, mut bytes) = (0u64, 0u64);
    run_for(workers, shape, &mut |batch| {
        let Some((start, _)) = &timed else {
            warm_batches += 1;
            progress(Progress::WarmingUp);
            if warm_batches >= threads && begun.elapsed() >= warmup {
                timed = Some((Instant::now(), workers.usage()));
            }
            return true;
        };
        samples += batch.len() as u64;
        bytes += batch.data.len() as u64;
        let seconds = start.elapsed().as_secs_f64();
        progress(Progress::Timed { seconds, samples });
        seconds < budget.as_secs_f64()
    })?;
    let (start, before) = timed.expect("the run stops only once timed");
    let seconds = start.elapsed().as_secs_f64();
    let after = workers.usage();
    let per_sample = |x: f64| {
        if samples == 0 {
            0.0
        } else {
            x / samples as f64
        }
    };
    Ok(WorkersRun {
        workers: threads,
        samples,
        seconds,
        samples_per_s: samples as f64 / seconds.max(1e-9),
        cpu_seconds_per_sample: per_sample((after.cpu_seconds - before.cpu_seconds).max(0.0)),
        bytes_per_sample: per_sample(bytes as f64),
        startup_s: startup.as_secs_f64(),
        memory: after.memory,
    })
}
