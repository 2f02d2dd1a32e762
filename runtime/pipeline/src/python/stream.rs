//! A dataset of shards (`hetgen.Shards`): one worker reads a shard from where the request
//! starts to its end, keeping it open between batches, so no sample is read twice.
//!
//! The request goes to the pool as one [`StreamJob`]: the worker thread that takes it keeps it
//! until the shard ends (a shard's samples come one after another, unlike a map-style shard's
//! batches, which any worker can make), asking its process for a batch's worth of samples at a
//! time and handing each batch over a channel of one, so that the next is read while this one
//! is sent. Several shards stream at once on as many workers.
//!
//! Faults: the user's code raising, or a sample past the deadline, ends the shard with the
//! error (`worker.py` names the shard and the sample's position). A worker that dies is
//! replaced and the same samples asked for again: the new worker opens the shard and reads up
//! to them. [`MAX_DEATHS`] deaths on one batch fail it, naming the sample the last was on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};

use super::process::{Doing, Made, Process};
use super::protocol::Built;
use super::slot::{died, worker};
use super::{Job, MAX_DEATHS, Pool, Workers};
use crate::plan::{stream_sample_id, stream_sample_of};
use crate::{Batch, Contents, PipelineError, StreamWork};

/// A batch's worth of a shard's next samples: the batch (none when the shard had none left),
/// how many samples it holds, and whether the shard ends with it.
pub(super) type Piece = (Option<Made>, u32, bool);

/// A shard to read, queued for the workers.
pub(super) struct StreamJob {
    epoch: u32,
    shard: u32,
    /// The position of the first sample to read.
    from: u32,
    batch_size: u32,
    /// The reader is gone: stop.
    cancelled: Arc<AtomicBool>,
    pieces: SyncSender<Result<Piece, PipelineError>>,
}

impl Workers {
    /// The batches of `work`'s shard from its first batch to the shard's end, each emitted
    /// with whether it is the last; stops early when `emit` returns `false`.
    pub(super) fn stream(
        &self,
        work: StreamWork,
        emit: &mut dyn FnMut(Batch, bool) -> bool,
    ) -> Result<(), PipelineError> {
        let Built::Shards(shards) = self.pool.built else {
            return Err(PipelineError::NotShards);
        };
        if work.shard >= shards {
            return Err(PipelineError::UnknownShard {
                shard: work.shard,
                shards,
            });
        }
        let batch_size = work.batch_size.max(1);
        let mut position = work
            .first_batch
            .checked_mul(batch_size)
            .ok_or(PipelineError::ShardTooLong { shard: work.shard })?;
        let (pieces, arriving) = sync_channel(1);
        let cancelled = Arc::new(AtomicBool::new(false));
        self.queue(Job::Stream(StreamJob {
            epoch: work.epoch,
            shard: work.shard,
            from: position,
            batch_size,
            cancelled: cancelled.clone(),
            pieces,
        }));
        let mut index = work.first_batch;
        let result = loop {
            let (made, samples, end) = match arriving.recv() {
                Ok(Ok(piece)) => piece,
                Ok(Err(error)) => break Err(error),
                Err(_) => break Err(PipelineError::Pool("the Python workers stopped".into())),
            };
            let Some(made) = made else { break Ok(()) };
            let sample_ids = (position..position + samples)
                .map(|p| stream_sample_id(work.shard, p))
                .collect();
            let batch = Batch {
                epoch: work.epoch,
                shard: work.shard,
                index,
                sample_ids,
                data: made.data,
                contents: Contents::Tensors {
                    tensors: made.tensors,
                    structure: made.structure,
                },
            };
            position += samples;
            index += 1;
            if !emit(batch, end) || end {
                break Ok(());
            }
        };
        cancelled.store(true, Ordering::Relaxed);
        result
    }
}

/// A worker thread reads `job`'s shard on its process (started anew when there is none)
/// until the shard ends, fails, or its reader is gone.
pub(super) fn serve(pool: &Pool, slot: usize, process: &mut Option<Process>, job: &StreamJob) {
    let mut from = job.from;
    let mut deaths = 0;
    while !job.cancelled.load(Ordering::Relaxed) {
        let piece = next(pool, slot, process, job, from, &mut deaths);
        let ended = !matches!(piece, Ok((_, _, false)));
        if let Ok((_, samples, _)) = &piece {
            from = match from.checked_add(*samples) {
                Some(from) => from,
                None => {
                    let _ = job
                        .pieces
                        .send(Err(PipelineError::ShardTooLong { shard: job.shard }));
                    return;
                }
            };
        }
        if job.pieces.send(piece).is_err() || ended {
            return;
        }
    }
}

/// The batch of `job`'s shard from position `from`, replacing the worker while it dies.
fn next(
    pool: &Pool,
    slot: usize,
    process: &mut Option<Process>,
    job: &StreamJob,
    from: u32,
    deaths: &mut u32,
) -> Result<Piece, PipelineError> {
    loop {
        let deadline = pool.sample_timeout();
        let asked = (job.shard, from, job.batch_size);
        let failed = match worker(pool, slot, process)?.next(job.epoch, asked, deadline) {
            Ok(piece) => {
                *deaths = 0;
                return Ok(piece);
            }
            Err(failed) => failed,
        };
        let (how, doing) = died(pool, slot, process, failed)?;
        *deaths += 1;
        let sample = match doing {
            Doing::Sample(sample) => sample,
            _ => stream_sample_id(job.shard, from),
        };
        if *deaths >= MAX_DEATHS {
            return Err(PipelineError::WorkerDied {
                deaths: *deaths,
                how,
                sample,
            });
        }
        let (shard, position) = stream_sample_of(sample);
        tracing::warn!(
            worker = %format!("w{slot}"),
            how = %how,
            shard,
            position,
            "a Python worker died reading shard {shard} at position {position}; \
             reading it again from position {from} in a new one"
        );
    }
}
