//! A trainer process's input, built from the decision: the one place that turns [`Input`] into
//! something to stream from, for the launcher's built-in trainer and `hetgen.Loader` alike.
//!
//! The front ends differ only in how they reach the data servers (the launcher from the job's
//! environment; the Loader also from `hosts`, a token, a trainer id and timeouts given to it, and
//! without holding the GIL) and how they wait. Everything else is here: which of the two is
//! built, the engine beside the servers for hybrid input, the input configuration of a rank,
//! the stream, what the input reports, and telling the data servers at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hetgen_env::{Env, InputReport};
use hetgen_pipeline::python::PythonSetup;
use hetgen_pipeline::{
    BatchStream, Batches, BoxError, InputConfig, LocalInput, Position, StageRegistry,
};
use hetgen_spec::model::Job;

use super::{Input, Mode};
use crate::client::{Client, tell_job_finished};
use crate::job::data_hosts;

/// Where a trainer process's batches come from, opened.
pub enum Opened {
    /// This process's own pipeline.
    Local(Arc<dyn Batches>),
    /// The job's data servers, with this host's own pipeline beside them when it has threads
    /// (hybrid input).
    Remote(Arc<Client>),
}

/// Opens the input `decided` says: `connect` reaches the data servers (called for remote input
/// only) and `engine` builds this host's pipeline with the threads given (called only when one
/// runs here: local input, or hybrid).
pub fn open(
    decided: Input,
    connect: impl FnOnce() -> Result<Client, BoxError>,
    engine: impl FnOnce(usize) -> Result<Arc<dyn Batches>, BoxError>,
) -> Result<Opened, BoxError> {
    match (decided.mode, decided.threads) {
        (Mode::Local, threads) => {
            let engine = engine(threads)?;
            tracing::info!(
                threads = engine.threads(),
                "input: the pipeline on this instance's own cores"
            );
            Ok(Opened::Local(engine))
        }
        (Mode::Remote, 0) => {
            let client = connect()?;
            tracing::info!("input: the data servers");
            Ok(Opened::Remote(Arc::new(client)))
        }
        (Mode::Remote, threads) => {
            let client = connect()?;
            tracing::info!(
                threads,
                "input: the data servers and this host's own pipeline (hybrid)"
            );
            Ok(Opened::Remote(Arc::new(
                client.with_local(engine(threads)?)?,
            )))
        }
    }
}

/// The job's pipeline on this host with `threads` threads, or for a Python dataset as many
/// worker processes, run by the interpreter `python` names.
pub fn engine(
    job: &Job,
    stages: &StageRegistry,
    channels: &BTreeMap<String, PathBuf>,
    threads: usize,
    python: &PythonSetup,
) -> Result<Arc<dyn Batches>, BoxError> {
    Ok(hetgen_pipeline::open(
        job,
        stages,
        channels,
        Some(threads),
        python,
    )?)
}

/// The source has fewer samples per epoch (or shards) than ranks share it.
#[derive(Debug, thiserror::Error)]
#[error("the source has {units} {what}, fewer than the {world} ranks that share them")]
pub struct FewerSamplesThanRanks {
    what: &'static str,
    units: u64,
    world: u32,
}

/// Which rank of how many, and what it streams beyond the job's own settings.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    /// This rank.
    pub rank: u32,
    /// Ranks sharing every epoch.
    pub world: u32,
    /// Epochs to stream; `None`: until the caller stops.
    pub epochs: Option<u32>,
    /// Deterministic order (else the order batches happen to come in).
    pub deterministic: bool,
}

impl Opened {
    /// Local or remote.
    pub fn mode(&self) -> Mode {
        match self {
            Opened::Local(_) => Mode::Local,
            Opened::Remote(_) => Mode::Remote,
        }
    }

    /// Samples in one epoch of the source.
    pub fn samples_per_epoch(&self) -> u64 {
        match self {
            Opened::Local(engine) => engine.samples_per_epoch(),
            Opened::Remote(client) => client.samples_per_epoch(),
        }
    }

    /// A dataset of shards: how many it has.
    pub fn shards(&self) -> Option<u32> {
        match self {
            Opened::Local(engine) => engine.shards(),
            Opened::Remote(client) => client.shards(),
        }
    }

    /// Threads of this process's own pipeline: all of the input (local), or beside the data
    /// servers (0 without hybrid input).
    pub fn threads(&self) -> usize {
        match self {
            Opened::Local(engine) => engine.threads(),
            Opened::Remote(client) => client.local_threads(),
        }
    }

    /// The input configuration of one rank's stream of `job`.
    pub fn config(&self, job: &Job, share: Share) -> Result<InputConfig, FewerSamplesThanRanks> {
        let samples_per_epoch = self.samples_per_epoch();
        let shards = self.shards();
        let units = shards.map_or(samples_per_epoch, u64::from);
        if units < u64::from(share.world) {
            return Err(FewerSamplesThanRanks {
                what: if shards.is_some() {
                    "shards"
                } else {
                    "samples per epoch"
                },
                units,
                world: share.world,
            });
        }
        Ok(InputConfig {
            seed: job.seed,
            samples_per_epoch,
            shards,
            shard_size: job.pipeline.shard_size,
            batch_size: job.pipeline.batch_size,
            epochs: share.epochs,
            rank: share.rank,
            world: share.world,
            deterministic: share.deterministic,
        })
    }

    /// Starts streaming `config`'s batches, after `start` when resuming.
    pub fn stream(&self, config: InputConfig, start: Option<Position>) -> Box<dyn BatchStream> {
        match self {
            Opened::Local(engine) => Box::new(LocalInput::new(engine.clone(), config, start)),
            Opened::Remote(client) => Box::new(client.stream(config, start)),
        }
    }

    /// What only the input knows of a run: batches by source, threads, backups.
    pub fn report(&self) -> InputReport {
        match self {
            Opened::Local(engine) => InputReport {
                local_threads: engine.threads() as u32,
                ..InputReport::default()
            },
            Opened::Remote(client) => client.report(),
        }
    }

    /// Tells the job's data servers that this trainer host finished (`failed`: its training
    /// failed): a server stops once every trainer host of the job has, or at once on a failure.
    /// Outside a job (`env` is `None`) the servers streamed from stop at once. Local input
    /// inside a job that has data hosts tells them all the same: they served nothing, but must
    /// end with the trainer rather than by their watchdog. Returns the hosts not told, with why.
    pub fn finished(
        &self,
        job: &Job,
        env: Option<&Env>,
        failed: bool,
        reason: &str,
    ) -> Vec<(String, String)> {
        match (self, env) {
            (Opened::Remote(client), Some(env)) => client.finished(env.host(), failed, reason),
            (Opened::Remote(client), None) => client.shutdown(reason),
            (Opened::Local(_), Some(env)) if !data_hosts(job, env).is_empty() => {
                // The servers were never connected to: say it without a handshake, waiting a
                // second at most, as the launcher does after a script.
                match tell_job_finished(job, env, failed, reason, Duration::from_secs(1)) {
                    Ok(untold) => untold,
                    Err(e) => vec![("data servers".to_owned(), e.to_string())],
                }
            }
            (Opened::Local(_), _) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Local input of the fixture job, its synthetic source cut to `samples` samples.
    fn local(samples: u32) -> (Job, Opened) {
        let job = hetgen_fixtures::spec("data-test")
            .set("pipeline.source.samples", samples)
            .job();
        let decided = Input {
            mode: Mode::Local,
            threads: 1,
        };
        let opened = open(
            decided,
            || panic!("local input connects to nothing"),
            |threads| {
                let python = super::super::python_setup(None);
                engine(
                    &job,
                    &StageRegistry::builtin(),
                    &BTreeMap::new(),
                    threads,
                    &python,
                )
            },
        )
        .unwrap();
        (job, opened)
    }

    #[test]
    fn a_ranks_configuration_comes_from_the_job_and_its_share() {
        let (job, opened) = local(6);
        assert_eq!(opened.mode(), Mode::Local);
        assert_eq!(opened.threads(), 1);
        let share = Share {
            rank: 2,
            world: 3,
            epochs: Some(4),
            deterministic: true,
        };
        let config = opened.config(&job, share).unwrap();
        assert_eq!(
            (config.seed, config.samples_per_epoch, config.batch_size),
            (7, 6, 16)
        );
        assert_eq!((config.rank, config.world, config.epochs), (2, 3, Some(4)));
        assert!(config.deterministic);
        // Outside a job, local input has no data servers to tell.
        assert!(opened.finished(&job, None, false, "done").is_empty());
    }

    #[test]
    fn more_ranks_than_samples_are_refused_with_the_figures() {
        let (job, opened) = local(3);
        let share = Share {
            rank: 0,
            world: 4,
            epochs: None,
            deterministic: false,
        };
        let err = opened.config(&job, share).unwrap_err().to_string();
        assert!(
            err.contains("3 samples per epoch, fewer than the 4 ranks"),
            "{err}"
        );
    }
}
