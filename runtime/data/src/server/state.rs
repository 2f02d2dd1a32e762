//! What the server remembers between calls: its trainers, who finished, its counters, and
//! whether it is stopping, and why ([`StopReason`]).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hetgen_pipeline::Batches;
use tokio::sync::watch;

use super::budget::{self, Budget, Reservation, Short};
use super::config::{MAX_TRAINERS, ServerConfig};
use super::lock::lock;
use super::log_id::LogId;
use super::refusal::Refusal;
use super::stall::{GIVE_WAY, Watch};
use crate::proto::{ServerStats, ShardRequest};
use crate::throttle::LogThrottle;

/// Why a server stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// A trainer sent Shutdown with this reason.
    Shutdown(String),
    /// No trainer was heard from for this long.
    Watchdog(Duration),
    /// The trainers were silent for this long, and none of the job's other data servers
    /// answered.
    Orphaned(Duration),
    /// The caller's stop future completed (SIGTERM).
    Stopped,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Shutdown(reason) => write!(f, "trainer sent Shutdown ({reason})"),
            StopReason::Watchdog(d) => write!(
                f,
                "no trainer was heard from for {:.0} s (watchdog); stopping so this instance stops billing",
                d.as_secs_f64()
            ),
            StopReason::Orphaned(d) => write!(
                f,
                "no trainer was heard from for {:.0} s and none of the job's other data servers answers: the job is over (this server missed the trainers' Shutdown); stopping so this instance stops billing",
                d.as_secs_f64()
            ),
            StopReason::Stopped => write!(f, "stop signal received"),
        }
    }
}

pub(crate) struct Shared {
    pub(crate) engine: Arc<dyn Batches>,
    pub(crate) config: ServerConfig,
    last_contact: Mutex<Instant>,
    /// A trainer has been heard from at least once.
    heard_from: AtomicBool,
    stopping: AtomicBool,
    stop: watch::Sender<Option<StopReason>>,
    /// Per trainer: its open streams and the shards streamed and not yet acknowledged.
    trainers: Mutex<HashMap<String, Trainer>>,
    /// Trainer hosts that said they finished.
    finished: Mutex<BTreeSet<String>>,
    pub(crate) samples_served: AtomicU64,
    pub(crate) queued: AtomicU32,
    /// Budgets of the log lines a peer causes at will.
    pub(crate) logs: Logs,
    rate: Mutex<(Instant, u64)>,
    /// Bytes of one sample's image.
    pub(crate) sample_bytes: usize,
    /// Bytes of batches in flight, all peers together.
    pub(crate) budget: Budget,
    /// Bytes of request bodies still arriving, all peers together ([`budget::BODIES`]).
    pub(crate) bodies: Budget,
}

/// One budget per kind of line a peer can cause ([`crate::throttle`]).
#[derive(Default)]
pub(crate) struct Logs {
    pub(crate) connected: LogThrottle,
    pub(crate) forgotten: LogThrottle,
    pub(crate) finished: LogThrottle,
    pub(crate) failed: LogThrottle,
    pub(crate) stalled: LogThrottle,
    pub(crate) gave_way: LogThrottle,
}

/// What the server keeps per trainer.
struct Trainer {
    /// Its shard streams open now.
    streams: Vec<Arc<Watch>>,
    /// (epoch, shard) streamed and not yet acknowledged, oldest first.
    unacked: VecDeque<(u32, u32)>,
    /// When it last opened a stream or acknowledged one.
    last_seen: Instant,
}

impl Default for Trainer {
    fn default() -> Self {
        Trainer {
            streams: Vec::new(),
            unacked: VecDeque::new(),
            last_seen: Instant::now(),
        }
    }
}

impl Trainer {
    /// Nothing open and nothing owed: the entry can go.
    fn idle(&self) -> bool {
        self.streams.is_empty() && self.unacked.is_empty()
    }

    /// How long the least stalled of its streams has been stalled: every stream of it for at
    /// least that long. `None` without streams.
    fn stalled_for(&self) -> Option<Duration> {
        self.streams.iter().map(|w| w.stalled_for()).min()
    }

    /// Cancel its streams stalled for [`GIVE_WAY`]; how many.
    fn cancel_stalled(&mut self) -> usize {
        let before = self.streams.len();
        self.streams
            .retain(|w| !(w.stalled_for() >= GIVE_WAY && w.cancel()));
        before - self.streams.len()
    }
}

/// One open shard stream of a trainer; closing it (dropping this) frees its place.
pub(crate) struct OpenStream {
    shared: Arc<Shared>,
    trainer: String,
    watch: Arc<Watch>,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let mut trainers = lock(&self.shared.trainers);
        if let Some(t) = trainers.get_mut(&self.trainer) {
            t.streams.retain(|w| !Arc::ptr_eq(w, &self.watch));
            if t.idle() {
                trainers.remove(&self.trainer);
            }
        }
    }
}

impl Shared {
    pub(crate) fn new(
        engine: Arc<dyn Batches>,
        config: ServerConfig,
        stop: watch::Sender<Option<StopReason>>,
    ) -> Self {
        let sample_bytes = engine.sample_bytes();
        Shared {
            engine,
            last_contact: Mutex::new(Instant::now()),
            heard_from: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            stop,
            trainers: Mutex::new(HashMap::new()),
            finished: Mutex::new(BTreeSet::new()),
            samples_served: AtomicU64::new(0),
            queued: AtomicU32::new(0),
            logs: Logs::default(),
            rate: Mutex::new((Instant::now(), 0)),
            sample_bytes,
            budget: Budget::new(config.memory_budget),
            bodies: Budget::new(budget::BODIES),
            config,
        }
    }

    /// A trainer was heard from: the watchdog starts over.
    pub(crate) fn touch(&self) {
        *lock(&self.last_contact) = Instant::now();
        self.heard_from.store(true, Ordering::Relaxed);
    }

    /// Whether a trainer has been heard from at least once.
    pub(crate) fn heard_from_trainers(&self) -> bool {
        self.heard_from.load(Ordering::Relaxed)
    }

    /// How long no trainer has been heard from.
    pub(crate) fn silent_for(&self) -> std::time::Duration {
        lock(&self.last_contact).elapsed()
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Why the server stopped, once it has.
    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        self.stop.borrow().clone()
    }

    /// Record that trainer host `host` finished (none named: the caller speaks for every
    /// host); the trainer hosts still training, empty when the server should stop. A host
    /// that is not one of the job's trainer hosts is refused, failed or not: only a trainer of
    /// this job may end it.
    pub(crate) fn finished(&self, host: &str, failed: bool) -> Result<Vec<String>, Refusal> {
        // Outside a job any trainer may end the service. Inside one only a trainer host does
        // (an empty host, too, is no trainer host): a peer with the token could otherwise
        // stop every server while the job's trainers still train.
        if self.config.trainer_hosts.is_empty() {
            return Ok(Vec::new());
        }
        if !self.config.is_trainer_host(host) {
            return Err(Refusal::NotOurHost {
                host: host.to_owned(),
                hosts: self.config.trainer_hosts.clone(),
            });
        }
        if failed {
            return Ok(Vec::new());
        }
        let mut finished = lock(&self.finished);
        finished.insert(host.to_owned());
        Ok(self
            .config
            .trainer_hosts
            .iter()
            .filter(|h| !finished.contains(*h))
            .cloned()
            .collect())
    }

    pub(crate) fn request_stop(&self, reason: StopReason) {
        self.stopping.store(true, Ordering::SeqCst);
        self.stop.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }

    pub(crate) fn stats(&self) -> ServerStats {
        let served = self.samples_served.load(Ordering::Relaxed);
        let mut rate = lock(&self.rate);
        let elapsed = rate.0.elapsed().as_secs_f64();
        let samples_per_s = if elapsed > 0.0 {
            (served - rate.1) as f64 / elapsed
        } else {
            0.0
        };
        *rate = (Instant::now(), served);
        ServerStats {
            samples_per_s,
            queue_depth: self.queued.load(Ordering::Relaxed),
            busy_threads: self.engine.busy_threads() as u32,
            samples_served: served,
        }
    }

    /// The most a shard stream of `batch_size` holds at once ([`budget::stream_bytes`]).
    pub(crate) fn stream_bytes(&self, batch_size: u32) -> u64 {
        budget::stream_bytes(batch_size, self.sample_bytes)
    }

    /// Reserve what a stream of `trainer` with `batch_size` may hold from the server-wide
    /// budget, waiting up to [`budget::WAIT`] for other streams to end.
    ///
    /// Short of room, every stream stalled for [`GIVE_WAY`] is cancelled first: what it holds
    /// is wanted by one that progresses. If none was, and the stream wants more than a fair
    /// share of the budget (the budget divided among the trainers streaming, this one
    /// included), it is refused at once: waiting, it would only queue for room that others,
    /// within their shares, are entitled to.
    pub(crate) async fn reserve_stream(
        &self,
        trainer: &str,
        batch_size: u32,
    ) -> Result<Reservation, Refusal> {
        let bytes = self.stream_bytes(batch_size);
        let free = self.budget.bytes() - self.budget.in_use();
        if free < bytes {
            let mut trainers = lock(&self.trainers);
            let cancelled: usize = trainers.values_mut().map(Trainer::cancel_stalled).sum();
            self.log_gave_way(cancelled, "the memory budget");
            let streaming = trainers
                .iter()
                .filter(|(id, t)| !t.streams.is_empty() && id.as_str() != trainer)
                .count() as u64
                + 1;
            let share = self.budget.bytes() / streaming;
            if cancelled == 0 && bytes > share {
                return Err(Refusal::OverFairShare {
                    needed_mib: bytes.div_ceil(1 << 20),
                    free_mib: free >> 20,
                    share_mib: share >> 20,
                    trainers: streaming,
                    budget_mib: self.budget.mib(),
                    var: budget::MEMORY_VAR,
                });
            }
        }
        self.budget
            .reserve(bytes, budget::WAIT)
            .await
            .map_err(|short| match short {
                Short::Never => self.batch_over_budget(batch_size),
                Short::Busy => Refusal::BudgetBusy {
                    needed_mib: bytes.div_ceil(1 << 20),
                    budget_mib: self.budget.mib(),
                    waited_s: budget::WAIT.as_secs(),
                    var: budget::MEMORY_VAR,
                },
            })
    }

    /// The refusal of a batch no stream could hold within the whole budget.
    pub(crate) fn batch_over_budget(&self, batch_size: u32) -> Refusal {
        let per_sample = budget::BATCHES_PER_STREAM * (self.sample_bytes as u64 + 16);
        Refusal::BatchOverBudget {
            batch_size,
            bytes: self.sample_bytes.saturating_mul(batch_size as usize),
            max_batch: self.budget.bytes() / per_sample,
            budget_mib: self.budget.mib(),
            var: budget::MEMORY_VAR,
        }
    }

    fn log_gave_way(&self, cancelled: usize, to: &str) {
        if cancelled > 0
            && let Some(suppressed) = self.logs.gave_way.allow()
        {
            tracing::warn!(
                cancelled,
                to,
                suppressed,
                "shard streams stalled for {} s gave way",
                GIVE_WAY.as_secs()
            );
        }
    }

    /// Count a stream (`watch`) against its trainer's limits and remember the shard as
    /// unacknowledged.
    pub(crate) fn admit(
        self: &Arc<Self>,
        request: &ShardRequest,
        watch: Arc<Watch>,
    ) -> Result<OpenStream, Refusal> {
        let id = &request.trainer_id;
        let mut trainers = lock(&self.trainers);
        if !trainers.contains_key(id) && trainers.len() >= MAX_TRAINERS {
            // Full: the trainer silent the longest with no stream open gives way, else the one
            // whose streams have all stalled the longest, for [`GIVE_WAY`] at least. Only its
            // unacknowledged shards are forgotten (a late Ack of one is NOT_FOUND, which
            // clients ignore), so no one, however many ids they use, locks a trainer out.
            let stalest = trainers
                .iter()
                .filter(|(_, t)| t.streams.is_empty())
                .min_by_key(|(_, t)| t.last_seen)
                .map(|(id, _)| id.clone())
                .or_else(|| {
                    trainers
                        .iter()
                        .filter_map(|(id, t)| Some((id, t.stalled_for()?)))
                        .filter(|(_, stalled)| *stalled >= GIVE_WAY)
                        .max_by_key(|(_, stalled)| *stalled)
                        .map(|(id, _)| id.clone())
                });
            match stalest.and_then(|old| trainers.remove(&old)) {
                Some(mut old) => {
                    let cancelled = old.cancel_stalled();
                    self.log_gave_way(cancelled, "a new trainer");
                }
                None => return Err(Refusal::TrainerTableFull),
            };
        }
        let trainer = trainers.entry(id.clone()).or_default();
        trainer.last_seen = Instant::now();
        let cap = self.config.max_streams_per_trainer;
        if trainer.streams.len() >= cap {
            // Its own streams that stalled make room for one that will progress.
            let cancelled = trainer.cancel_stalled();
            self.log_gave_way(cancelled, "a new stream of their trainer");
        }
        if trainer.streams.len() >= cap {
            return Err(Refusal::TooManyStreams {
                trainer: id.clone(),
                open: trainer.streams.len(),
                cap,
            });
        }
        trainer.streams.push(watch.clone());
        let key = (request.epoch, request.shard);
        if !trainer.unacked.contains(&key) {
            trainer.unacked.push_back(key);
            if trainer.unacked.len() > self.config.max_unacked_per_trainer
                && let Some((epoch, shard)) = trainer.unacked.pop_front()
                && let Some(suppressed) = self.logs.forgotten.allow()
            {
                tracing::warn!(trainer = %LogId(id), epoch, shard, suppressed, "too many unacknowledged shards; forgetting the oldest");
            }
        }
        Ok(OpenStream {
            shared: self.clone(),
            trainer: id.clone(),
            watch,
        })
    }

    /// Take `shards` of `epoch` off what `trainer` owes an Ack for; the first one this server
    /// never streamed to it (or that was acknowledged or forgotten already) is refused.
    pub(crate) fn acknowledge(
        &self,
        trainer_id: &str,
        epoch: u32,
        shards: &[u32],
    ) -> Result<(), Refusal> {
        let mut trainers = lock(&self.trainers);
        let missing = match trainers.get_mut(trainer_id) {
            None => shards.first().copied(),
            Some(trainer) => {
                trainer.last_seen = Instant::now();
                let missing = shards.iter().copied().find(|shard| {
                    let key = (epoch, *shard);
                    match trainer.unacked.iter().position(|k| *k == key) {
                        Some(i) => {
                            trainer.unacked.remove(i);
                            false
                        }
                        None => true,
                    }
                });
                if trainer.idle() {
                    trainers.remove(trainer_id);
                }
                missing
            }
        };
        match missing {
            Some(shard) => Err(Refusal::NeverStreamed {
                trainer: trainer_id.to_owned(),
                epoch,
                shard,
            }),
            None => Ok(()),
        }
    }
}
