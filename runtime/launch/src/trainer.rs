//! The trainer role: choose the input (data servers, with this host's own pipeline beside them
//! when it has vCPUs to spare, or the local pipeline alone), train, and end the job's data
//! servers whatever happened, so CPU instances never outlive their trainer.

use std::sync::Arc;

use hetgen_data::client::{Client, connect_to_job};
use hetgen_data::input::{Asked, Mode};
use hetgen_data::job::{data_hosts, trainer_id};
use hetgen_env::{Env, InputReport};
use hetgen_pipeline::{
    BatchStream, BoxError, Engine, InputConfig, LocalInput, Position, StageRegistry,
};
use hetgen_spec::model::{BuiltinTrainer, Job, Length};
use hetgen_trainer::{Options, Paths, Summary};

use crate::Args;

/// Train this job on this instance.
pub fn run(
    job: &Job,
    trainer: &BuiltinTrainer,
    env: &Env,
    stages: &StageRegistry,
    args: &Args,
) -> Result<Summary, BoxError> {
    let asked = Asked {
        mode: args.input,
        local_ranks: 1,
        ..Asked::default()
    };
    let input = hetgen_data::input::decide(job, Some(env), &asked)
        .map_err(|e| format!("--input remote: {e}"))?;
    let training = Training::new(job, trainer, env, stages, args);
    match input.mode {
        Mode::Local => training.local(input.threads),
        Mode::Remote => training.remote(input.threads),
    }
}

/// Opens a stream of this job's batches, from the start or after a position.
type Open<'a> = dyn FnMut(Option<Position>) -> Result<Box<dyn BatchStream>, BoxError> + 'a;

/// What training (or `--input-only`'s draining) takes besides its input.
struct Training<'a> {
    job: &'a Job,
    env: &'a Env,
    stages: &'a StageRegistry,
    paths: Paths,
    options: Options,
    input_only: bool,
    epochs: Option<u32>,
    deterministic: bool,
}

impl<'a> Training<'a> {
    fn new(
        job: &'a Job,
        trainer: &BuiltinTrainer,
        env: &'a Env,
        stages: &'a StageRegistry,
        args: &Args,
    ) -> Self {
        Self {
            job,
            env,
            stages,
            paths: Paths {
                model_dir: env.paths.model_dir(),
                checkpoint_dir: env.paths.checkpoint_dir(),
                output_data_dir: env.paths.output_data_dir(),
            },
            options: Options {
                device: args.device,
            },
            input_only: args.input_only,
            epochs: match trainer.length {
                Length::Epochs(n) => Some(n),
                Length::Steps(_) => None,
            },
            deterministic: trainer.deterministic,
        }
    }

    /// Train on the pipeline on this instance's own cores (`threads` workers).
    fn local(&self, threads: usize) -> Result<Summary, BoxError> {
        let (job, env) = (self.job, self.env);
        let engine = Arc::new(Engine::new(
            job,
            self.stages,
            &env.channel_dirs,
            Some(threads),
        )?);
        tracing::info!(
            threads = engine.threads(),
            "input: the pipeline on this instance's own cores"
        );
        let result = self.train_on(
            engine.samples_per_epoch(),
            |config, start| LocalInput::new(engine.clone(), config, start),
            || InputReport {
                local_threads: engine.threads() as u32,
                ..Default::default()
            },
        );
        if !data_hosts(job, env).is_empty() {
            // `--input local` on a heterogeneous job: its data hosts served nothing, but they
            // must still end with the trainer rather than by their watchdog.
            shutdown_unused(job, env, &result);
        }
        Ok(result?)
    }

    /// Train on the job's data servers, with this host's own pipeline beside them when
    /// `threads` is not 0 (hybrid), and stop the servers after.
    fn remote(&self, threads: usize) -> Result<Summary, BoxError> {
        let (job, env) = (self.job, self.env);
        let client = connect_to_job(job, env, trainer_id(env, 0), None, |_| {})?;
        let client = match threads {
            0 => {
                tracing::info!("input: the data servers");
                client
            }
            threads => {
                tracing::info!(
                    threads,
                    "input: the data servers and this host's own pipeline (hybrid)"
                );
                let engine = Engine::new(job, self.stages, &env.channel_dirs, Some(threads))?;
                client.with_local(Arc::new(engine))?
            }
        };
        let result = self.train_on(
            client.samples_per_epoch(),
            |config, start| client.stream(config, start),
            || client.report(),
        );
        shutdown(&client, env, &result);
        Ok(result?)
    }

    /// Train on the streams `stream` opens for a source of `samples_per_epoch` (each audited
    /// when the environment asks, `hetgen_data::audit`), add to the summary what only the
    /// input knows (`input`, asked once training ends), and record the run.
    fn train_on<S: BatchStream + 'static>(
        &self,
        samples_per_epoch: u64,
        stream: impl Fn(InputConfig, Option<Position>) -> S,
        input: impl FnOnce() -> InputReport,
    ) -> Result<Summary, hetgen_trainer::TrainError> {
        let config = self.config(samples_per_epoch);
        let mut open = |start: Option<Position>| -> Result<Box<dyn BatchStream>, BoxError> {
            let stream = stream(config.clone(), start);
            Ok(hetgen_data::audit::audit_from_env(Box::new(stream))?)
        };
        let mut summary = self.run(&mut open)?;
        summary.input = input();
        record(summary, &self.paths)
    }

    /// Train on the batches `open` streams; `--input-only` takes the same batches from the same
    /// input and drops them.
    fn run(&self, open: &mut Open<'_>) -> Result<Summary, hetgen_trainer::TrainError> {
        if self.input_only {
            hetgen_trainer::drain(self.job, open)
        } else {
            hetgen_trainer::train(self.job, &self.paths, &self.options, open)
        }
    }

    /// The one rank's input configuration, for a source of `samples_per_epoch`.
    fn config(&self, samples_per_epoch: u64) -> InputConfig {
        InputConfig {
            seed: self.job.seed,
            samples_per_epoch,
            shard_size: self.job.pipeline.shard_size,
            batch_size: self.job.pipeline.batch_size,
            epochs: self.epochs,
            rank: 0,
            world: 1,
            deterministic: self.deterministic,
        }
    }
}

/// Reports the run, with where its batches came from: the one summary file and log line.
fn record(summary: Summary, paths: &Paths) -> Result<Summary, hetgen_trainer::TrainError> {
    if !summary.input.batches_by_source.is_empty() {
        let sources: Vec<String> = summary
            .input
            .batches_by_source
            .iter()
            .map(|(source, n)| format!("{n} from {source}"))
            .collect();
        tracing::info!("input: batches {}", sources.join(", "));
    }
    hetgen_trainer::report(&paths.output_data_dir, &summary)?;
    Ok(summary)
}

/// Tells the data servers that this trainer host finished (or failed): a server stops once
/// every trainer host of the job has, or at once on a failure.
fn shutdown<T, E: std::fmt::Display>(client: &Client, env: &Env, result: &Result<T, E>) {
    let reason = match result {
        Ok(_) => "training finished".to_owned(),
        Err(e) => format!("trainer failed: {e}"),
    };
    let host = &env.resources.current_host;
    for (host, why) in client.finished(host, result.is_err(), &reason) {
        tracing::warn!(%host, %why, "could not tell a data server to stop (its watchdog will)");
    }
}

fn shutdown_unused<T, E: std::fmt::Display>(job: &Job, env: &Env, result: &Result<T, E>) {
    match connect_to_job(job, env, trainer_id(env, 0), None, |_| {}) {
        Ok(client) => shutdown(&client, env, result),
        Err(e) => {
            tracing::warn!(error = %e, "could not reach the data servers to stop them (their watchdog will)")
        }
    }
}
