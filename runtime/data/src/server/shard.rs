//! One shard request: checked before any work, then preprocessed on a blocking thread into
//! the stream's channel.

use std::sync::atomic::Ordering;

use hetgen_pipeline::ShardWork;
use tokio::sync::mpsc;

use super::refusal::Refusal;
use super::state::Shared;
use super::trainer_id::check_trainer_id;
use super::{MAX_BATCH_SIZE, MAX_SHARD_SAMPLES};
use crate::MAX_MESSAGE_BYTES;
use crate::checksum::batch_checksum;
use crate::proto::{Batch, ShardRequest};

/// What a shard stream carries: batches, then possibly why it ended early.
pub(crate) type BatchOrError = Result<Batch, tonic::Status>;

/// Refuse requests no honest trainer sends, before any work is done.
pub(crate) fn validate(shared: &Shared, request: &ShardRequest) -> Result<(), Refusal> {
    check_trainer_id(&request.trainer_id, &shared.config)?;
    if request.sample_ids.is_empty() {
        return Err(Refusal::NoSamples);
    }
    if request.sample_ids.len() > MAX_SHARD_SAMPLES {
        return Err(Refusal::TooManySamples(request.sample_ids.len()));
    }
    if request.batch_size == 0 || request.batch_size > MAX_BATCH_SIZE {
        return Err(Refusal::BatchSize(request.batch_size));
    }
    let bytes = shared
        .sample_bytes
        .saturating_mul(request.batch_size as usize);
    if bytes > MAX_MESSAGE_BYTES - (1 << 20) {
        return Err(Refusal::BatchOverMessage {
            batch_size: request.batch_size,
            bytes,
        });
    }
    if shared.stream_bytes(request.batch_size) > shared.budget.bytes() {
        return Err(shared.batch_over_budget(request.batch_size));
    }
    let samples = shared.engine.samples_per_epoch();
    if let Some(bad) = request.sample_ids.iter().find(|id| **id >= samples) {
        return Err(Refusal::UnknownSample { bad: *bad, samples });
    }
    Ok(())
}

/// Runs on a blocking thread: preprocess the shard and feed the response stream.
pub(crate) fn run(shared: &Shared, request: ShardRequest, tx: mpsc::Sender<BatchOrError>) {
    let batches = request
        .sample_ids
        .len()
        .div_ceil(request.batch_size as usize) as u32;
    let mut sent_batches = 0u32;
    let mut oversize = None;
    let mut emit = |batch: hetgen_pipeline::Batch| {
        if shared.stopping() {
            return false;
        }
        let n = batch.len() as u64;
        // A Python dataset's batch has no size known in advance: one over the message limit
        // ends the shard with a reason, as the request check does for images.
        if batch.data.len() > MAX_MESSAGE_BYTES - (1 << 20) {
            oversize = Some(Refusal::BatchOverMessage {
                batch_size: n as u32,
                bytes: batch.data.len(),
            });
            return false;
        }
        let checksum = batch_checksum(&batch);
        let message = Batch {
            epoch: batch.epoch,
            shard: batch.shard,
            index: batch.index,
            last: batch.index + 1 == batches,
            sample_ids: batch.sample_ids,
            labels: batch.labels,
            data: batch.data,
            checksum,
            tensors: crate::wire::tensors_to_wire(&batch.tensors),
            structure: batch.structure,
        };
        shared.queued.fetch_add(1, Ordering::Relaxed);
        let sent = tx.blocking_send(Ok(message)).is_ok();
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        if sent {
            sent_batches += 1;
            shared.samples_served.fetch_add(n, Ordering::Relaxed);
            shared.touch();
        }
        sent
    };
    let work = ShardWork {
        epoch: request.epoch,
        shard: request.shard,
        ids: &request.sample_ids,
        batch_size: request.batch_size,
    };
    let result = shared.engine.run_shard(work, &mut emit);
    let (epoch, shard) = (request.epoch, request.shard);
    let ended_early = match result {
        _ if oversize.is_some() => oversize,
        Err(e) => {
            if let Some(suppressed) = shared.logs.failed.allow() {
                tracing::error!(epoch, shard, error = %e, suppressed, "shard failed");
            }
            Some(Refusal::ShardFailed {
                epoch,
                shard,
                error: e.to_string(),
            })
        }
        // Cut short by a stop (SIGTERM, Shutdown, the watchdog): the stream must not end OK, or
        // a client that does not count batches would take the shard as complete.
        Ok(()) if sent_batches < batches && !tx.is_closed() => Some(Refusal::StoppedMidShard {
            epoch,
            shard,
            sent: sent_batches,
            batches,
        }),
        Ok(()) => None,
    };
    if let Some(why) = ended_early {
        let _ = tx.blocking_send(Err(why.into()));
    }
}
