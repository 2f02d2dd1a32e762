//! The training loop.

use std::path::Path;
use std::time::Instant;

use hetgen_pipeline::{BatchStream, BoxError, Position};
use hetgen_spec::model::{BuiltinTrainer, Job, Length, Precision};

use crate::checkpoint::{self, Found, Identity, Progress};
use crate::device::{Placement, step_seed};
use crate::input::{Check, Item, Prefetcher};
use crate::metrics::{StepRecord, Timings, emit, step_line};
use crate::models::{MODEL_FILE, ModelInfo, model_name};
use crate::optim::Optimizer;
use crate::replicas::{LossScale, Replicas};
use crate::schedule::LrSchedule;
use crate::{Options, Paths, SUMMARY_FILE, Summary, TrainError};

/// Trains `job`'s model on the batches `open` streams, resuming from the checkpoint in
/// `paths.checkpoint_dir` when there is one.
///
/// `open(None)` must stream from the start; `open(Some(position))` right after `position`.
/// Prints a metric line every `log_every` steps and after the last, checkpoints every
/// `checkpoint_every` steps and at the end, then writes the model into `paths.model_dir` and
/// returns the [`Summary`], which the caller completes (the input's sources) and [`report`]s.
///
/// Reproducibility: with the same job and batches, CPU runs give the same losses and weights,
/// resumed or not. torch's generator is process-global, so this holds only while no other
/// thread of the process uses torch's random numbers during the run.
pub fn train(
    job: &Job,
    paths: &Paths,
    options: &Options,
    open: &mut dyn FnMut(Option<Position>) -> Result<Box<dyn BatchStream>, BoxError>,
) -> Result<Summary, TrainError> {
    train_observed(job, paths, options, open, &mut |_| {})
}

/// [`train`], calling `observe` after every step (tests and tools use it to follow the losses).
pub fn train_observed(
    job: &Job,
    paths: &Paths,
    options: &Options,
    open: &mut dyn FnMut(Option<Position>) -> Result<Box<dyn BatchStream>, BoxError>,
    observe: &mut dyn FnMut(&StepRecord),
) -> Result<Summary, TrainError> {
    let trainer = job.trainer.builtin().ok_or(TrainError::NotBuiltin)?;
    let mut run = Run::start(job, trainer, options)?;
    let resumed = run.resume(&paths.checkpoint_dir)?;
    let stream = open(resumed.map(|_| run.position.clone())).map_err(TrainError::Input)?;
    let mut prefetch = Prefetcher::spawn(stream, run.check())?;
    let target = match trainer.length {
        Length::Steps(n) => Some(n),
        Length::Epochs(_) => None,
    };
    let log_every = trainer.log_every.max(1);
    let mut timings = Timings::default();
    let mut last_record: Option<StepRecord> = None;
    let mut logged = run.progress.step;
    let mut checkpointed = resumed;

    loop {
        if target.is_some_and(|n| run.progress.step >= n) {
            break;
        }
        let started = Instant::now();
        let item = match prefetch.next() {
            Some(item) => item?,
            None => {
                if let Some(n) = target {
                    tracing::warn!(
                        step = run.progress.step,
                        target = n,
                        "the input ended before the step budget; stopping early"
                    );
                }
                break;
            }
        };
        let record = run.step(item, started)?;
        let step = record.step;
        timings.push(&record);
        observe(&record);
        if step.is_multiple_of(log_every) || target == Some(step) {
            emit(&step_line(&record));
            logged = step;
        }
        last_record = Some(record);
        if trainer
            .checkpoint_every
            .is_some_and(|k| k > 0 && step.is_multiple_of(k))
        {
            run.checkpoint(&paths.checkpoint_dir)?;
            checkpointed = Some(step);
        }
    }
    prefetch.stop()?;
    if let Some(record) = last_record.as_ref().filter(|r| r.step != logged) {
        emit(&step_line(record));
    }
    if checkpointed != Some(run.progress.step) {
        run.checkpoint(&paths.checkpoint_dir)?;
    }
    save_model(&paths.model_dir, &run.info, &run.replicas)?;
    Ok(run.summary(&timings, resumed))
}

/// One run's model, optimizer and progress: what a step changes and a checkpoint saves.
struct Run<'a> {
    seed: u64,
    trainer: &'a BuiltinTrainer,
    info: ModelInfo,
    placement: Placement,
    replicas: Replicas,
    optimizer: Optimizer,
    schedule: LrSchedule,
    identity: Identity,
    progress: Progress,
    /// The input position after the last trained batch.
    position: Position,
}

impl<'a> Run<'a> {
    /// The model on its devices and a fresh optimizer, at step 0.
    fn start(
        job: &Job,
        trainer: &'a BuiltinTrainer,
        options: &Options,
    ) -> Result<Self, TrainError> {
        let info = ModelInfo::of_job(job, trainer);
        let placement =
            Placement::resolve(options.device.unwrap_or(trainer.device), trainer.precision)?;
        if placement.is_cuda() {
            // Fixed-shape batches: let cuDNN pick the fastest kernels, unless runs must repeat.
            tch::Cuda::cudnn_set_benchmark(!trainer.deterministic);
        }
        let replicas = Replicas::new(&info, &placement, job.seed)?;
        let optimizer = Optimizer::new(&trainer.optimizer, &replicas.named_params())?;
        let schedule = LrSchedule::for_job(job, trainer);
        let identity = Identity::of_job(job, trainer);
        tracing::info!(
            model = model_name(trainer.model),
            device = placement.name(),
            replicas = replicas.len(),
            precision = ?placement.precision,
            "trainer ready"
        );
        let progress = Progress {
            step: 0,
            samples: 0,
            epochs_started: 0,
            epoch0_batches: None,
            last_loss: 0.0,
            loss_scale: (placement.precision == Precision::Fp16).then(LossScale::new),
        };
        Ok(Run {
            seed: job.seed,
            trainer,
            info,
            placement,
            replicas,
            optimizer,
            schedule,
            identity,
            progress,
            position: Position::default(),
        })
    }

    /// Loads the latest checkpoint in `dir` that belongs to this job, if any; returns the step
    /// it was taken at.
    fn resume(&mut self, dir: &Path) -> Result<Option<u64>, TrainError> {
        let resumed = match checkpoint::find(dir, &self.identity)? {
            None => None,
            Some(found) => Some(self.load(found)?),
        };
        if let (Some(batches), Length::Epochs(epochs)) =
            (self.progress.epoch0_batches, self.trainer.length)
        {
            self.schedule.learn_epoch_length(batches, epochs);
        }
        Ok(resumed)
    }

    /// Takes the weights, optimizer state, progress and input position from `found`.
    fn load(&mut self, found: Found) -> Result<u64, TrainError> {
        let corrupt = |why: String| TrainError::CorruptCheckpoint {
            path: found.dir.clone(),
            why,
        };
        let weights = found.dir.join(checkpoint::WEIGHTS_FILE);
        self.replicas
            .load(&weights)
            .map_err(|e| corrupt(format!("{}: {e}", checkpoint::WEIGHTS_FILE)))?;
        let state_file = found.dir.join(checkpoint::OPTIMIZER_FILE);
        let tensors =
            tch::Tensor::load_multi_with_device(&state_file, self.replicas.primary().device())
                .map_err(|e| corrupt(format!("{}: {e}", checkpoint::OPTIMIZER_FILE)))?;
        self.optimizer
            .load_state(tensors)
            .map_err(|e| corrupt(format!("{}: {e}", checkpoint::OPTIMIZER_FILE)))?;
        let loss_scale = self.progress.loss_scale;
        self.progress = found.state.progress;
        // A checkpoint from another precision keeps this run's loss-scale choice.
        self.progress.loss_scale = match (loss_scale, self.progress.loss_scale) {
            (Some(fresh), saved) => Some(saved.unwrap_or(fresh)),
            (None, _) => None,
        };
        self.position = found.state.position;
        tracing::info!(step = self.progress.step, dir = %found.dir.display(), "resuming from a checkpoint");
        Ok(self.progress.step)
    }

    /// What every batch must satisfy for this model.
    fn check(&self) -> Check {
        Check {
            shape: self.info.input_shape,
            classes: self.info.num_classes,
            pin: self.placement.is_cuda(),
        }
    }

    /// One step on `item`'s batch, which the loop began waiting for at `started`.
    fn step(&mut self, item: Item, started: Instant) -> Result<StepRecord, TrainError> {
        let wait = started.elapsed();
        let batch = item.batch;
        let progress = &mut self.progress;
        if batch.epoch > 0 && progress.epoch0_batches.is_none() {
            progress.epoch0_batches = Some(progress.step);
            if let Length::Epochs(epochs) = self.trainer.length {
                self.schedule.learn_epoch_length(progress.step, epochs);
            }
        }
        progress.epochs_started = progress.epochs_started.max(batch.epoch + 1);

        tch::manual_seed(step_seed(self.seed, progress.step));
        let lr = self.schedule.lr(progress.step);
        let scale = progress.loss_scale.map_or(1.0, |s| s.scale);
        let backward = self.replicas.backward(&batch, scale)?;
        let step = progress.step + 1;
        if !backward.loss.is_finite() {
            return Err(TrainError::NonFinite {
                step,
                loss: backward.loss,
            });
        }
        if backward.overflow {
            tracing::debug!(
                step,
                scale,
                "fp16 gradients overflowed; skipping the update"
            );
        } else {
            self.optimizer
                .step(&self.replicas.params(), &backward.grads, lr)?;
            self.replicas.broadcast()?;
        }
        if let Some(loss_scale) = &mut progress.loss_scale {
            loss_scale.update(backward.overflow);
        }
        progress.step = step;
        progress.samples += batch.len as u64;
        progress.last_loss = backward.loss;
        self.position = item.position;

        let elapsed = started.elapsed();
        Ok(StepRecord {
            step,
            epoch: batch.epoch,
            loss: backward.loss,
            lr,
            samples: batch.len,
            step_ms: elapsed.as_secs_f64() * 1000.0,
            wait_ms: wait.as_secs_f64() * 1000.0,
        })
    }

    /// Writes a checkpoint of where the run is now into `dir`.
    fn checkpoint(&self, dir: &Path) -> Result<(), TrainError> {
        let state = checkpoint::state(&self.identity, &self.progress, &self.position);
        checkpoint::write(dir, &state, self.replicas.primary(), &self.optimizer)?;
        Ok(())
    }

    fn summary(&self, timings: &Timings, resumed: Option<u64>) -> Summary {
        let timing = timings.summary();
        Summary {
            steps: self.progress.step,
            epochs_started: self.progress.epochs_started,
            samples: self.progress.samples,
            mean_step_ms: timing.mean_step_ms,
            mean_wait_ms: timing.mean_wait_ms,
            stall_fraction: timing.stall_fraction,
            samples_per_s: timing.samples_per_s,
            final_loss: self.progress.last_loss,
            device: self.placement.name().to_owned(),
            model: model_name(self.trainer.model).to_owned(),
            replicas: self.replicas.len(),
            resumed_from_step: resumed,
            // The launcher knows where the input came from and adds it before it reports.
            input: Default::default(),
        }
    }
}

/// Writes [`MODEL_FILE`] and the model description into `dir`.
fn save_model(dir: &Path, info: &ModelInfo, replicas: &Replicas) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(TrainError::io("create", dir))?;
    replicas.primary().save(&dir.join(MODEL_FILE))?;
    info.write(dir)
}

/// Reports a finished run, once, with everything its caller added (the input's sources):
/// [`SUMMARY_FILE`] in `dir`, and the same JSON on the `hetgen-summary` line of the log, which
/// `hetgen deploy --wait` and `hetgen logs` read back from CloudWatch.
pub fn report(dir: &Path, summary: &Summary) -> Result<(), TrainError> {
    summary
        .write(dir)
        .map_err(TrainError::io("write", dir.join(SUMMARY_FILE)))?;
    emit(&summary.line());
    Ok(())
}
