//! One shard of a dataset of shards (`hetgen.Shards`), streamed from the request's first batch
//! to the shard's end, which is learned as the shard is read.
//!
//! Unlike a shard of sample ids, whose making can stop whenever the client falls behind and
//! start again at any batch, a shard is read in order by one Python worker that keeps it open:
//! starting again elsewhere would read it from its beginning. So the blocking thread (and the
//! worker) waits for the client for as long as the stream is alive, checking for a stop and
//! for the stall timeout, as [`super::shard::produce`] does between its segments.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hetgen_pipeline::StreamWork;
use tokio::sync::mpsc;

use super::budget::Reservation;
use super::flow::{BatchOrError, GRACE, cancel, end, failed};
use super::refusal::Refusal;
use super::stall::Watch;
use super::state::{OpenStream, Shared};
use crate::MAX_MESSAGE_BYTES;
use crate::checksum::batch_checksum;
use crate::proto::{Batch, ShardRequest};

/// Read the request's shard into the stream's channel until the shard ends, its client is
/// gone, it stalls or the server stops; `held` until the stream is over.
pub(crate) async fn produce(
    shared: Arc<Shared>,
    request: ShardRequest,
    tx: mpsc::Sender<BatchOrError>,
    watch: Arc<Watch>,
    held: (OpenStream, Arc<Reservation>),
) {
    watch.progressed();
    let ended_early = {
        let (shared, tx, watch) = (shared.clone(), tx.clone(), watch.clone());
        let request = request.clone();
        tokio::task::spawn_blocking(move || read(&shared, &request, &tx, &watch))
            .await
            .unwrap_or_else(|_| Some(Refusal::Internal("reading the shard panicked".into())))
    };
    end(&shared, tx, &watch, ended_early, held).await;
}

/// How a read ended, as its emit saw it.
#[derive(Default)]
struct Sent {
    batches: u32,
    /// The shard's last batch was queued.
    last: bool,
    /// The client is gone, or the stream stalled (and was cancelled).
    gone: bool,
    oversize: Option<Refusal>,
}

/// On a blocking thread: the shard's batches into `tx`, waiting for the client as long as it
/// is there; why the shard ends without its last batch, if it does.
fn read(
    shared: &Shared,
    request: &ShardRequest,
    tx: &mpsc::Sender<BatchOrError>,
    watch: &Watch,
) -> Option<Refusal> {
    let runtime = tokio::runtime::Handle::current();
    let mut sent = Sent::default();
    let queue = |message: Batch, samples: u64| -> bool {
        loop {
            shared.queued.fetch_add(1, Ordering::Relaxed);
            let permit = runtime.block_on(tokio::time::timeout(GRACE, tx.reserve()));
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            match permit {
                Ok(Ok(permit)) => {
                    permit.send(Ok(message));
                    shared.samples_served.fetch_add(samples, Ordering::Relaxed);
                    shared.touch();
                    return true;
                }
                Ok(Err(_)) => return false,
                Err(_) if shared.stopping() => return false,
                Err(_) if watch.stalled_for() >= shared.config.stall_timeout => {
                    cancel(shared, watch);
                    return false;
                }
                // The client is slow, not gone: the shard stays open on its worker.
                Err(_) => {}
            }
        }
    };
    let mut emit = |batch: hetgen_pipeline::Batch, last: bool| {
        if shared.stopping() {
            return false;
        }
        if batch.data.len() > MAX_MESSAGE_BYTES - (1 << 20) {
            sent.oversize = Some(Refusal::BatchOverMessage {
                batch_size: batch.len() as u32,
                bytes: batch.data.len(),
            });
            return false;
        }
        let samples = batch.len() as u64;
        let message = to_message(batch, last);
        watch.progressed();
        if !queue(message, samples) {
            sent.gone = true;
            return false;
        }
        sent.batches += 1;
        sent.last = last;
        true
    };
    let work = StreamWork {
        epoch: request.epoch,
        shard: request.shard,
        first_batch: request.first_batch,
        batch_size: request.batch_size,
    };
    let result = shared.engine.run_stream(work, &mut emit);
    let (epoch, shard) = (request.epoch, request.shard);
    match result {
        _ if sent.oversize.is_some() => sent.oversize,
        Err(e) => Some(failed(shared, epoch, shard, &e)),
        Ok(()) if sent.gone || sent.last => None,
        // Nothing left to read from the first batch on: the shard ends before it, which the
        // client must hear as an end, not as a stream cut short.
        Ok(()) if sent.batches == 0 && !shared.stopping() => {
            // A client gone meanwhile hears nothing, as for any batch.
            let _ = queue(to_message(no_samples(request), true), 0);
            None
        }
        Ok(()) => Some(Refusal::StoppedMidStream {
            epoch,
            shard,
            sent: request.first_batch + sent.batches,
        }),
    }
}

/// The batch that ends a shard with no sample left: no samples, no tensors.
fn no_samples(request: &ShardRequest) -> hetgen_pipeline::Batch {
    hetgen_pipeline::Batch {
        epoch: request.epoch,
        shard: request.shard,
        index: request.first_batch,
        sample_ids: Vec::new(),
        data: bytes::Bytes::new(),
        contents: hetgen_pipeline::Contents::Tensors {
            tensors: Vec::new(),
            structure: String::new(),
        },
    }
}

/// `batch` as the message the client gets; its index is the shard's own already.
fn to_message(batch: hetgen_pipeline::Batch, last: bool) -> Batch {
    let checksum = batch_checksum(&batch);
    Batch {
        epoch: batch.epoch,
        shard: batch.shard,
        index: batch.index,
        last,
        sample_ids: batch.sample_ids,
        data: batch.data,
        checksum,
        contents: Some(crate::wire::contents_to_wire(batch.contents)),
    }
}
