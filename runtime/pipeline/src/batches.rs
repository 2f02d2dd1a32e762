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

/// What [`Batches::run_stream`] is asked to read: a shard of a dataset of shards from one of
/// its batches on (all but a shard's last batch are full, so batch `n` starts at sample
/// `n × batch_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamWork {
    /// Epoch: it seeds the samples' randomness.
    pub epoch: u32,
    /// The shard's index in the dataset's list.
    pub shard: u32,
    /// The first batch to send: 0, or where a backup copy or a resumed epoch starts.
    pub first_batch: u32,
    /// Samples per batch; the shard's last batch may be short.
    pub batch_size: u32,
}

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
    /// A dataset of shards (`hetgen.Shards`): how many shards it has; `None` for a source of
    /// samples by id, which [`Batches::run_shard`] makes.
    fn shards(&self) -> Option<u32> {
        None
    }
    /// Read the work's shard from its first batch to the shard's end, calling `emit` with each
    /// batch and whether it is the shard's last; stop early when it returns `false`. Batch
    /// indices count from the work's `first_batch`; sample ids are
    /// [`stream_sample_id`](crate::plan::stream_sample_id)s.
    fn run_stream(
        &self,
        work: StreamWork,
        emit: &mut dyn FnMut(Batch, bool) -> bool,
    ) -> Result<(), PipelineError> {
        let _ = (work, emit);
        Err(PipelineError::NotShards)
    }
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
