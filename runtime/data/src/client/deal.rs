//! Dealing shards to sources. A queued shard goes to the live source with the most free
//! credits, so a faster source, returning credits sooner, gets more; in deterministic mode no
//! shard is started more than a window ahead of the one being yielded, which bounds the buffer.
//! A copy of a shard asks only for the batches not yet received, so a shard dealt again after
//! a failure, or backed up, resumes where the others left it.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::copy::{Event, LocalShard, ShardTask};
use super::plan::{Epoch, ShardCopy, ShardState};
use super::source::{Source, SourceState};

/// What starting a copy of a shard of one epoch takes, besides the shard and its source.
pub(super) struct Dealer {
    pub(super) epoch: u32,
    pub(super) batch_size: u32,
    pub(super) trainer_id: String,
    /// A server that sends nothing for this long while it owes batches has failed.
    pub(super) stall: Duration,
    /// Where the copies report.
    pub(super) events: mpsc::Sender<Event>,
}

impl Dealer {
    /// Start the queued shards, the front first, while a source has room for the next (and,
    /// `deterministic`, while it is within the window).
    pub(super) fn deal(&self, sources: &mut [SourceState], epoch: &mut Epoch, deterministic: bool) {
        let credits: u32 = sources
            .iter()
            .filter(|s| s.alive)
            .map(|s| s.credits())
            .sum();
        let window = epoch.cursor + 2 * credits as usize;
        while let Some(&next) = epoch.queue.front() {
            if deterministic && next >= window {
                return;
            }
            let Some(source) = free_source(sources, &epoch.shards[next]) else {
                return;
            };
            epoch.queue.pop_front();
            epoch.shards[next].last_progress = Instant::now();
            self.start_copy(sources, source, &mut epoch.shards[next], next);
        }
    }

    /// Make shard `index` (`state`) on `source`, from its first batch not yet received.
    pub(super) fn start_copy(
        &self,
        sources: &mut [SourceState],
        source: usize,
        state: &mut ShardState,
        index: usize,
    ) {
        sources[source].inflight += 1;
        let cancel = CancellationToken::new();
        state.copies.push(ShardCopy {
            source,
            cancel: cancel.clone(),
            last: Instant::now(),
        });
        match &sources[source].source {
            Source::Remote(server) => {
                let task = ShardTask {
                    source,
                    shard: index,
                    server: (**server).clone(),
                    epoch: self.epoch,
                    shard_id: state.id,
                    ids: state.ids.clone(),
                    stream: state.stream,
                    from: state.received,
                    batch_size: self.batch_size,
                    trainer_id: self.trainer_id.clone(),
                    stall: self.stall,
                    events: self.events.clone(),
                };
                tokio::spawn(task.run(cancel));
            }
            Source::Local(engine) => {
                let task = LocalShard {
                    source,
                    shard: index,
                    engine: engine.clone(),
                    epoch: self.epoch,
                    shard_id: state.id,
                    ids: state.ids.clone(),
                    stream: state.stream,
                    from: state.received,
                    batch_size: self.batch_size,
                    events: self.events.clone(),
                };
                tokio::spawn(task.run(cancel));
            }
        }
    }
}

/// The source to give `shard` to: alive, not behind, not resting, not making this shard already, with a
/// free credit; the one with the most free credits.
pub(super) fn free_source(sources: &[SourceState], shard: &ShardState) -> Option<usize> {
    let now = std::time::Instant::now();
    sources
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            s.alive
                && s.behind.is_none()
                && s.rested(now)
                && s.inflight < s.credits()
                && !shard.copies.iter().any(|c| c.source == *i)
        })
        .max_by_key(|(i, s)| (s.credits() - s.inflight, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}
