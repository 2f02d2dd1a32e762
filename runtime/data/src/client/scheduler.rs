//! The epoch plan, executed against the data servers.
//!
//! Per epoch the scheduler rebuilds the rank's [`EpochPlan`] and keeps, per shard, how many of
//! its batches were *received* (a contiguous prefix: servers stream a shard's batches in order)
//! and *yielded*. Shards go to the live server with the most free credits, so a faster server,
//! returning credits sooner, gets more. When a server fails or stalls, each of its unfinished
//! shards goes back to the front of the queue asking only for the batches not yet received, and
//! anything a dead server still sends is dropped as a duplicate; together: exactly once.
//! In deterministic mode batches are yielded in plan order whoever produced them, and no shard
//! is started more than a window ahead of the one being yielded, which bounds the buffer.
//!
//! A source that falls behind its peers gets its shards hedged ([`super::hedge`]): another
//! source streams the rest of the shard too, the first copy of each batch wins, and the loser
//! is dropped once the shard is whole.
//!
//! A source is a data server or, in a hybrid job, the pipeline on the trainer's own host
//! ([`Source::Local`]): the same engine on a blocking thread, with credits like a server's. It
//! takes shards from the same queue by the same rule, so each side gets work in proportion to
//! its speed, and dedup, order and resume are the one code path above.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hetgen_pipeline::{Batch, Batches, EpochPlan, InputConfig, Position};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::copy::{Event, LocalShard, ShardTask};
use super::heartbeat::heartbeats;
use super::hedge::{self, Pace};
use super::{ClientConfig, ClientError, Delivery, LOCAL_SOURCE, Server, SourceCounts};
use crate::proto::AckRequest;

/// How often overdue shards are looked for.
const HEDGE_TICK: Duration = Duration::from_millis(100);

/// Where a shard can be made.
#[derive(Clone)]
pub(super) enum Source {
    /// A data server (boxed: a handful per client, cloned once per shard).
    Remote(Box<Server>),
    /// The pipeline on this host (hybrid input).
    Local(Arc<dyn Batches>),
}

impl Source {
    fn name(&self) -> &str {
        match self {
            Source::Remote(server) => &server.host,
            Source::Local(_) => LOCAL_SOURCE,
        }
    }

    /// Shards it may have in flight: what a server says in its handshake; for the local
    /// engine what a server of its size would say.
    fn credits(&self) -> u32 {
        match self {
            Source::Remote(server) => server.info.max_inflight_shards.max(1),
            Source::Local(engine) => crate::max_inflight_shards(engine.threads()),
        }
    }
}

struct Slot {
    source: Source,
    alive: bool,
    inflight: u32,
    /// Since when a shard of it was overdue: it gets no new shards until it answers a
    /// heartbeat or delivers a batch after that.
    behind: Option<Instant>,
}

/// One source streaming a shard (a shard has two while it is hedged).
struct Copy {
    slot: usize,
    cancel: CancellationToken,
    /// When it delivered its last batch, or was started: its pace's clock.
    last: Instant,
}

struct ShardState {
    id: u32,
    ids: Arc<Vec<u64>>,
    total: u32,
    received: u32,
    yielded: u32,
    /// Received batches not yet yielded, with the slot that made each.
    buffer: BTreeMap<u32, (Batch, usize)>,
    /// The sources streaming it now.
    copies: Vec<Copy>,
    /// When its last batch arrived, or it was asked for.
    last_progress: Instant,
}

pub(super) struct Scheduler {
    slots: Vec<Slot>,
    config: ClientConfig,
    input: InputConfig,
    start: Position,
    out: mpsc::Sender<Delivery>,
    last_error: String,
    counts: Arc<SourceCounts>,
    pace: Pace,
    /// Backups the current epoch may still start.
    backups_left: u32,
    /// Per slot, when a server last answered a heartbeat (ms since `started`).
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
}

impl Scheduler {
    pub(super) fn new(
        sources: Vec<Source>,
        config: ClientConfig,
        input: InputConfig,
        start: Position,
        out: mpsc::Sender<Delivery>,
        counts: Arc<SourceCounts>,
    ) -> Self {
        let slots: Vec<Slot> = sources
            .into_iter()
            .map(|source| Slot {
                source,
                alive: true,
                inflight: 0,
                behind: None,
            })
            .collect();
        let answered = Arc::new(slots.iter().map(|_| AtomicU64::new(0)).collect());
        Self {
            pace: Pace::new(slots.len()),
            slots,
            config,
            input,
            start,
            out,
            last_error: String::new(),
            counts,
            backups_left: 0,
            answered,
            started: Instant::now(),
        }
    }

    pub(super) async fn run(mut self) {
        let heartbeat = tokio::spawn(heartbeats(
            self.slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| match &s.source {
                    Source::Remote(server) => Some((i, (**server).clone())),
                    Source::Local(_) => None,
                })
                .collect(),
            self.config.trainer_id.clone(),
            self.config.heartbeat,
            self.answered.clone(),
            self.started,
        ));
        let mut epoch = self.start.epoch;
        loop {
            if self.input.epochs.is_some_and(|n| epoch >= n) {
                break;
            }
            match self.run_epoch(epoch).await {
                Ok(true) => epoch += 1,
                // The consumer went away: nothing left to do.
                Ok(false) => break,
                Err(e) => {
                    let _ = self.out.send(Err(e)).await;
                    break;
                }
            }
        }
        heartbeat.abort();
    }

    /// Stream one epoch; `Ok(false)` when the consumer dropped the stream.
    async fn run_epoch(&mut self, epoch: u32) -> Result<bool, ClientError> {
        let mut shards = self.epoch_shards(epoch);
        let mut queue: VecDeque<usize> = (0..shards.len())
            .filter(|&i| shards[i].received < shards[i].total)
            .collect();
        let mut cursor = 0usize; // deterministic mode: the shard being yielded
        let (events_tx, mut events) = mpsc::channel::<Event>(16);
        let credits: u32 = self.slots.iter().map(|s| s.source.credits()).sum();
        self.backups_left = hedge::allowance(shards.len(), credits);
        let mut tick = tokio::time::interval(HEDGE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        loop {
            while cursor < shards.len() && shards[cursor].yielded == shards[cursor].total {
                cursor += 1;
            }
            // The epoch ends when every batch was yielded *and* every stream of it reported its
            // end: a stream's Ended event can trail its last batch, and returning before it
            // arrives would leak that server's credit for good (after a few epochs, every
            // credit, and the stream would stall).
            if shards.iter().all(|s| s.yielded == s.total)
                && self.slots.iter().all(|s| s.inflight == 0)
            {
                return Ok(true);
            }
            self.assign(epoch, &mut queue, &mut shards, cursor, &events_tx);
            if !self.slots.iter().any(|s| s.alive) {
                return Err(ClientError::AllServersFailed(self.last_error.clone()));
            }
            let event = tokio::select! {
                event = events.recv() => event,
                _ = tick.tick() => {
                    self.hedge(epoch, &mut shards, queue.is_empty(), cursor, &events_tx);
                    continue;
                }
            };
            match event.expect("the scheduler holds a sender") {
                Event::Batch {
                    source,
                    shard,
                    index,
                    batch,
                } => {
                    if self.received(&mut shards, source, shard, index, batch) {
                        let from = if self.input.deterministic {
                            cursor
                        } else {
                            shard
                        };
                        if !self.flush(&mut shards, from).await {
                            return Ok(false);
                        }
                    }
                }
                Event::Ended { source, shard } => {
                    self.ended(epoch, &mut shards[shard], shard, source, &mut queue);
                }
                Event::Failed {
                    source,
                    shard,
                    error,
                    fatal,
                    held_up,
                } if held_up && !fatal => {
                    self.held_up(&mut shards[shard], shard, source, error, &mut queue)
                }
                Event::Failed {
                    source,
                    shard,
                    error,
                    fatal,
                    ..
                } => self.failed(&mut shards[shard], shard, source, error, fatal, &mut queue)?,
            }
        }
    }

    /// The rank's shards of `epoch`, those of a resumed epoch counted from its position.
    fn epoch_shards(&self, epoch: u32) -> Vec<ShardState> {
        let cfg = &self.input;
        let plan = EpochPlan::new(
            cfg.seed,
            epoch,
            cfg.samples_per_epoch,
            cfg.shard_size,
            cfg.rank,
            cfg.world,
        );
        let resume = (epoch == self.start.epoch).then(|| self.start.clone());
        plan.shards
            .into_iter()
            .map(|s| {
                let total = s.batches(cfg.batch_size);
                let done = match &resume {
                    Some(p) => p.skip(s.id).unwrap_or(total),
                    None => 0,
                };
                ShardState {
                    id: s.id,
                    ids: Arc::new(s.sample_ids),
                    total,
                    received: done,
                    yielded: done,
                    buffer: BTreeMap::new(),
                    copies: Vec::new(),
                    last_progress: Instant::now(),
                }
            })
            .collect()
    }

    /// Batch `index` of `shard` arrived from `server`; whether it was new (kept to be yielded)
    /// rather than dropped as a duplicate or out of order.
    fn received(
        &mut self,
        shards: &mut [ShardState],
        server: usize,
        shard: usize,
        index: u32,
        batch: Batch,
    ) -> bool {
        // A source that delivers is not behind, whatever it delivers, and its pace is that of
        // its own copy.
        self.slots[server].behind = None;
        let now = Instant::now();
        let state = &mut shards[shard];
        if let Some(copy) = state.copies.iter_mut().find(|c| c.slot == server) {
            self.pace.observe(server, now - copy.last);
            copy.last = now;
        }
        if index < state.received {
            self.counts.duplicate();
            tracing::debug!(shard = state.id, index, "duplicate batch dropped");
            return false;
        }
        // Streams deliver a shard in order and each asks from `received` on, so anything else
        // is a stream that raced a re-assignment: drop it too.
        if index > state.received {
            return false;
        }
        state.last_progress = now;
        state.received += 1;
        state.buffer.insert(index, (batch, server));
        if state.received == state.total {
            // Whole: a hedged shard's other copy is dropped, which ends its work.
            for copy in state.copies.iter().filter(|c| c.slot != server) {
                copy.cancel.cancel();
            }
        }
        true
    }

    /// `server`'s stream of shard `index` ended: the shard is acknowledged when whole, and
    /// queued again when it is not and no other copy is streaming it.
    fn ended(
        &mut self,
        epoch: u32,
        state: &mut ShardState,
        index: usize,
        server: usize,
        queue: &mut VecDeque<usize>,
    ) {
        self.slots[server].inflight -= 1;
        state.copies.retain(|c| c.slot != server);
        if state.received == state.total {
            self.ack(server, epoch, state.id);
        } else if state.copies.is_empty() && !queue.contains(&index) {
            let host = self.slots[server].source.name().to_owned();
            self.last_error = format!("{host} ended shard {} early", state.id);
            tracing::warn!(%host, shard = state.id, "stream ended before the shard's last batch; re-assigning");
            queue.push_front(index);
        }
    }

    /// `server`'s stream of shard `index` ended after this client's consumer held it up: the
    /// server may have cancelled it for that, so the shard is asked for again and the server
    /// stays.
    fn held_up(
        &mut self,
        state: &mut ShardState,
        index: usize,
        server: usize,
        error: String,
        queue: &mut VecDeque<usize>,
    ) {
        let slot = &mut self.slots[server];
        slot.inflight -= 1;
        tracing::debug!(host = %slot.source.name(), %error, "a stream this trainer held up ended; asking for its shard again");
        state.copies.retain(|c| c.slot != server);
        if state.received < state.total && state.copies.is_empty() && !queue.contains(&index) {
            queue.push_front(index);
        }
    }

    /// `server`'s stream of shard `index` failed: the server is lost (or, `fatal`, the job:
    /// any server would fail the same way), and the shard is queued again unless another copy
    /// is streaming it.
    fn failed(
        &mut self,
        state: &mut ShardState,
        index: usize,
        server: usize,
        error: String,
        fatal: bool,
        queue: &mut VecDeque<usize>,
    ) -> Result<(), ClientError> {
        let slot = &mut self.slots[server];
        slot.inflight -= 1;
        let host = slot.source.name().to_owned();
        if fatal {
            return Err(match slot.source {
                Source::Local(_) => ClientError::Local(error),
                Source::Remote(_) => ClientError::Mismatch {
                    host,
                    message: error,
                },
            });
        }
        if slot.alive {
            slot.alive = false;
            tracing::warn!(%host, %error, "data server failed; its unfinished shards go to the others");
        }
        self.last_error = format!("{host}: {error}");
        state.copies.retain(|c| c.slot != server);
        if state.received < state.total && state.copies.is_empty() && !queue.contains(&index) {
            queue.push_front(index);
        }
        Ok(())
    }

    /// Yield what can be yielded: in non-deterministic mode the given shard's buffer, in
    /// deterministic mode everything in plan order from the cursor. `false` when the consumer
    /// is gone.
    async fn flush(&mut self, shards: &mut [ShardState], from: usize) -> bool {
        let deterministic = self.input.deterministic;
        for state in shards[from..].iter_mut() {
            while let Some((batch, slot)) = state.buffer.remove(&state.yielded) {
                state.yielded += 1;
                self.counts.add(slot);
                if self.out.send(Ok((batch, state.total))).await.is_err() {
                    return false;
                }
            }
            if !deterministic || state.yielded < state.total {
                break;
            }
        }
        true
    }

    fn assign(
        &mut self,
        epoch: u32,
        queue: &mut VecDeque<usize>,
        shards: &mut [ShardState],
        cursor: usize,
        events: &mpsc::Sender<Event>,
    ) {
        let credits: u32 = self
            .slots
            .iter()
            .filter(|s| s.alive)
            .map(|s| s.source.credits())
            .sum();
        let window = cursor + 2 * credits as usize;
        while let Some(&next) = queue.front() {
            if self.input.deterministic && next >= window {
                return;
            }
            let Some(slot) = self.free_slot(&shards[next]) else {
                return;
            };
            queue.pop_front();
            shards[next].last_progress = Instant::now();
            self.start_copy(epoch, next, slot, shards, events);
        }
    }

    /// The source to give a shard to: alive, not behind, not streaming this shard already,
    /// with a free credit; the one with the most free credits.
    fn free_slot(&self, shard: &ShardState) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                s.alive
                    && s.behind.is_none()
                    && s.inflight < s.source.credits()
                    && !shard.copies.iter().any(|c| c.slot == *i)
            })
            .max_by_key(|(i, s)| (s.source.credits() - s.inflight, std::cmp::Reverse(*i)))
            .map(|(i, _)| i)
    }

    /// Stream shard `next` on `slot`, from its first batch not yet received.
    fn start_copy(
        &mut self,
        epoch: u32,
        next: usize,
        slot: usize,
        shards: &mut [ShardState],
        events: &mpsc::Sender<Event>,
    ) {
        self.slots[slot].inflight += 1;
        let cancel = CancellationToken::new();
        let state = &mut shards[next];
        state.copies.push(Copy {
            slot,
            cancel: cancel.clone(),
            last: Instant::now(),
        });
        match &self.slots[slot].source {
            Source::Remote(server) => {
                let task = ShardTask {
                    source: slot,
                    shard: next,
                    server: (**server).clone(),
                    epoch,
                    shard_id: state.id,
                    ids: state.ids.clone(),
                    from: state.received,
                    batch_size: self.input.batch_size,
                    trainer_id: self.config.trainer_id.clone(),
                    stall: self.config.stall_timeout,
                    events: events.clone(),
                };
                tokio::spawn(task.run(cancel));
            }
            Source::Local(engine) => {
                let task = LocalShard {
                    source: slot,
                    shard: next,
                    engine: engine.clone(),
                    epoch,
                    shard_id: state.id,
                    ids: state.ids.clone(),
                    from: state.received,
                    batch_size: self.input.batch_size,
                    events: events.clone(),
                };
                tokio::spawn(task.run(cancel));
            }
        }
    }

    /// Back up the overdue shards that are in the way ([`hedge`]): at the epoch's tail
    /// (`tail`: nothing left in the queue) any of them, in deterministic mode the one being
    /// yielded. Their sources are marked behind (never this host's own pipeline: it cannot be
    /// frozen apart from the trainer, only slow, so it takes new shards at once while its
    /// overdue ones are still backed up); a source behind that answered a heartbeat since is
    /// not any more.
    fn hedge(
        &mut self,
        epoch: u32,
        shards: &mut [ShardState],
        tail: bool,
        cursor: usize,
        events: &mpsc::Sender<Event>,
    ) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let answered = Duration::from_millis(self.answered[i].load(Ordering::Relaxed));
            if slot
                .behind
                .is_some_and(|since| self.started + answered > since)
            {
                slot.behind = None;
            }
        }
        // Outside the epoch's tail only deterministic order has a shard in the way: the one
        // being yielded.
        let in_the_way = match (tail, self.input.deterministic) {
            (true, _) => 0..shards.len(),
            (false, true) => cursor..(cursor + 1).min(shards.len()),
            (false, false) => return,
        };
        let counted = |i: usize| self.slots[i].alive && self.slots[i].behind.is_none();
        let Some(patience) = self.pace.patience(counted) else {
            return;
        };
        let now = Instant::now();
        for next in in_the_way {
            let state = &shards[next];
            if state.copies.len() != 1
                || state.received == state.total
                || now - state.last_progress < patience
            {
                continue;
            }
            let late = state.copies[0].slot;
            let slot = &mut self.slots[late];
            if slot.behind.is_none() && matches!(slot.source, Source::Remote(_)) {
                slot.behind = Some(now);
            }
            if self.backups_left == 0 {
                continue;
            }
            let Some(slot) = self.free_slot(state) else {
                continue;
            };
            tracing::info!(
                shard = state.id,
                behind = self.slots[late].source.name(),
                backup = self.slots[slot].source.name(),
                quiet_ms = (now - state.last_progress).as_millis() as u64,
                "shard overdue; streaming the rest from another source too"
            );
            self.backups_left -= 1;
            self.counts.backup();
            self.start_copy(epoch, next, slot, shards, events);
        }
    }

    /// Tell a server its shard arrived whole (the local engine keeps no such record).
    fn ack(&self, server: usize, epoch: u32, shard: u32) {
        let Source::Remote(server) = &self.slots[server].source else {
            return;
        };
        let mut client = server.client.clone();
        let request = AckRequest {
            epoch,
            shards: vec![shard],
            trainer_id: self.config.trainer_id.clone(),
        };
        tokio::spawn(async move {
            if let Err(status) = client.ack(request).await {
                tracing::debug!(shard, error = %status.message(), "ack not delivered");
            }
        });
    }
}
