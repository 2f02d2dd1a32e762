//! What makes a job's batches: hetgen's own [`Engine`] for the built-in image pipeline, or
//! [`python::Workers`](crate::python::Workers) for a user's Python dataset. A data server, a
//! trainer's local or hybrid input and `hetgen.Loader(mode="local")` all hold one as a
//! `dyn Batches`, built by [`open`] from the job's source: the data path does not care which.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hetgen_spec::model::{Job, Source};

use crate::python::{PythonSetup, Workers};
use crate::{Batch, Engine, PipelineError, ShardWork, StageRegistry};

/// A maker of batches from shards of sample ids.
pub trait Batches: Send + Sync + 'static {
    /// Per-sample `[height, width, channels]` of built-in `u8` images; zeros for a Python
    /// dataset, whose batches describe their own tensors.
    fn output_shape(&self) -> [u32; 3];
    /// Bytes of one sample in a batch: exact for images, the first sample's for a Python
    /// dataset (what memory budgets reserve per sample).
    fn sample_bytes(&self) -> usize {
        self.output_shape().iter().map(|d| *d as usize).product()
    }
    /// Samples per epoch of the source.
    fn samples_per_epoch(&self) -> u64;
    /// Cores (threads or worker processes) that make the batches.
    fn threads(&self) -> usize;
    /// Of those, busy right now.
    fn busy_threads(&self) -> usize;
    /// Turn the work's `ids` into batches of its `batch_size` in order, calling `emit` with
    /// each; stop early when it returns `false`. Batch indices count from 0.
    fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), PipelineError>;
    /// Let the training threads of this host go first: see [`Engine::run_in_background`]. A
    /// maker with no threads or processes of its own has nothing to lower.
    fn run_in_background(&self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Batches for Engine {
    fn output_shape(&self) -> [u32; 3] {
        Engine::output_shape(self)
    }
    fn samples_per_epoch(&self) -> u64 {
        Engine::samples_per_epoch(self)
    }
    fn threads(&self) -> usize {
        Engine::threads(self)
    }
    fn busy_threads(&self) -> usize {
        Engine::busy_threads(self)
    }
    fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), PipelineError> {
        Engine::run_shard(self, work, emit)
    }
    fn run_in_background(&self) -> std::io::Result<()> {
        Engine::run_in_background(self)
    }
}

/// The job's maker of batches on this host: its Python dataset's workers, or the engine over
/// its source and stages. Channel folders come from `channels` (name → folder); `threads`
/// defaults to the cores this process may use.
pub fn open(
    job: &Job,
    registry: &StageRegistry,
    channels: &BTreeMap<String, PathBuf>,
    threads: Option<usize>,
    python: &PythonSetup,
) -> Result<Arc<dyn Batches>, PipelineError> {
    Ok(match &job.pipeline.source {
        Source::Python {
            dataset,
            collate,
            channel,
        } => {
            let path = channels
                .get(channel)
                .ok_or_else(|| PipelineError::NoChannel(channel.clone()))?;
            Arc::new(Workers::start(
                python,
                dataset,
                collate.as_ref(),
                path,
                job.seed,
                threads,
            )?)
        }
        _ => Arc::new(Engine::new(job, registry, channels, threads)?),
    })
}
