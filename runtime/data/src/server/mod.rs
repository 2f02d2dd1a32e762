//! The data role: serve `hetgen.data.v1.DataService` from this instance's pipeline engine.
//!
//! Every shard request runs on the job's [`Batches`] (the pipeline engine, or a Python dataset's
//! workers), on a blocking thread while its client keeps up ([`shard`]), and streams its
//! batches through a two-batch channel, so a trainer that stops reading stops the pipeline
//! (gRPC flow control does the rest) instead of filling memory, and holds no thread; a stream
//! stalled for long is cancelled ([`stall`]). The server stops, and
//! [`serve`] returns why, on the trainer's Shutdown, on the caller's stop signal (SIGTERM), or
//! when its watchdog has heard nothing from any trainer for longer than the configured time.
//!
//! ## Limits per client
//!
//! Before any request, `connections` bounds the connections (a cap, guests without the token
//! closed after a few seconds and giving way first, the quietest next, idle ones closed, an
//! accept loop that backs off out of descriptors), and the HTTP/2 settings
//! bound each one (keep-alive pings, requests at once, small receive windows);
//! `transport` gives a request body 10 s to arrive. Every call is then authenticated
//! ([`crate::auth`]), and nothing a client sends may grow without bound:
//!
//! - The unary calls (Handshake, Ack, Heartbeat, Shutdown) read at most
//!   [`MAX_UNARY_REQUEST`] bytes; a larger body is `RESOURCE_EXHAUSTED` before it is buffered,
//!   a malformed one `INVALID_ARGUMENT` and a compressed one `UNIMPLEMENTED`.
//! - A trainer id is at most [`MAX_TRAINER_ID`] bytes, and goes into logs escaped and cut
//!   short ([`LogId`]). Inside a job it must name one of its trainer hosts and a rank
//!   (`algo-3/rank-0`).
//! - A trainer may have [`ServerConfig::max_streams_per_trainer`] shard streams open at once;
//!   one more is `RESOURCE_EXHAUSTED` unless one of its streams has stalled and gives way. At
//!   most [`MAX_TRAINERS`] trainers are tracked; when the table is full the one silent the
//!   longest without an open stream gives way, else one whose streams have all stalled.
//! - The shards streamed and not yet acknowledged are remembered per trainer up to
//!   [`ServerConfig::max_unacked_per_trainer`]; past that the oldest are forgotten (a late Ack
//!   of one is `NOT_FOUND`, which the client ignores).
//! - What costs memory is counted in bytes, in one `budget` for all peers: a stream reserves
//!   its worst case when it opens, a shard request body its bytes as they arrive.
//!
//! **Worst case memory of a stalled stream** (a client that opens a shard and stops reading):
//! the engine stops at the channel, so the stream holds the two batches queued in it, the one
//! the engine has made and is waiting to queue, and the one hyper is writing (its head and its
//! image buffer): at most 4 × the batch's size (`batch_size × height × width × channels`
//! bytes), whatever the shard's length. A 256-sample 224×224×3 batch is 38.5 MB, so one stalled
//! stream holds at most ~154 MB, and all streams together at most the budget.
//!
//! Every refusal is a `refusal::Refusal`, mapped to its gRPC status in one place.

pub(crate) mod budget;
pub(crate) mod connections;
pub(crate) mod refusal;
pub(crate) mod service;
pub(crate) mod shard;
pub(crate) mod stall;
mod state;
mod trainer_id;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use hetgen_pipeline::Batches;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::MAX_MESSAGE_BYTES;
use crate::auth::RequireToken;
use crate::proto::data_service_server::DataServiceServer;
use crate::transport::{RECEIVE_CONNECTION_WINDOW, RECEIVE_STREAM_WINDOW, ZeroCopyShards};
pub use budget::MEMORY_VAR;
use connections::Connections;
pub use connections::{IDLE_VAR, MAX_CONNECTIONS_VAR};
use service::Service;
pub use stall::{DEFAULT_STALL, STALL_VAR};
use state::Shared;
pub use trainer_id::LogId;

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
    /// of these answers, the job is over ([`ORPHAN_QUIET`]).
    pub peers: Vec<(String, u16)>,
}

/// Trainers silent this long (a live one heartbeats every second while it streams) make a
/// server ask whether the job's other data servers still run; when none does, the job is over
/// and the server stops instead of waiting out its watchdog. The other servers stopped on the
/// trainers' Shutdown; this one missed it, frozen (or cut off) when the trainers finished, and
/// the trainers, which do not wait for a server that does not answer, have gone since.
pub const ORPHAN_QUIET: Duration = Duration::from_secs(10);

/// How often a server whose trainers are quiet asks after its peers.
const PEER_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Connections open at once by default: a trainer process holds one per data server, so this
/// is room for a job of a thousand GPUs, at about 20 KiB of kernel and server memory each.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Idle timeout by default: a trainer heartbeats every second, and the server pings every
/// [`KEEPALIVE`], so only a peer that says nothing for this long is closed.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);
/// HTTP/2 keep-alive: a connection that sent nothing for this long is pinged, and closed if
/// the ping is not answered within as long again (a trainer host that vanished without a FIN).
pub const KEEPALIVE: Duration = Duration::from_secs(20);
/// Requests in flight on one connection beyond a trainer's shard streams: its Heartbeat, Ack,
/// Handshake and Shutdown.
const UNARY_PER_CONNECTION: u32 = 4;

impl ServerConfig {
    /// Size the memory budget for a job whose `trainers` processes stream batches of
    /// `batch_size` samples of `sample_bytes` ([`budget::for_job`]).
    pub fn budget_for_job(&mut self, trainers: usize, batch_size: u32, sample_bytes: usize) {
        let stream = state::stream_bytes(batch_size, sample_bytes);
        self.memory_budget = budget::for_job(trainers, self.max_streams_per_trainer, stream);
    }

    /// Whether `host` is one of the job's trainer hosts.
    fn is_trainer_host(&self, host: &str) -> bool {
        self.trainer_hosts.iter().any(|h| h == host)
    }

    /// Defaults for `server_id` and `token`: a 120 s watchdog, and enough shards in flight to
    /// keep the pool busy while the trainer acknowledges and re-requests.
    pub fn new(server_id: String, token: String, engine: &dyn Batches) -> Self {
        let max_inflight_shards = crate::max_inflight_shards(engine.threads());
        let max_streams_per_trainer = 2 * max_inflight_shards as usize + 2;
        Self {
            server_id,
            token,
            watchdog: Duration::from_secs(120),
            max_inflight_shards,
            max_streams_per_trainer,
            max_unacked_per_trainer: 4096,
            log_every: Duration::from_secs(10),
            trainer_hosts: Vec::new(),
            memory_budget: budget::for_job(1, max_streams_per_trainer, 0),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE,
            stall_timeout: DEFAULT_STALL,
            peers: Vec::new(),
        }
    }
}

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

/// The server failed to run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be read or the transport failed.
    #[error("data service transport failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serve on `listener` until Shutdown, the watchdog, or `stop` completes; returns why.
pub async fn serve(
    engine: Arc<dyn Batches>,
    config: ServerConfig,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<StopReason, ServeError> {
    let (stop_tx, mut stop_rx) = watch::channel(None);
    let shared = Arc::new(Shared::new(engine, config, stop_tx));
    tracing::info!(
        server = %shared.config.server_id,
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        threads = shared.engine.threads(),
        samples_per_epoch = shared.engine.samples_per_epoch(),
        memory_budget_mib = shared.budget.mib(),
        max_connections = shared.config.max_connections,
        idle_timeout_s = shared.config.idle_timeout.as_secs_f64(),
        "data server listening"
    );

    // The caller's stop signal and the watchdog both end up as a stop request.
    let on_stop = shared.clone();
    tokio::spawn(async move {
        stop.await;
        on_stop.request_stop(StopReason::Stopped);
    });
    tokio::spawn(watchdog(shared.clone()));

    let service = DataServiceServer::new(Service(shared.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let service = ZeroCopyShards {
        inner: service,
        service: Service(shared.clone()),
    };
    // A request with the job's token vouches for its connection: it is no guest any more.
    let mut require_token = RequireToken::new(shared.config.token.clone());
    let service = tonic::service::interceptor::InterceptedService::new(
        service,
        move |request: tonic::Request<()>| {
            let request = tonic::service::Interceptor::call(&mut require_token, request)?;
            if let Some(peer) = request.extensions().get::<connections::Peer>() {
                peer.vouch();
            }
            Ok(request)
        },
    );
    let connections = Connections::new(shared.config.max_connections, shared.config.idle_timeout);
    let incoming = connections::incoming(listener, connections);
    let per_connection = shared.config.max_streams_per_trainer as u32 + UNARY_PER_CONNECTION;
    let mut stopped = stop_rx.clone();
    let server = tonic::transport::Server::builder()
        .initial_stream_window_size(RECEIVE_STREAM_WINDOW)
        .initial_connection_window_size(RECEIVE_CONNECTION_WINDOW)
        .max_concurrent_streams(per_connection)
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stopped.wait_for(Option::is_some).await;
        });
    // A graceful shutdown waits for open streams; streams notice `stopping` at their next batch,
    // but a stuck client must not hold the process: give in-flight calls one second.
    let mut server = std::pin::pin!(server);
    tokio::select! {
        result = &mut server => result?,
        _ = async {
            let _ = stop_rx.wait_for(Option::is_some).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        } => {}
    }
    let reason = shared.stop_reason().unwrap_or(StopReason::Stopped);
    tracing::info!(%reason, "data server stopped");
    Ok(reason)
}

/// Whether any of `peers` accepts a connection within a second. A frozen peer does (its
/// kernel accepts for it), so only servers that have exited, and hosts that are gone, count
/// as not running.
async fn any_peer_answers(peers: &[(String, u16)]) -> bool {
    let Ok(table) = hetgen_env::HostsFile::from_env() else {
        return true;
    };
    for (host, port) in peers {
        let Ok(address) = crate::job::resolve(&table, host, *port).await else {
            continue;
        };
        let connect = tokio::net::TcpStream::connect(address);
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), connect).await {
            return true;
        }
    }
    false
}

/// Every 200 ms: stop the server when no trainer has been heard from for the watchdog's time,
/// log the counters every `log_every`, and give memory back once a peak has passed (the
/// allocator keeps freed batches for speed, [`hetgen_pipeline::tune_allocator`]).
async fn watchdog(shared: Arc<Shared>) {
    let limit = shared.config.watchdog;
    let mut last_log = Instant::now();
    let mut peak = budget::PeakWatch::default();
    let mut peers_asked: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200).min(limit)).await;
        let silent = shared.silent_for();
        if silent > limit {
            shared.request_stop(StopReason::Watchdog(limit));
            return;
        }
        if silent >= ORPHAN_QUIET
            && shared.heard_from_trainers()
            && !shared.config.peers.is_empty()
            && peers_asked.is_none_or(|at| at.elapsed() >= PEER_CHECK_EVERY)
        {
            peers_asked = Some(Instant::now());
            if !any_peer_answers(&shared.config.peers).await {
                shared.request_stop(StopReason::Orphaned(silent));
                return;
            }
        }
        let in_use = shared.budget.in_use();
        if let Some(was) = peak.passed(in_use) {
            hetgen_pipeline::release_free_memory();
            tracing::debug!(
                peak_mib = was >> 20,
                in_use_mib = in_use >> 20,
                "returned free memory after a peak"
            );
        }
        if last_log.elapsed() >= shared.config.log_every {
            last_log = Instant::now();
            let s = shared.stats();
            tracing::info!(
                samples_per_s = format!("{:.1}", s.samples_per_s),
                queue_depth = s.queue_depth,
                busy_threads = s.busy_threads,
                samples_served = s.samples_served,
                budget_in_use_mib = in_use >> 20,
                "data server counters"
            );
        }
    }
}
