//! One worker thread's process: started when the thread has none, forgotten when it dies or
//! is stopped; and what a worker's failures become as errors. Batches by id (`make.rs`) and
//! shards read to their end (`stream.rs`) both run on these.

use std::time::{Duration, Instant};

use super::process::{Doing, Failed, Process};
use super::protocol::ErrorKind;
use super::{BUILD_LOG_EVERY, Pool, SAMPLE_TIMEOUT_VAR};
use crate::PipelineError;

/// A request to thread `slot`'s worker failed: the error to end its work with, unless the
/// worker died (then it is forgotten, and how it ended and what it was doing are returned).
/// Whatever failed while the pool is stopping is the stop.
pub(super) fn died(
    pool: &Pool,
    slot: usize,
    process: &mut Option<Process>,
    failed: Failed,
) -> Result<(String, Doing), PipelineError> {
    if pool.closing() {
        return Err(stopping());
    }
    match failed {
        Failed::User {
            kind,
            message,
            sample,
        } => Err(user_error(kind, message, sample)),
        Failed::Stuck { doing, stack } => {
            drop_worker(pool, slot, process);
            Err(timeout(doing, pool.sample_timeout(), stack))
        }
        Failed::Died { how, doing } => {
            drop_worker(pool, slot, process);
            Ok((how, doing))
        }
    }
}

/// Forgets thread `slot`'s worker (it died, or is being stopped).
pub(super) fn drop_worker(pool: &Pool, slot: usize, process: &mut Option<Process>) {
    pool.forget(slot);
    *process = None;
}

/// Thread `slot`'s worker, started when there is none.
pub(super) fn worker<'p>(
    pool: &Pool,
    slot: usize,
    process: &'p mut Option<Process>,
) -> Result<&'p mut Process, PipelineError> {
    if pool.closing() {
        return Err(stopping());
    }
    if process.is_none() {
        let name = format!("w{slot}");
        let mut next_log = BUILD_LOG_EVERY;
        let mut waiting = |waited: Duration| {
            if waited >= next_log {
                next_log += BUILD_LOG_EVERY;
                tracing::info!(
                    worker = %name,
                    seconds = waited.as_secs(),
                    "building the dataset `{}` again in a new worker: {} s",
                    pool.dataset,
                    waited.as_secs()
                );
            }
            !pool.closing()
        };
        let begun = Instant::now();
        let started = Process::start(
            (pool.command)(),
            pool.folder.path(),
            &name,
            &pool.setup,
            &mut waiting,
        );
        let (started, _) = started.map_err(|message| {
            if pool.closing() {
                stopping()
            } else {
                PipelineError::PythonSetup {
                    dataset: pool.dataset.clone(),
                    message,
                }
            }
        })?;
        pool.adopt(slot, &started);
        tracing::debug!(worker = %name, seconds = begun.elapsed().as_secs_f64(), "new Python worker");
        *process = Some(started);
        // Adopted before this look: a pool closing now either sees it or is seen here.
        if pool.closing() {
            drop_worker(pool, slot, process);
            return Err(stopping());
        }
    }
    Ok(process.as_mut().expect("started above"))
}

pub(super) fn stopping() -> PipelineError {
    PipelineError::Pool("the Python workers are stopping".into())
}

/// A worker stopped at the deadline while `doing` that, at `stack`.
pub(super) fn timeout(doing: Doing, deadline: Duration, stack: String) -> PipelineError {
    let seconds = deadline.as_secs_f64();
    match doing {
        Doing::Sample(sample) => PipelineError::SampleTimeout {
            sample,
            seconds,
            var: SAMPLE_TIMEOUT_VAR,
            stack,
        },
        Doing::Collate => PipelineError::Timeout {
            stage: "collating the batch".into(),
            seconds,
            var: SAMPLE_TIMEOUT_VAR,
            stack,
        },
        Doing::Nothing => PipelineError::Timeout {
            stage: "taking the batch's request".into(),
            seconds,
            var: SAMPLE_TIMEOUT_VAR,
            stack,
        },
    }
}

/// The user's code failed on a batch: an error the trainer sees with the traceback.
pub(super) fn user_error(kind: ErrorKind, message: String, sample: Option<u64>) -> PipelineError {
    let stage = match (kind, sample) {
        (ErrorKind::Getitem, _) => "__getitem__",
        (ErrorKind::Collate, _) => "collate",
        // A sample's field that does not stack, or cannot travel at all.
        (ErrorKind::Stack, _) | (ErrorKind::Type, Some(_)) => "default collate",
        _ => "batch",
    };
    match sample {
        Some(sample) => PipelineError::Sample {
            sample,
            stage: stage.to_owned(),
            why: message,
        },
        None => PipelineError::Python {
            stage: stage.to_owned(),
            message,
        },
    }
}
