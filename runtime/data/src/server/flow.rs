//! A shard stream's flow: the channel its batches wait in for the client, room in it, and the
//! stall timeout that ends a stream whose client takes nothing. A shard of sample ids
//! (`shard.rs`) and a shard read to its end (`stream.rs`) both flow through these.

use std::time::Duration;

use tokio::sync::mpsc;

use super::refusal::Refusal;
use super::stall::Watch;
use super::state::Shared;
use crate::proto::Batch;

/// What a shard stream carries: batches, then possibly why it ended early.
pub(crate) type BatchOrError = Result<Batch, tonic::Status>;

/// How long making batches on a blocking thread waits for the client to take one before the
/// thread lets go: the stream resumes from that batch once the client takes data again. A
/// trainer that keeps up takes a batch every step; one that has stopped reading holds no
/// thread for longer than this.
pub(super) const GRACE: Duration = Duration::from_millis(500);

/// Room in the channel for one message, waiting for the client to take one; `None` when the
/// body is gone, or the stream stalled (then it is cancelled).
pub(super) async fn room<'a>(
    shared: &Shared,
    tx: &'a mpsc::Sender<BatchOrError>,
    watch: &Watch,
) -> Option<mpsc::Permit<'a, BatchOrError>> {
    unless_stalled(shared, watch, tx.reserve()).await?.ok()
}

/// `wait`'s output, unless the stream makes no progress for the stall timeout first: then it
/// is cancelled and this is `None`.
pub(super) async fn unless_stalled<T>(
    shared: &Shared,
    watch: &Watch,
    wait: impl std::future::Future<Output = T>,
) -> Option<T> {
    let stall = shared.config.stall_timeout;
    let mut wait = std::pin::pin!(wait);
    loop {
        let check_at = stall
            .saturating_sub(watch.stalled_for())
            .max(Duration::from_millis(100));
        tokio::select! {
            done = &mut wait => return Some(done),
            _ = tokio::time::sleep(check_at) => {
                if watch.stalled_for() >= stall {
                    cancel(shared, watch);
                    return None;
                }
            }
        }
    }
}

/// A stream stalled for the timeout is cancelled; logged within the peers' log budget.
pub(super) fn cancel(shared: &Shared, watch: &Watch) {
    if watch.cancel()
        && let Some(suppressed) = shared.logs.stalled.allow()
    {
        tracing::warn!(
            stall_s = shared.config.stall_timeout.as_secs_f64(),
            suppressed,
            "a shard stream's client took no data for the stall timeout; closed its connection"
        );
    }
}

/// The shard's making failed with `error` (the user's code, a sample): logged within the
/// server's log budget, and what the client is told, with the sample to blame when one is.
pub(super) fn failed(
    shared: &Shared,
    epoch: u32,
    shard: u32,
    error: &hetgen_pipeline::PipelineError,
) -> Refusal {
    if let Some(suppressed) = shared.logs.failed.allow() {
        tracing::error!(epoch, shard, error = %error, suppressed, "shard failed");
    }
    Refusal::ShardFailed {
        epoch,
        shard,
        error: error.to_string(),
        sample: crate::failure::SampleFailure::of(error),
    }
}

/// The end of a stream's making: why it ended early, if it did, queued for the client; then
/// the wait until the client has taken everything (the body ends once every sender is gone, or
/// the client reset the stream) or the stream stalls, with `held` (its share of the budget, its
/// place among the trainer's streams) kept until then.
pub(super) async fn end<H>(
    shared: &Shared,
    tx: mpsc::Sender<BatchOrError>,
    watch: &Watch,
    ended_early: Option<Refusal>,
    held: H,
) {
    if let Some(why) = ended_early
        && let Some(permit) = room(shared, &tx, watch).await
    {
        permit.send(Err(why.into()));
    }
    drop(tx);
    unless_stalled(shared, watch, watch.body_gone()).await;
    drop(held);
}
