//! A worker thread of the pool, and what it does when a batch goes wrong.
//!
//! - The user's code raises: the error names the sample and carries the traceback; no retry.
//! - A sample (or the collate) outlasts the deadline: the worker's stack is taken and the error
//!   names the sample, `__getitem__` and where it was stuck; no retry either.
//! - The worker dies: it is replaced, and the sample it died on (or, when it died outside a
//!   sample, each of the batch's) is *probed*, made alone without collating, in the new worker.
//!   A sample that kills the worker again, alone, is made alone once more, and when it kills
//!   that one too, the batch fails naming it. A probe that comes through says the death does
//!   not come from one sample (something else killed the worker, or the batch as a whole
//!   kills it): the batch is made again. [`MAX_DEATHS`] deaths in all fail the batch.
//! - The pool is stopping: whatever failed, the batch ends as stopped, and nothing is logged
//!   as a death.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, PoisonError};

use super::process::{Doing, Failed, Made, Process};
use super::slot::{died, worker};
use super::{BatchJob, Job, MAX_DEATHS, Pool};
use crate::PipelineError;

/// A worker thread: takes batch requests off the queue and has its process make them,
/// replacing the process when it dies.
pub(super) fn serve(
    pool: &Pool,
    slot: usize,
    mut process: Option<Process>,
    jobs: &Mutex<Receiver<Job>>,
) {
    loop {
        let job = {
            let queue = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        };
        match job {
            Job::Batch(job) => {
                if job.cancelled.load(Ordering::Relaxed) {
                    continue;
                }
                pool.busy.fetch_add(1, Ordering::Relaxed);
                let result = Maker {
                    pool,
                    slot,
                    process: &mut process,
                    job: &job,
                }
                .make();
                pool.busy.fetch_sub(1, Ordering::Relaxed);
                let _ = job.reply.send(result);
            }
            Job::Stream(job) => {
                pool.busy.fetch_add(1, Ordering::Relaxed);
                super::stream::serve(pool, slot, &mut process, &job);
                pool.busy.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    pool.forget(slot);
}

/// The deaths of one batch's workers so far, and how the last one ended.
struct Deaths {
    count: u32,
    how: String,
}

/// One batch, on one thread's worker.
struct Maker<'a> {
    pool: &'a Pool,
    slot: usize,
    process: &'a mut Option<Process>,
    job: &'a BatchJob,
}

impl Maker<'_> {
    /// The batch, starting a new worker each time one dies, and finding the sample that kills
    /// them when one does.
    fn make(&mut self) -> Result<Made, PipelineError> {
        let mut deaths = Deaths {
            count: 0,
            how: String::new(),
        };
        loop {
            let deadline = self.pool.sample_timeout();
            let (epoch, ids) = (self.job.epoch, &self.job.ids);
            let failed = match self.worker()?.batch(epoch, ids, deadline) {
                Ok(made) => return Ok(made),
                Err(failed) => failed,
            };
            let doing = self.died(failed, &mut deaths)?;
            if deaths.count >= MAX_DEATHS {
                return Err(PipelineError::BatchDied {
                    deaths: deaths.count,
                    how: deaths.how,
                    samples: listed(ids),
                });
            }
            let (suspects, at) = match doing {
                Doing::Sample(sample) => (vec![sample], format!("on sample {sample}")),
                Doing::Collate => (ids.clone(), "collating the batch".to_owned()),
                Doing::Nothing => {
                    // Before it took the batch (killed while idle): nothing of it to suspect.
                    tracing::warn!(
                        worker = %format!("w{}", self.slot),
                        how = %deaths.how,
                        "a Python worker died while idle; making its batch in a new one"
                    );
                    continue;
                }
            };
            tracing::warn!(
                worker = %format!("w{}", self.slot),
                how = %deaths.how,
                epoch,
                "a Python worker died {at}; making the sample{} again alone in a new one, to \
                 tell a sample that kills its worker from a one-off",
                if suspects.len() == 1 { "" } else { "s of its batch" },
            );
            self.find_killer(suspects, &mut deaths)?;
            tracing::info!(
                worker = %format!("w{}", self.slot),
                epoch,
                "no sample alone kills a worker; making the batch again"
            );
        }
    }

    /// Probes `suspects` alone (uncollated) until they come through, a sample kills a worker
    /// twice (then the batch fails naming it), or the deaths reach [`MAX_DEATHS`].
    fn find_killer(
        &mut self,
        mut suspects: Vec<u64>,
        deaths: &mut Deaths,
    ) -> Result<(), PipelineError> {
        loop {
            let (deadline, epoch) = (self.pool.sample_timeout(), self.job.epoch);
            let failed = match self.worker()?.probe(epoch, &suspects, deadline) {
                Ok(()) => return Ok(()),
                Err(failed) => failed,
            };
            let doing = self.died(failed, deaths)?;
            match doing {
                Doing::Sample(sample) if deaths.count >= MAX_DEATHS => {
                    return Err(PipelineError::WorkerDied {
                        deaths: deaths.count,
                        how: std::mem::take(&mut deaths.how),
                        sample,
                    });
                }
                // Alone, once more: a worker killed from outside once does not fail the job.
                Doing::Sample(sample) => suspects = vec![sample],
                _ if deaths.count >= MAX_DEATHS => {
                    return Err(PipelineError::BatchDied {
                        deaths: deaths.count,
                        how: std::mem::take(&mut deaths.how),
                        samples: listed(&self.job.ids),
                    });
                }
                _ => {}
            }
        }
    }

    /// A request failed: the error to end the batch with, unless the worker died (then it is
    /// forgotten, the death counted, and what it was doing returned).
    fn died(&mut self, failed: Failed, deaths: &mut Deaths) -> Result<Doing, PipelineError> {
        let (how, doing) = died(self.pool, self.slot, self.process, failed)?;
        deaths.count += 1;
        deaths.how = how;
        Ok(doing)
    }

    fn worker(&mut self) -> Result<&mut Process, PipelineError> {
        worker(self.pool, self.slot, self.process)
    }
}

/// A batch's sample ids for a message: all of them up to 16, else the first 16 and a count.
fn listed(ids: &[u64]) -> String {
    const SHOWN: usize = 16;
    let shown: Vec<String> = ids.iter().take(SHOWN).map(u64::to_string).collect();
    match ids.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{} and {more} more", shown.join(", ")),
        _ => shown.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_batch_is_listed_in_part() {
        assert_eq!(listed(&[9, 3, 7]), "9, 3, 7");
        let many: Vec<u64> = (0..20).collect();
        assert!(
            listed(&many).ends_with("14, 15 and 4 more"),
            "{}",
            listed(&many)
        );
    }
}
