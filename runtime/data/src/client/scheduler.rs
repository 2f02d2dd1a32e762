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

use hetgen_pipeline::{Batch, Engine, EpochPlan, InputConfig, Position};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::hedge::{self, Pace};
use super::{ClientConfig, ClientError, Delivery, LOCAL_SOURCE, Server, SourceCounts};
use crate::checksum::batch_checksum;
use crate::proto::{AckRequest, HeartbeatRequest, ShardRequest};

/// How often overdue shards are looked for.
const HEDGE_TICK: Duration = Duration::from_millis(100);

enum Event {
    Batch {
        server: usize,
        shard: usize,
        index: u32,
        batch: Batch,
    },
    Ended {
        server: usize,
        shard: usize,
    },
    Failed {
        server: usize,
        shard: usize,
        error: String,
        fatal: bool,
    },
}

/// Where a shard can be made.
#[derive(Clone)]
pub(super) enum Source {
    /// A data server (boxed: a handful per client, cloned once per shard).
    Remote(Box<Server>),
    /// The pipeline on this host (hybrid input).
    Local(Arc<Engine>),
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
            Source::Local(engine) => crate::server::max_inflight_shards(engine.threads()),
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
        let cfg = &self.input;
        let plan = EpochPlan::new(
            cfg.seed,
            epoch,
            cfg.samples_per_epoch,
            cfg.shard_size,
            cfg.rank,
            cfg.world,
        );
        let bs = cfg.batch_size;
        let resume = (epoch == self.start.epoch).then(|| self.start.clone());
        let mut shards: Vec<ShardState> = plan
            .shards
            .into_iter()
            .map(|s| {
                let total = s.batches(bs);
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
            .collect();
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
            let Some(event) = event else {
                unreachable!("the scheduler holds a sender");
            };
            match event {
                Event::Batch {
                    server,
                    shard,
                    index,
                    batch,
                } => {
                    // A source that delivers is not behind, whatever it delivers, and its
                    // pace is that of its own copy.
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
                        continue;
                    }
                    // Streams deliver a shard in order and each asks from `received` on, so
                    // anything else is a stream that raced a re-assignment: drop it too.
                    if index > state.received {
                        continue;
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
                    let from = if self.input.deterministic {
                        cursor
                    } else {
                        shard
                    };
                    if !self.flush(&mut shards, from).await {
                        return Ok(false);
                    }
                }
                Event::Ended { server, shard } => {
                    self.slots[server].inflight -= 1;
                    let state = &mut shards[shard];
                    state.copies.retain(|c| c.slot != server);
                    if state.received == state.total {
                        self.ack(server, epoch, state.id);
                    } else if state.copies.is_empty() && !queue.contains(&shard) {
                        let host = self.slots[server].source.name().to_owned();
                        self.last_error = format!("{host} ended shard {} early", state.id);
                        tracing::warn!(%host, shard = state.id, "stream ended before the shard's last batch; re-assigning");
                        queue.push_front(shard);
                    }
                }
                Event::Failed {
                    server,
                    shard,
                    error,
                    fatal,
                } => {
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
                    let state = &mut shards[shard];
                    state.copies.retain(|c| c.slot != server);
                    if state.received < state.total
                        && state.copies.is_empty()
                        && !queue.contains(&shard)
                    {
                        queue.push_front(shard);
                    }
                }
            }
        }
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
            Source::Remote(client) => {
                let task = ShardTask {
                    server: slot,
                    shard: next,
                    client: (**client).clone(),
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
                    server: slot,
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
    /// yielded. Their sources are marked behind; a source behind that answered a heartbeat
    /// since is not any more.
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
        let counted = |i: usize| self.slots[i].alive && self.slots[i].behind.is_none();
        let Some(patience) = self.pace.patience(counted) else {
            return;
        };
        let now = Instant::now();
        for next in 0..shards.len() {
            let state = &shards[next];
            let in_the_way = tail || (self.input.deterministic && next == cursor);
            if !in_the_way
                || state.copies.len() != 1
                || state.received == state.total
                || now - state.last_progress < patience
            {
                continue;
            }
            let late = state.copies[0].slot;
            if self.slots[late].behind.is_none() {
                self.slots[late].behind = Some(now);
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

struct ShardTask {
    server: usize,
    shard: usize,
    client: Server,
    epoch: u32,
    shard_id: u32,
    ids: Arc<Vec<u64>>,
    from: u32,
    batch_size: u32,
    trainer_id: String,
    stall: Duration,
    events: mpsc::Sender<Event>,
}

impl ShardTask {
    /// Stream until the shard ends, fails, or `cancel` (the shard arrived whole from another
    /// source): dropping the stream resets it, and the server stops making the shard.
    async fn run(self, cancel: CancellationToken) {
        let result = tokio::select! {
            result = self.stream() => result,
            _ = cancel.cancelled() => Ok(()),
        };
        let event = match result {
            Ok(()) => Event::Ended {
                server: self.server,
                shard: self.shard,
            },
            Err((error, fatal)) => Event::Failed {
                server: self.server,
                shard: self.shard,
                error,
                fatal,
            },
        };
        let _ = self.events.send(event).await;
    }

    /// Stream the shard from batch `from` on; `Err((why, fatal))` on failure, where fatal
    /// means another server would fail the same way (bad data, a refused request).
    async fn stream(&self) -> Result<(), (String, bool)> {
        let bs = self.batch_size as usize;
        let request = ShardRequest {
            epoch: self.epoch,
            shard: self.shard_id,
            sample_ids: self.ids[self.from as usize * bs..].to_vec(),
            batch_size: self.batch_size,
            trainer_id: self.trainer_id.clone(),
        };
        let mut client = self.client.client.clone();
        let response = tokio::time::timeout(self.stall, client.stream_shard(request))
            .await
            .map_err(|_| {
                (
                    format!("no answer to a shard request within {:?}", self.stall),
                    false,
                )
            })?
            .map_err(status_error)?;
        let mut stream = response.into_inner();
        let shape = &self.client.info.tensors[0].shape;
        let sample_bytes: usize = shape.iter().map(|d| *d as usize).product();
        loop {
            let message = tokio::time::timeout(self.stall, stream.message())
                .await
                .map_err(|_| (format!("stalled: no batch for {:?}", self.stall), false))?
                .map_err(status_error)?;
            let Some(message) = message else {
                return Ok(());
            };
            let index = self.from + message.index;
            let start = (index as usize * bs).min(self.ids.len());
            let expected = &self.ids[start..(start + bs).min(self.ids.len())];
            if message.epoch != self.epoch
                || message.shard != self.shard_id
                || message.sample_ids != expected
            {
                return Err((
                    format!(
                        "sent batch {index} of shard {} with the wrong samples",
                        self.shard_id
                    ),
                    false,
                ));
            }
            if message.labels.len() != expected.len()
                || message.images.len() != expected.len() * sample_bytes
            {
                return Err((
                    format!(
                        "sent batch {index} of shard {} with a wrong payload size",
                        self.shard_id
                    ),
                    false,
                ));
            }
            if batch_checksum(&message.images, &message.sample_ids, &message.labels)
                != message.checksum
            {
                return Err((
                    format!(
                        "sent batch {index} of shard {} with a bad checksum",
                        self.shard_id
                    ),
                    false,
                ));
            }
            let batch = Batch {
                epoch: self.epoch,
                shard: self.shard_id,
                index,
                sample_ids: message.sample_ids,
                labels: message.labels,
                images: message.images,
                shape: [shape[0], shape[1], shape[2]],
            };
            if self
                .events
                .send(Event::Batch {
                    server: self.server,
                    shard: self.shard,
                    index,
                    batch,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
    }
}

/// A shard made by the local engine on a blocking thread, reported as a server's stream is.
struct LocalShard {
    server: usize,
    shard: usize,
    engine: Arc<Engine>,
    epoch: u32,
    shard_id: u32,
    ids: Arc<Vec<u64>>,
    from: u32,
    batch_size: u32,
    events: mpsc::Sender<Event>,
}

impl LocalShard {
    async fn run(self, cancel: CancellationToken) {
        let (server, shard) = (self.server, self.shard);
        let events = self.events.clone();
        let work = tokio::task::spawn_blocking(move || self.make(&cancel));
        let event = match work.await {
            Ok(Ok(())) => Event::Ended { server, shard },
            // The same sample fails the same way on every server: a data error.
            Ok(Err(error)) => Event::Failed {
                server,
                shard,
                error,
                fatal: true,
            },
            // A panic (a custom stage's, say) loses this source, not the epoch.
            Err(join) => Event::Failed {
                server,
                shard,
                error: format!("the local pipeline stopped: {join}"),
                fatal: false,
            },
        };
        let _ = events.send(event).await;
    }

    /// Run the shard from batch `from` on; stops early once the scheduler is gone or the
    /// shard arrived whole from another source.
    fn make(&self, cancel: &CancellationToken) -> Result<(), String> {
        let bs = self.batch_size as usize;
        let ids = &self.ids[(self.from as usize * bs).min(self.ids.len())..];
        self.engine
            .run_shard(
                self.epoch,
                self.shard_id,
                ids,
                self.batch_size,
                &mut |mut batch| {
                    if cancel.is_cancelled() {
                        return false;
                    }
                    batch.index += self.from;
                    let event = Event::Batch {
                        server: self.server,
                        shard: self.shard,
                        index: batch.index,
                        batch,
                    };
                    self.events.blocking_send(event).is_ok()
                },
            )
            .map_err(|e| e.to_string())
    }
}

/// Statuses no other server would answer differently are fatal; the rest (connection lost,
/// server stopping, unknown transport errors) mean this server failed.
fn status_error(status: tonic::Status) -> (String, bool) {
    use tonic::Code::*;
    let fatal = matches!(
        status.code(),
        DataLoss
            | InvalidArgument
            | OutOfRange
            | Unauthenticated
            | PermissionDenied
            | FailedPrecondition
    );
    (format!("{:?}: {}", status.code(), status.message()), fatal)
}

/// Heartbeat every server (slot, server) each `every`; a server's answer is written, as ms
/// since `started`, into its slot of `answered`.
async fn heartbeats(
    servers: Vec<(usize, Server)>,
    trainer_id: String,
    every: Duration,
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(every).await;
        for (slot, server) in &servers {
            let mut client = server.client.clone();
            let request = HeartbeatRequest {
                trainer_id: trainer_id.clone(),
            };
            match tokio::time::timeout(every.max(Duration::from_secs(1)), client.heartbeat(request))
                .await
            {
                Ok(Ok(response)) => {
                    answered[*slot].store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    if let Some(s) = response.into_inner().stats {
                        tracing::debug!(host = %server.host, samples_per_s = s.samples_per_s, queue_depth = s.queue_depth, busy_threads = s.busy_threads, "data server stats");
                    }
                }
                _ => tracing::debug!(host = %server.host, "heartbeat not answered"),
            }
        }
    }
}
