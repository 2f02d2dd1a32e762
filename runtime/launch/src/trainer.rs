//! The trainer role: choose the input (data servers, with this host's own pipeline beside them
//! when it has vCPUs to spare, or the local pipeline alone), train, and end the job's data
//! servers whatever happened, so CPU instances never outlive their trainer.

use hetgen_data::client::connect_to_job;
use hetgen_data::input::{self, Asked, Opened, Share};
use hetgen_data::job::trainer_id;
use hetgen_env::Env;
use hetgen_pipeline::{BatchStream, BoxError, Position, StageRegistry};
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
    let decided =
        input::decide(job, Some(env), &asked).map_err(|e| format!("--input remote: {e}"))?;
    let opened = input::open(
        decided,
        || connect_to_job(job, env, trainer_id(env, 0), None, |_| {}),
        |threads| {
            let python = input::python_setup(Some(env));
            input::engine(job, stages, &env.channel_dirs, threads, &python)
        },
    )?;
    let training = Training::new(job, trainer, env, args);
    let result = training.train_on(&opened);
    // Whatever happened, the data servers end with this trainer, not by their watchdog.
    let reason = match &result {
        Ok(_) => "training finished".to_owned(),
        Err(e) => format!("trainer failed: {e}"),
    };
    for (host, why) in opened.finished(job, Some(env), result.is_err(), &reason) {
        tracing::warn!(%host, %why, "could not tell a data server to stop (its watchdog will)");
    }
    result
}

/// Opens a stream of this job's batches, from the start or after a position.
type Open<'a> = dyn FnMut(Option<Position>) -> Result<Box<dyn BatchStream>, BoxError> + 'a;

/// What training (or `--input-only`'s draining) takes besides its input.
struct Training<'a> {
    job: &'a Job,
    paths: Paths,
    options: Options,
    input_only: bool,
    share: Share,
}

impl<'a> Training<'a> {
    fn new(job: &'a Job, trainer: &BuiltinTrainer, env: &Env, args: &Args) -> Self {
        Self {
            job,
            paths: Paths {
                model_dir: env.paths.model_dir(),
                checkpoint_dir: env.paths.checkpoint_dir(),
                output_data_dir: env.paths.output_data_dir(),
            },
            options: Options {
                device: args.device,
            },
            input_only: args.input_only,
            // The one rank of this process.
            share: Share {
                rank: 0,
                world: 1,
                epochs: match trainer.length {
                    Length::Epochs(n) => Some(n),
                    Length::Steps(_) => None,
                },
                deterministic: trainer.deterministic,
            },
        }
    }

    /// Train on the streams `input` opens (each audited when the environment asks,
    /// `hetgen_data::audit`), add to the summary what only the input knows (asked once
    /// training ends), and record the run.
    fn train_on(&self, input: &Opened) -> Result<Summary, BoxError> {
        let config = input.config(self.job, self.share)?;
        let mut open = |start: Option<Position>| -> Result<Box<dyn BatchStream>, BoxError> {
            let stream = input.stream(config.clone(), start);
            Ok(hetgen_data::audit::audit_from_env(stream)?)
        };
        let mut summary = self.run(&mut open)?;
        summary.input = input.report();
        Ok(record(summary, &self.paths)?)
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
