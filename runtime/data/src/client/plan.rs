//! The epoch plan as the scheduler carries it out. Per epoch the scheduler rebuilds the rank's
//! [`EpochPlan`] and keeps, per shard, how many of its batches were *received* (a contiguous
//! prefix: sources send a shard's batches in order) and *yielded*, the batches between the
//! two, and the copies of it being made; plus the queue of shards waiting for a source and, in
//! deterministic mode, the shard being yielded.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use hetgen_pipeline::{Batch, EpochPlan, InputConfig, Position, StreamPlan};
use tokio_util::sync::CancellationToken;

/// One source making a shard (a shard has two while it is hedged).
pub(super) struct ShardCopy {
    pub(super) source: usize,
    pub(super) cancel: CancellationToken,
    /// When it delivered its last batch, or was started: its pace's clock.
    pub(super) last: Instant,
}

pub(super) struct ShardState {
    pub(super) id: u32,
    /// Its sample ids; none for a shard of a dataset of shards (`stream`).
    pub(super) ids: Arc<Vec<u64>>,
    /// A shard of a dataset of shards, read to its end by one source at a time.
    pub(super) stream: bool,
    /// Its batches; [`UNKNOWN`] for a stream until its last batch arrives.
    pub(super) total: u32,
    pub(super) received: u32,
    pub(super) yielded: u32,
    /// Received batches not yet yielded, with the source that made each.
    pub(super) buffer: BTreeMap<u32, (Batch, usize)>,
    /// The sources making it now.
    pub(super) copies: Vec<ShardCopy>,
    /// When its last batch arrived, or it was asked for.
    pub(super) last_progress: Instant,
}

/// The batches of a stream shard whose end has not arrived yet.
pub(super) const UNKNOWN: u32 = u32::MAX;

impl ShardState {
    /// Shard `id` with `yielded` of its `total` batches yielded (and so received).
    fn new(id: u32, ids: Arc<Vec<u64>>, stream: bool, total: u32, yielded: u32) -> Self {
        ShardState {
            id,
            ids,
            stream,
            total,
            received: yielded,
            yielded,
            buffer: BTreeMap::new(),
            copies: Vec::new(),
            last_progress: Instant::now(),
        }
    }
}

/// One epoch of the rank's plan, as far as it went.
pub(super) struct Epoch {
    pub(super) number: u32,
    pub(super) shards: Vec<ShardState>,
    /// Shards waiting for a source, the next first.
    pub(super) queue: VecDeque<usize>,
    /// Deterministic mode: the shard being yielded.
    pub(super) cursor: usize,
}

impl Epoch {
    /// The rank's shards of epoch `number`, those of a resumed epoch (`start`'s) counted from
    /// its position, and every shard not yet whole queued.
    pub(super) fn new(input: &InputConfig, number: u32, start: &Position) -> Self {
        let resume = (number == start.epoch).then(|| start.clone());
        // Batches of `id` already yielded (of `total`, all when done) by the resumed run.
        let done = |id: u32, total: u32| match &resume {
            Some(p) => p.skip(id).unwrap_or(total),
            None => 0,
        };
        let shards: Vec<ShardState> = match input.shards {
            Some(count) => {
                let plan = StreamPlan::new(input.seed, number, count, input.rank, input.world);
                plan.shards
                    .into_iter()
                    .map(|id| {
                        // Its length is learned as it is read; one yielded whole is over.
                        let yielded = done(id, UNKNOWN);
                        let total = if yielded == UNKNOWN { 0 } else { UNKNOWN };
                        ShardState::new(id, Arc::new(Vec::new()), true, total, yielded.min(total))
                    })
                    .collect()
            }
            None => {
                let plan = EpochPlan::new(
                    input.seed,
                    number,
                    input.samples_per_epoch,
                    input.shard_size,
                    input.rank,
                    input.world,
                );
                plan.shards
                    .into_iter()
                    .map(|s| {
                        let total = s.batches(input.batch_size);
                        let yielded = done(s.id, total);
                        ShardState::new(s.id, Arc::new(s.sample_ids), false, total, yielded)
                    })
                    .collect()
            }
        };
        let queue = (0..shards.len())
            .filter(|&i| shards[i].received < shards[i].total)
            .collect();
        Epoch {
            number,
            shards,
            queue,
            cursor: 0,
        }
    }

    /// Move the cursor past the shards yielded whole.
    pub(super) fn advance_cursor(&mut self) {
        while self.cursor < self.shards.len()
            && self.shards[self.cursor].yielded == self.shards[self.cursor].total
        {
            self.cursor += 1;
        }
    }

    /// Whether every batch of the epoch was yielded.
    pub(super) fn all_yielded(&self) -> bool {
        self.shards.iter().all(|s| s.yielded == s.total)
    }

    /// Queue shard `index` again, at the front, when batches of it are still to arrive, no
    /// copy is making it and it is not queued already; whether it was.
    pub(super) fn requeue(&mut self, index: usize) -> bool {
        let state = &self.shards[index];
        if state.received < state.total && state.copies.is_empty() && !self.queue.contains(&index) {
            self.queue.push_front(index);
            return true;
        }
        false
    }
}
