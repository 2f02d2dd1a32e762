//! The epoch plan, executed against the data servers: one trainer rank's stream, exactly once.
//!
//! Per epoch the scheduler rebuilds the rank's plan ([`super::plan`]) and deals its shards to
//! the sources ([`super::deal`], [`super::source`]). It keeps each batch that arrives in order
//! and drops the rest: when a server fails or stalls, each of its unfinished shards goes back
//! to the front of the queue asking only for the batches not yet received, and anything a dead
//! server still sends is dropped as a duplicate; together: exactly once. In deterministic mode
//! batches are yielded in plan order whoever produced them.
//!
//! A source that falls behind its peers gets its shards hedged ([`super::hedge`]): another
//! source streams the rest of the shard too, the first copy of each batch wins, and the loser
//! is dropped once the shard is whole.

use std::sync::Arc;
use std::time::Instant;

use hetgen_pipeline::{Batch, InputConfig, Position};
use tokio::sync::mpsc;

use super::config::ClientConfig;
use super::copy::{Event, Failure, Kind};
use super::counts::SourceCounts;
use super::deal::Dealer;
use super::error::ClientError;
use super::heartbeat::heartbeats;
use super::hedge::{self, Hedge};
use super::plan::{Epoch, ShardState};
use super::source::{Source, SourceState};
use super::stream::Delivery;
use crate::proto::AckRequest;

pub(super) struct Scheduler {
    sources: Vec<SourceState>,
    config: ClientConfig,
    input: InputConfig,
    start: Position,
    out: mpsc::Sender<Delivery>,
    last_error: String,
    counts: Arc<SourceCounts>,
    hedge: Hedge,
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
        Self {
            hedge: Hedge::new(sources.len()),
            sources: sources.into_iter().map(SourceState::new).collect(),
            config,
            input,
            start,
            out,
            last_error: String::new(),
            counts,
        }
    }

    pub(super) async fn run(mut self) {
        let (answered, started) = self.hedge.answered();
        let heartbeat = tokio::spawn(heartbeats(
            self.sources
                .iter()
                .enumerate()
                .filter_map(|(i, s)| match &s.source {
                    Source::Remote(server) => Some((i, (**server).clone())),
                    Source::Local(_) => None,
                })
                .collect(),
            self.config.trainer_id.clone(),
            self.config.heartbeat,
            answered,
            started,
        ));
        let mut number = self.start.epoch;
        loop {
            if self.input.epochs.is_some_and(|n| number >= n) {
                break;
            }
            match self.run_epoch(number).await {
                Ok(true) => number += 1,
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

    /// Stream epoch `number`; `Ok(false)` when the consumer dropped the stream.
    async fn run_epoch(&mut self, number: u32) -> Result<bool, ClientError> {
        let mut epoch = Epoch::new(&self.input, number, &self.start);
        let (events_tx, mut events) = mpsc::channel::<Event>(16);
        let dealer = Dealer {
            epoch: number,
            batch_size: self.input.batch_size,
            trainer_id: self.config.trainer_id.clone(),
            stall: self.config.stall_timeout,
            events: events_tx,
        };
        let credits: u32 = self.sources.iter().map(|s| s.credits()).sum();
        self.hedge.start_epoch(epoch.shards.len(), credits);
        let mut tick = tokio::time::interval(hedge::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let deterministic = self.input.deterministic;

        loop {
            epoch.advance_cursor();
            // The epoch ends when every batch was yielded *and* every stream of it reported its
            // end: a stream's Ended event can trail its last batch, and returning before it
            // arrives would leak that server's credit for good (after a few epochs, every
            // credit, and the stream would stall).
            if epoch.all_yielded() && self.sources.iter().all(|s| s.inflight == 0) {
                return Ok(true);
            }
            dealer.deal(&mut self.sources, &mut epoch, deterministic);
            if !self.sources.iter().any(|s| s.alive) {
                return Err(ClientError::AllServersFailed(self.last_error.clone()));
            }
            let event = tokio::select! {
                event = events.recv() => event,
                _ = tick.tick() => {
                    self.hedge.tick(&mut self.sources, &mut epoch, deterministic, &dealer, &self.counts);
                    continue;
                }
            };
            match event.expect("the scheduler's dealer holds a sender") {
                Event::Batch {
                    source,
                    shard,
                    index,
                    batch,
                    last,
                } => {
                    if self.received(&mut epoch.shards[shard], source, (index, last), batch) {
                        let from = if deterministic { epoch.cursor } else { shard };
                        if !self.flush(&mut epoch.shards, from).await {
                            return Ok(false);
                        }
                    }
                }
                Event::Ended { source, shard } => self.ended(&mut epoch, shard, source),
                Event::Failed {
                    source,
                    shard,
                    failure,
                    held_up,
                } if held_up && failure.kind != Kind::Fatal => {
                    self.held_up(&mut epoch, shard, source, failure.error)
                }
                Event::Failed {
                    source,
                    shard,
                    failure,
                    ..
                } => self.failed(&mut epoch, shard, source, failure)?,
            }
        }
    }

    /// Batch `index` of `state` arrived from `source`, `last` when it ends the shard (`batch`
    /// is `None` for the end of a stream shard that had no sample left); whether it was new
    /// (kept to be yielded) rather than dropped as a duplicate or out of order.
    fn received(
        &mut self,
        state: &mut ShardState,
        source: usize,
        (index, last): (u32, bool),
        batch: Option<Batch>,
    ) -> bool {
        let now = Instant::now();
        self.hedge.delivered(&mut self.sources, source, state, now);
        // A source that delivers has room again: its refusals in a row are over.
        self.sources[source].resting = None;
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
        if let Some(batch) = batch {
            state.received += 1;
            state.buffer.insert(index, (batch, source));
        }
        if state.stream && last {
            // A stream shard's length, learned from its end.
            state.total = state.received;
        }
        if state.received == state.total {
            // Whole: a hedged shard's other copy is dropped, which ends its work.
            for copy in state.copies.iter().filter(|c| c.source != source) {
                copy.cancel.cancel();
            }
        }
        true
    }

    /// `source`'s stream of shard `index` ended: the shard is acknowledged when whole, and
    /// queued again when it is not and no other copy is streaming it.
    fn ended(&mut self, epoch: &mut Epoch, index: usize, source: usize) {
        self.sources[source].inflight -= 1;
        let state = &mut epoch.shards[index];
        state.copies.retain(|c| c.source != source);
        let id = state.id;
        if state.received == state.total {
            self.ack(source, epoch.number, id);
        } else if epoch.requeue(index) {
            let host = self.sources[source].name().to_owned();
            self.last_error = format!("{host} ended shard {id} early");
            tracing::warn!(%host, shard = id, "stream ended before the shard's last batch; re-assigning");
        }
    }

    /// `source`'s stream of shard `index` ended after this client's consumer held it up: the
    /// server may have cancelled it for that, so the shard is asked for again and the server
    /// stays.
    fn held_up(&mut self, epoch: &mut Epoch, index: usize, source: usize, error: String) {
        let src = &mut self.sources[source];
        src.inflight -= 1;
        tracing::debug!(host = %src.name(), %error, "a stream this trainer held up ended; asking for its shard again");
        epoch.shards[index].copies.retain(|c| c.source != source);
        epoch.requeue(index);
    }

    /// `source`'s stream of shard `index` failed: the job fails when any source would fail
    /// the same way; a busy source rests ([`SourceState::rest`]) and a failed one is lost.
    /// The shard is queued again unless another copy is streaming it.
    fn failed(
        &mut self,
        epoch: &mut Epoch,
        index: usize,
        source: usize,
        failure: Failure,
    ) -> Result<(), ClientError> {
        let src = &mut self.sources[source];
        src.inflight -= 1;
        let host = src.name().to_owned();
        let Failure {
            error,
            kind,
            sample,
        } = failure;
        if kind == Kind::Busy && src.rest(Instant::now()) {
            tracing::info!(%host, %error, "data server refused a stream for now; its shard goes elsewhere and it is asked again later");
            self.last_error = format!("{host}: {error}");
            epoch.shards[index].copies.retain(|c| c.source != source);
            epoch.requeue(index);
            return Ok(());
        }
        if kind == Kind::Fatal {
            return Err(match src.source {
                Source::Local(_) => ClientError::Local {
                    message: error,
                    sample,
                },
                Source::Remote(_) => ClientError::Data {
                    host,
                    message: error,
                    sample,
                },
            });
        }
        if src.alive {
            src.alive = false;
            tracing::warn!(%host, %error, "data server failed; its unfinished shards go to the others");
        }
        self.last_error = format!("{host}: {error}");
        epoch.shards[index].copies.retain(|c| c.source != source);
        epoch.requeue(index);
        Ok(())
    }

    /// Yield what can be yielded: in non-deterministic mode the given shard's buffer, in
    /// deterministic mode everything in plan order from the cursor. `false` when the consumer
    /// is gone.
    async fn flush(&mut self, shards: &mut [ShardState], from: usize) -> bool {
        let deterministic = self.input.deterministic;
        for state in shards[from..].iter_mut() {
            while let Some((batch, source)) = state.buffer.remove(&state.yielded) {
                state.yielded += 1;
                self.counts.add(source);
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

    /// Tell a server its shard arrived whole (the local engine keeps no such record).
    fn ack(&self, source: usize, epoch: u32, shard: u32) {
        let Source::Remote(server) = &self.sources[source].source else {
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
