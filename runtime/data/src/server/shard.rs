//! One shard request: checked before any work, opened (its share of the budget reserved, its
//! trainer admitted), then made into the stream's channel, on a blocking thread while the
//! client keeps up.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hetgen_pipeline::ShardWork;
use tokio::sync::mpsc;

use super::budget::Reservation;
use super::config::{MAX_BATCH_SIZE, MAX_SHARD_SAMPLES};
use super::connections::Peer;
use super::flow::{BatchOrError, GRACE, end, failed, room};
use super::refusal::Refusal;
use super::stall::Watch;
use super::state::{OpenStream, Shared};
use super::trainer_id::check_trainer_id;
use crate::MAX_MESSAGE_BYTES;
use crate::checksum::batch_checksum;
use crate::proto::{Batch, ShardRequest};

/// Refuse requests no honest trainer sends, before any work is done.
pub(crate) fn validate(shared: &Shared, request: &ShardRequest) -> Result<(), Refusal> {
    check_trainer_id(&request.trainer_id, &shared.config)?;
    const BY_ID: &str = "a source of samples by id";
    const SHARDS: &str = "a dataset of shards";
    match (request.stream, shared.engine.shards()) {
        (true, None) => {
            return Err(Refusal::SourceMismatch {
                asked: SHARDS,
                have: BY_ID,
            });
        }
        (false, Some(_)) => {
            return Err(Refusal::SourceMismatch {
                asked: BY_ID,
                have: SHARDS,
            });
        }
        (true, Some(shards)) if request.shard >= shards => {
            return Err(Refusal::UnknownShard {
                shard: request.shard,
                shards,
            });
        }
        (true, Some(_)) if !request.sample_ids.is_empty() => return Err(Refusal::StreamWithIds),
        (true, Some(_)) => {}
        (false, None) if request.sample_ids.is_empty() => return Err(Refusal::NoSamples),
        (false, None) => {}
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

/// A shard stream just opened: its batches arrive on `batches`; the response holds its share
/// of the budget and tells `watch` when the client takes a batch.
pub(crate) struct OpenShard {
    pub(crate) batches: mpsc::Receiver<BatchOrError>,
    pub(crate) reservation: Arc<Reservation>,
    pub(crate) watch: Arc<Watch>,
}

/// Check a shard request, reserve what its stream may hold, and start preprocessing it; its
/// batches arrive on the receiver. The reservation is held by the preprocessing and by the
/// returned handle: it is given back when both are done (the response's last batch written, or
/// the stream dropped).
pub(crate) async fn open(
    shared: Arc<Shared>,
    request: ShardRequest,
    peer: Option<Peer>,
) -> Result<OpenShard, Refusal> {
    validate(&shared, &request)?;
    if shared.stopping() {
        return Err(Refusal::ShuttingDown);
    }
    let reservation = Arc::new(
        shared
            .reserve_stream(&request.trainer_id, request.batch_size)
            .await?,
    );
    let watch = Watch::new(peer);
    let open = shared.admit(&request, watch.clone())?;
    shared.touch();
    let (tx, batches) = mpsc::channel(2);
    let held = (open, reservation.clone());
    if request.stream {
        tokio::spawn(super::stream::produce(
            shared,
            request,
            tx,
            watch.clone(),
            held,
        ));
    } else {
        tokio::spawn(produce(shared, request, tx, watch.clone(), held));
    }
    Ok(OpenShard {
        batches,
        reservation,
        watch,
    })
}

/// Make the shard's batches into the stream's channel until its client has taken them all (the
/// response body ends), the stream stalls ([`stall`]), or a stop. Batches are made on a blocking
/// thread only while the client keeps up; while it does not, this task waits holding no thread.
/// `open` and `reservation` are held until the stream is over.
pub(crate) async fn produce(
    shared: Arc<Shared>,
    request: ShardRequest,
    tx: mpsc::Sender<BatchOrError>,
    watch: Arc<Watch>,
    held: (OpenStream, Arc<Reservation>),
) {
    let request = Arc::new(request);
    let batches = request
        .sample_ids
        .len()
        .div_ceil(request.batch_size as usize) as u32;
    let mut next = 0u32;
    let mut waiting: Option<BatchOrError> = None;
    let mut ended_early = None;
    watch.progressed();
    while next < batches || waiting.is_some() {
        let Some(permit) = room(&shared, &tx, &watch).await else {
            return;
        };
        if let Some(message) = waiting.take() {
            permit.send(message);
            watch.progressed();
            continue;
        }
        drop(permit);
        let segment = {
            let (shared, request, tx) = (shared.clone(), request.clone(), tx.clone());
            let watch = watch.clone();
            tokio::task::spawn_blocking(move || make(&shared, &request, next, batches, &tx, &watch))
                .await
        };
        let Ok(segment) = segment else {
            ended_early = Some(Refusal::Internal("making the shard panicked".into()));
            break;
        };
        next += segment.sent;
        if let Some(batch) = segment.waiting {
            next += 1;
            waiting = Some(Ok(batch));
            continue;
        }
        if segment.ended_early.is_some() || tx.is_closed() {
            ended_early = segment.ended_early;
            break;
        }
        if next < batches {
            // Cut short by a stop (SIGTERM, Shutdown, the watchdog): the stream must not end
            // OK, or a client that does not count batches would take the shard as complete.
            ended_early = Some(Refusal::StoppedMidShard {
                epoch: request.epoch,
                shard: request.shard,
                sent: next,
                batches,
            });
            break;
        }
    }
    end(&shared, tx, &watch, ended_early, held).await;
}

/// What one run of [`make`] did.
struct Segment {
    /// Batches queued.
    sent: u32,
    /// A batch made that found no room within [`GRACE`]: the next to queue.
    waiting: Option<Batch>,
    /// Why the shard ends without its last batch.
    ended_early: Option<Refusal>,
}

/// `batch` of a stream that asked from batch `from` on, as the message the client gets: its
/// index in the whole shard of `batches`, and its checksum.
fn to_message(batch: hetgen_pipeline::Batch, from: u32, batches: u32) -> Batch {
    let index = from + batch.index;
    let checksum = batch_checksum(&batch);
    Batch {
        epoch: batch.epoch,
        shard: batch.shard,
        index,
        last: index + 1 == batches,
        sample_ids: batch.sample_ids,
        data: batch.data,
        checksum,
        contents: Some(crate::wire::contents_to_wire(batch.contents)),
    }
}

/// On a blocking thread: make the shard's batches from `from` on into `tx` while the client
/// keeps up.
fn make(
    shared: &Shared,
    request: &ShardRequest,
    from: u32,
    batches: u32,
    tx: &mpsc::Sender<BatchOrError>,
    watch: &Watch,
) -> Segment {
    let runtime = tokio::runtime::Handle::current();
    let mut segment = Segment {
        sent: 0,
        waiting: None,
        ended_early: None,
    };
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
        let message = to_message(batch, from, batches);
        watch.progressed();
        shared.queued.fetch_add(1, Ordering::Relaxed);
        let permit = runtime.block_on(tokio::time::timeout(GRACE, tx.reserve()));
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        match permit {
            Ok(Ok(permit)) => {
                permit.send(Ok(message));
                segment.sent += 1;
                shared.samples_served.fetch_add(n, Ordering::Relaxed);
                shared.touch();
                true
            }
            // The body is gone.
            Ok(Err(_)) => false,
            // The client is not taking batches: let the thread go.
            Err(_) => {
                segment.waiting = Some(message);
                false
            }
        }
    };
    let bs = request.batch_size as usize;
    let work = ShardWork {
        epoch: request.epoch,
        shard: request.shard,
        ids: &request.sample_ids[(from as usize * bs).min(request.sample_ids.len())..],
        batch_size: request.batch_size,
    };
    let result = shared.engine.run_shard(work, &mut emit);
    let (epoch, shard) = (request.epoch, request.shard);
    segment.ended_early = match result {
        _ if oversize.is_some() => oversize,
        Err(e) => Some(failed(shared, epoch, shard, &e)),
        Ok(()) => None,
    };
    segment
}
