//! How a data server is set up ([`ServerConfig`] and its defaults), and the limits on what a
//! client may send that no setting changes.

use std::time::Duration;

use hetgen_pipeline::Batches;

use super::budget;
use super::stall::DEFAULT_STALL;

/// Most sample ids one shard request may carry.
pub const MAX_SHARD_SAMPLES: usize = 1 << 20;
/// Largest batch size a request may ask for.
pub const MAX_BATCH_SIZE: u32 = 1 << 16;
/// Largest body of a unary call (Handshake, Ack, Heartbeat, Shutdown); real ones are tens of
/// bytes, an Ack of a thousand shards a few KiB.
pub const MAX_UNARY_REQUEST: usize = 64 << 10;
/// Longest trainer id, in bytes (hetgen's are `<host>/rank-<n>`).
pub const MAX_TRAINER_ID: usize = 256;
/// Most trainers one server keeps track of at once.
pub const MAX_TRAINERS: usize = 1024;
/// The largest rank a trainer id may name (a job of 65 536 processes).
pub const MAX_RANK: u32 = 65_535;

/// How a data server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// This server's name in handshakes and logs, e.g. `algo-1`.
    pub server_id: String,
    /// The job's token.
    pub token: String,
    /// Exit after this long without hearing from any trainer.
    pub watchdog: Duration,
    /// Whether the watchdog also runs before the first trainer is heard from. Where every
    /// host starts at once (SageMaker, a local run), trainers that have not called within the
    /// watchdog never will. On Kubernetes the trainer pods are created only once every data
    /// pod is Ready, and GPU node provisioning, an image pull and the launcher's start take as
    /// long as they take: there the watchdog starts at the first trainer's contact, and a job
    /// that ends before any trainer called ends its data pods itself (JobSet deletes the
    /// active Jobs of a finished JobSet).
    pub watch_from_start: bool,
    /// Shards a trainer may stream from this server at once.
    pub max_inflight_shards: u32,
    /// Shard streams one trainer may hold open at once; more are refused. Above
    /// `max_inflight_shards`, for a stream that ends while its successor starts.
    pub max_streams_per_trainer: usize,
    /// Streamed, unacknowledged shards remembered per trainer; the oldest are forgotten past it.
    pub max_unacked_per_trainer: usize,
    /// How often to log the server's counters.
    pub log_every: Duration,
    /// The job's trainer hosts. A Shutdown naming one of them stops the server only once all
    /// have finished; empty: every Shutdown stops it at once.
    pub trainer_hosts: Vec<String>,
    /// The job's trainer processes (ranks), when known: an id naming a rank at or above it is
    /// refused, so that a caller cannot pose as more trainers than the job has.
    pub world_size: Option<u32>,
    /// Bytes of batches in flight and request bodies arriving, all peers together
    /// (`budget`).
    pub memory_budget: u64,
    /// Connections open at once (`connections`).
    pub max_connections: usize,
    /// A connection from which nothing arrives for this long is closed.
    pub idle_timeout: Duration,
    /// A shard stream that makes no progress for this long is cancelled (`stall`).
    pub stall_timeout: Duration,
    /// The job's other data servers (host, port): once the trainers have gone quiet and none
    /// of these answers, the job is over ([`ORPHAN_QUIET`](super::watchdog::ORPHAN_QUIET)).
    pub peers: Vec<(String, u16)>,
}

/// Connections open at once by default: a trainer process holds one per data server, so this
/// is room for a job of a thousand GPUs, at about 20 KiB of kernel and server memory each.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Idle timeout by default: a trainer heartbeats every second, and the server pings every
/// [`KEEPALIVE`], so only a peer that says nothing for this long is closed.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);
/// HTTP/2 keep-alive: a connection that sent nothing for this long is pinged, and closed if
/// the ping is not answered within as long again (a trainer host that vanished without a FIN).
pub const KEEPALIVE: Duration = Duration::from_secs(20);

impl ServerConfig {
    /// Size the memory budget for a job whose `trainers` processes stream batches of
    /// `batch_size` samples of `sample_bytes` ([`budget::for_job`]).
    pub fn budget_for_job(&mut self, trainers: usize, batch_size: u32, sample_bytes: usize) {
        let stream = budget::stream_bytes(batch_size, sample_bytes);
        self.memory_budget = budget::for_job(trainers, self.max_streams_per_trainer, stream);
    }

    /// Whether `host` is one of the job's trainer hosts.
    pub(super) fn is_trainer_host(&self, host: &str) -> bool {
        self.trainer_hosts.iter().any(|h| h == host)
    }

    /// Defaults for `server_id` and `token`: a 120 s watchdog, and enough shards in flight to
    /// keep the pool busy while the trainer acknowledges and re-requests.
    pub fn new(server_id: String, token: String, engine: &dyn Batches) -> Self {
        let max_inflight_shards = crate::max_inflight_shards(engine);
        let max_streams_per_trainer = 2 * max_inflight_shards as usize + 2;
        Self {
            server_id,
            token,
            watchdog: Duration::from_secs(120),
            watch_from_start: true,
            max_inflight_shards,
            max_streams_per_trainer,
            max_unacked_per_trainer: 4096,
            log_every: Duration::from_secs(10),
            trainer_hosts: Vec::new(),
            world_size: None,
            memory_budget: budget::for_job(1, max_streams_per_trainer, 0),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE,
            stall_timeout: DEFAULT_STALL,
            peers: Vec::new(),
        }
    }
}
