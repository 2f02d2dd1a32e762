//! The data role: serve `hetgen.data.v1.DataService` from this instance's pipeline engine.
//!
//! Every shard request runs on the shared [`Engine`] pool in a blocking task and streams its
//! batches through a two-batch channel, so a trainer that stops reading stops the pipeline
//! (gRPC flow control does the rest) instead of filling memory. The server stops, and
//! [`serve`] returns why, on the trainer's Shutdown, on the caller's stop signal (SIGTERM), or
//! when its watchdog has heard nothing from any trainer for longer than the configured time.
//!
//! ## Limits per client
//!
//! Every call is authenticated first ([`crate::auth`]); then nothing a client sends may grow
//! without bound:
//!
//! - The unary calls (Handshake, Ack, Heartbeat, Shutdown) read at most
//!   [`MAX_UNARY_REQUEST`] bytes; a larger body is `RESOURCE_EXHAUSTED` before it is buffered,
//!   a malformed one `INVALID_ARGUMENT` and a compressed one `UNIMPLEMENTED`.
//! - A trainer id is at most [`MAX_TRAINER_ID`] bytes, and goes into logs escaped and cut
//!   short ([`LogId`]).
//! - A trainer may have [`ServerConfig::max_streams_per_trainer`] shard streams open at once;
//!   one more is `RESOURCE_EXHAUSTED`. At most [`MAX_TRAINERS`] trainers are tracked; when the
//!   table is full the one silent the longest without an open stream gives way. Inside a job
//!   a trainer id must name one of its trainer hosts and a rank (`algo-3/rank-0`).
//! - The shards streamed and not yet acknowledged are remembered per trainer up to
//!   [`ServerConfig::max_unacked_per_trainer`]; past that the oldest are forgotten (a late Ack
//!   of one is `NOT_FOUND`, which the client ignores).
//!
//! **Worst case memory of a stalled stream** (a client that opens a shard and stops reading):
//! the engine stops at the channel, so the stream holds the two batches queued in it, the one
//! the engine has made and is waiting to queue, and the one hyper is writing (its head and its
//! image buffer): at most 4 × the batch's size (`batch_size × height × width × channels`
//! bytes, kept under the message limit when the shard is requested), whatever the shard's length.
//! A 256-sample 224×224×3 batch is 38.5 MB, so one stalled stream holds at most ~154 MB and one
//! trainer at most `max_streams_per_trainer` times that; the HTTP/2 windows only bound what is
//! in the kernel's buffers and the client's.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hetgen_pipeline::{Engine, PipelineError};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::codegen::http;
use tonic::{Request, Response, Status};

use crate::auth::RequireToken;
use crate::checksum::batch_checksum;
use crate::proto::data_service_server::{DataService, DataServiceServer};
use crate::proto::{
    AckRequest, AckResponse, Batch, DType, HandshakeRequest, HandshakeResponse, HeartbeatRequest,
    HeartbeatResponse, ServerStats, ShardRequest, ShutdownRequest, ShutdownResponse, TensorSpec,
};
use crate::throttle::LogThrottle;
use crate::wire;
use crate::{CONNECTION_WINDOW, MAX_FRAME, MAX_MESSAGE_BYTES, PROTOCOL_VERSION, STREAM_WINDOW};

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

/// What a data server serves: a shard's samples as batches. Every job serves its pipeline
/// [`Engine`]; the loopback benchmark serves prepared batches, to time the service alone.
pub trait Batches: Send + Sync + 'static {
    /// Per-sample `[height, width, channels]` of the `u8` images.
    fn output_shape(&self) -> [u32; 3];
    /// Samples per epoch of the source.
    fn samples_per_epoch(&self) -> u64;
    /// Cores that make the batches.
    fn threads(&self) -> usize;
    /// Cores busy right now.
    fn busy_threads(&self) -> usize;
    /// Turn `ids` into batches of `batch_size` in order, calling `emit` with each; stop early
    /// when it returns `false`.
    fn run_shard(
        &self,
        epoch: u32,
        shard: u32,
        ids: &[u64],
        batch_size: u32,
        emit: &mut dyn FnMut(hetgen_pipeline::Batch) -> bool,
    ) -> Result<(), PipelineError>;
}

impl Batches for Engine {
    fn output_shape(&self) -> [u32; 3] {
        Engine::output_shape(self)
    }
    fn samples_per_epoch(&self) -> u64 {
        Engine::samples_per_epoch(self)
    }
    fn threads(&self) -> usize {
        Engine::threads(self)
    }
    fn busy_threads(&self) -> usize {
        Engine::busy_threads(self)
    }
    fn run_shard(
        &self,
        epoch: u32,
        shard: u32,
        ids: &[u64],
        batch_size: u32,
        emit: &mut dyn FnMut(hetgen_pipeline::Batch) -> bool,
    ) -> Result<(), PipelineError> {
        Engine::run_shard(self, epoch, shard, ids, batch_size, emit)
    }
}

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
}

/// Shards a producer with a pool of `threads` keeps in flight: enough to keep the pool busy
/// while the trainer acknowledges and re-requests. A server offers this many credits, and the
/// trainer's own pipeline (hybrid input) takes as many.
pub(crate) fn max_inflight_shards(threads: usize) -> u32 {
    (threads as u32).div_ceil(8).max(2)
}

impl ServerConfig {
    /// Whether `host` is one of the job's trainer hosts.
    fn is_trainer_host(&self, host: &str) -> bool {
        self.trainer_hosts.iter().any(|h| h == host)
    }

    /// Defaults for `server_id` and `token`: a 120 s watchdog, and enough shards in flight to
    /// keep the pool busy while the trainer acknowledges and re-requests.
    pub fn new(server_id: String, token: String, engine: &dyn Batches) -> Self {
        let max_inflight_shards = max_inflight_shards(engine.threads());
        Self {
            server_id,
            token,
            watchdog: Duration::from_secs(120),
            max_inflight_shards,
            max_streams_per_trainer: 2 * max_inflight_shards as usize + 2,
            max_unacked_per_trainer: 4096,
            log_every: Duration::from_secs(10),
            trainer_hosts: Vec::new(),
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

struct Shared {
    engine: Arc<dyn Batches>,
    config: ServerConfig,
    last_contact: Mutex<Instant>,
    stopping: AtomicBool,
    stop: watch::Sender<Option<StopReason>>,
    /// Per trainer: its open streams and the shards streamed and not yet acknowledged.
    trainers: Mutex<HashMap<String, Trainer>>,
    /// Trainer hosts that said they finished.
    finished: Mutex<BTreeSet<String>>,
    samples_served: AtomicU64,
    queued: AtomicU32,
    /// Budgets of the log lines a peer causes at will.
    logs: Logs,
    rate: Mutex<(Instant, u64)>,
    sample_bytes: usize,
}

impl Shared {
    fn touch(&self) {
        *self.last_contact.lock().expect("lock poisoned") = Instant::now();
    }

    /// Record that trainer host `host` finished (none named: the caller speaks for every
    /// host); the trainer hosts still training, empty when the server should stop. A host
    /// that is not one of the job's trainer hosts is refused, failed or not: only a trainer of
    /// this job may end it.
    fn finished(&self, host: &str, failed: bool) -> Result<Vec<String>, Status> {
        if host.is_empty() || self.config.trainer_hosts.is_empty() {
            return Ok(Vec::new());
        }
        if !self.config.is_trainer_host(host) {
            return Err(Status::permission_denied(format!(
                "`{}` is not a trainer host of this job ({})",
                LogId(host),
                self.config.trainer_hosts.join(", ")
            )));
        }
        if failed {
            return Ok(Vec::new());
        }
        let mut finished = self.finished.lock().expect("lock poisoned");
        finished.insert(host.to_owned());
        Ok(self
            .config
            .trainer_hosts
            .iter()
            .filter(|h| !finished.contains(*h))
            .cloned()
            .collect())
    }

    fn request_stop(&self, reason: StopReason) {
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

    fn stats(&self) -> ServerStats {
        let served = self.samples_served.load(Ordering::Relaxed);
        let mut rate = self.rate.lock().expect("lock poisoned");
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
}

/// One budget per kind of line a peer can cause ([`crate::throttle`]).
#[derive(Default)]
struct Logs {
    connected: LogThrottle,
    forgotten: LogThrottle,
    finished: LogThrottle,
    failed: LogThrottle,
}

/// What the server keeps per trainer.
struct Trainer {
    /// Shard streams open now.
    streams: usize,
    /// (epoch, shard) streamed and not yet acknowledged, oldest first.
    unacked: VecDeque<(u32, u32)>,
    /// When it last opened a stream or acknowledged one.
    last_seen: Instant,
}

impl Default for Trainer {
    fn default() -> Self {
        Trainer {
            streams: 0,
            unacked: VecDeque::new(),
            last_seen: Instant::now(),
        }
    }
}

impl Trainer {
    /// Nothing open and nothing owed: the entry can go.
    fn idle(&self) -> bool {
        self.streams == 0 && self.unacked.is_empty()
    }
}

/// A trainer id as logs and messages show it: escaped (no control or bidirectional characters
/// reach a terminal) and cut to 64 characters.
pub struct LogId<'a>(pub &'a str);

impl std::fmt::Display for LogId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 64;
        for c in self.0.chars().take(SHOWN) {
            if c.is_ascii_graphic() || c == ' ' {
                write!(f, "{c}")?;
            } else {
                write!(f, "{}", c.escape_unicode())?;
            }
        }
        let total = self.0.chars().count();
        if total > SHOWN {
            write!(f, "… ({total} characters)")?;
        }
        Ok(())
    }
}

/// Refuse trainer ids no hetgen trainer sends. Inside a job (`trainer_hosts` known) an id
/// names one of its trainer hosts and a rank, `<host>/rank-<n>`, as every hetgen client
/// sends it (or `<host>/launcher`, the trainer host's launcher saying it finished): a caller
/// cannot make up trainers to fill the server's table.
fn check_trainer_id(id: &str, config: &ServerConfig) -> Result<(), Status> {
    if id.len() > MAX_TRAINER_ID {
        return Err(Status::invalid_argument(format!(
            "trainer id `{}` is {} bytes; at most {MAX_TRAINER_ID}",
            LogId(id),
            id.len()
        )));
    }
    if config.trainer_hosts.is_empty() {
        return Ok(());
    }
    let ours = id.rsplit_once('/').is_some_and(|(host, who)| {
        let rank = who.strip_prefix("rank-");
        config.is_trainer_host(host)
            && (who == "launcher"
                || rank.is_some_and(|r| {
                    !r.starts_with('+') && r.parse::<u32>().is_ok_and(|r| r <= MAX_RANK)
                }))
    });
    if ours {
        Ok(())
    } else {
        Err(Status::permission_denied(format!(
            "trainer id `{}` names no trainer of this job: ids are `<trainer host>/rank-<0..={MAX_RANK}>` or `<trainer host>/launcher`, the trainer hosts {}",
            LogId(id),
            config.trainer_hosts.join(", ")
        )))
    }
}

/// One open shard stream of a trainer; closing it (dropping this) frees its place.
struct OpenStream {
    shared: Arc<Shared>,
    trainer: String,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let mut trainers = self.shared.trainers.lock().expect("lock poisoned");
        if let Some(t) = trainers.get_mut(&self.trainer) {
            t.streams = t.streams.saturating_sub(1);
            if t.idle() {
                trainers.remove(&self.trainer);
            }
        }
    }
}

#[derive(Clone)]
struct Service(Arc<Shared>);

impl Service {
    /// Check a shard request and start preprocessing it; its batches arrive on the receiver.
    fn open_shard(&self, request: ShardRequest) -> Result<mpsc::Receiver<BatchOrError>, Status> {
        let shared = self.0.clone();
        validate_shard(&shared, &request)?;
        if shared.stopping.load(Ordering::SeqCst) {
            return Err(Status::unavailable("this data server is shutting down"));
        }
        let open = self.admit(&request)?;
        shared.touch();
        let (tx, rx) = mpsc::channel(2);
        tokio::task::spawn_blocking(move || {
            run_shard(&shared, request, tx);
            drop(open);
        });
        Ok(rx)
    }

    /// Count the stream against its trainer's limits and remember the shard as unacknowledged.
    fn admit(&self, request: &ShardRequest) -> Result<OpenStream, Status> {
        let shared = &self.0;
        let id = &request.trainer_id;
        let mut trainers = shared.trainers.lock().expect("lock poisoned");
        if !trainers.contains_key(id) && trainers.len() >= MAX_TRAINERS {
            // Full: the trainer silent the longest with no stream open gives way. Only its
            // unacknowledged shards are forgotten (a late Ack of one is NOT_FOUND, which
            // clients ignore), so no one, however many ids they use, locks a trainer out.
            let stalest = trainers
                .iter()
                .filter(|(_, t)| t.streams == 0)
                .min_by_key(|(_, t)| t.last_seen)
                .map(|(id, _)| id.clone());
            match stalest {
                Some(old) => {
                    trainers.remove(&old);
                }
                None => {
                    return Err(Status::resource_exhausted(format!(
                        "this data server has streams open for {MAX_TRAINERS} trainers already"
                    )));
                }
            }
        }
        let trainer = trainers.entry(id.clone()).or_default();
        trainer.last_seen = Instant::now();
        let cap = shared.config.max_streams_per_trainer;
        if trainer.streams >= cap {
            return Err(Status::resource_exhausted(format!(
                "trainer `{}` has {} shard streams open on this server; at most {cap} at once",
                LogId(id),
                trainer.streams
            )));
        }
        trainer.streams += 1;
        let key = (request.epoch, request.shard);
        if !trainer.unacked.contains(&key) {
            trainer.unacked.push_back(key);
            if trainer.unacked.len() > shared.config.max_unacked_per_trainer
                && let Some((epoch, shard)) = trainer.unacked.pop_front()
                && let Some(suppressed) = shared.logs.forgotten.allow()
            {
                tracing::warn!(trainer = %LogId(id), epoch, shard, suppressed, "too many unacknowledged shards; forgetting the oldest");
            }
        }
        Ok(OpenStream {
            shared: shared.clone(),
            trainer: id.clone(),
        })
    }
}

type BatchOrError = Result<Batch, Status>;

/// The path of the StreamShard method.
const STREAM_SHARD: &str = "/hetgen.data.v1.DataService/StreamShard";
/// Largest StreamShard request body read (the sample ids of one shard, with room to spare).
const MAX_SHARD_REQUEST: usize = 16 * MAX_SHARD_SAMPLES;

/// Serves StreamShard itself, writing each batch as two HTTP/2 data chunks ([`wire`]) so its
/// images are never copied into an encode buffer; every other method goes to the tonic service.
/// It sits behind the token check, like the tonic service.
#[derive(Clone)]
struct ZeroCopyShards<S> {
    inner: S,
    service: Service,
}

impl<S> tonic::server::NamedService for ZeroCopyShards<S> {
    const NAME: &'static str = <DataServiceServer<Service> as tonic::server::NamedService>::NAME;
}

type HttpRequest = http::Request<tonic::body::Body>;
type HttpResponse = http::Response<tonic::body::Body>;

/// Whether a message's bytes are one request message of its method.
type CheckMessage = fn(&[u8]) -> Result<(), prost::DecodeError>;

/// The unary methods, each with a check that its body is its request message.
const UNARY: [(&str, CheckMessage); 4] = [
    ("/hetgen.data.v1.DataService/Handshake", |m| {
        <HandshakeRequest as prost::Message>::decode(m).map(drop)
    }),
    ("/hetgen.data.v1.DataService/Ack", |m| {
        <AckRequest as prost::Message>::decode(m).map(drop)
    }),
    ("/hetgen.data.v1.DataService/Heartbeat", |m| {
        <HeartbeatRequest as prost::Message>::decode(m).map(drop)
    }),
    ("/hetgen.data.v1.DataService/Shutdown", |m| {
        <ShutdownRequest as prost::Message>::decode(m).map(drop)
    }),
];

/// The message of a request body that must be exactly one uncompressed gRPC frame.
fn one_frame(body: &[u8]) -> Result<&[u8], Status> {
    // One gRPC frame: a compression flag, a big-endian length, the message.
    let [flag, a, b, c, d, message @ ..] = body else {
        return Err(Status::invalid_argument("request is not one gRPC frame"));
    };
    if *flag != 0 {
        return Err(Status::unimplemented(
            "compressed requests are not accepted by this data server",
        ));
    }
    let size = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if message.len() != size {
        return Err(Status::invalid_argument(format!(
            "request frame says {size} bytes but carries {}",
            message.len()
        )));
    }
    Ok(message)
}

/// The body of a request, read up to `limit` bytes: a larger one is refused before it is
/// buffered.
async fn read_body(body: tonic::body::Body, limit: usize) -> Result<bytes::Bytes, Status> {
    use http_body_util::BodyExt;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Status::resource_exhausted(
            format!("request body over {limit} bytes"),
        )),
        Err(e) => Err(Status::invalid_argument(format!("request unreadable: {e}"))),
    }
}

/// A unary call's body, checked to be one uncompressed frame of its request message, for the
/// tonic service to decode again: a bad body is the client's fault, not an `INTERNAL` error.
async fn unary_body(check: CheckMessage, body: tonic::body::Body) -> Result<bytes::Bytes, Status> {
    let bytes = read_body(body, MAX_UNARY_REQUEST + 5).await?;
    let message = one_frame(&bytes)?;
    check(message).map_err(|e| Status::invalid_argument(format!("malformed request: {e}")))?;
    Ok(bytes)
}

impl<S> tonic::codegen::Service<HttpRequest> for ZeroCopyShards<S>
where
    S: tonic::codegen::Service<HttpRequest, Response = HttpResponse, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        let path = request.uri().path();
        if let Some((_, check)) = UNARY.iter().find(|(p, _)| *p == path) {
            let check = *check;
            // The inner (generated) service is always ready; a clone serves this call.
            let mut inner = self.inner.clone();
            let (parts, body) = request.into_parts();
            return Box::pin(async move {
                match unary_body(check, body).await {
                    Ok(bytes) => {
                        let body = tonic::body::Body::new(http_body_util::Full::new(bytes));
                        inner.call(http::Request::from_parts(parts, body)).await
                    }
                    Err(status) => Ok(status.into_http()),
                }
            });
        }
        if path != STREAM_SHARD {
            return Box::pin(self.inner.call(request));
        }
        let service = self.service.clone();
        Box::pin(async move {
            Ok(match shard_response(&service, request).await {
                Ok(response) => response,
                Err(status) => status.into_http(),
            })
        })
    }
}

async fn shard_response(service: &Service, request: HttpRequest) -> Result<HttpResponse, Status> {
    let body = read_body(request.into_body(), MAX_SHARD_REQUEST).await?;
    let message = one_frame(&body)?;
    let request = <ShardRequest as prost::Message>::decode(message)
        .map_err(|e| Status::invalid_argument(format!("malformed shard request: {e}")))?;
    let batches = service.open_shard(request)?;
    let body = BatchBody {
        batches,
        images: None,
        done: false,
    };
    http::Response::builder()
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::new(body))
        .map_err(|e| Status::internal(e.to_string()))
}

/// The response body of a shard: per batch its head, then its images; gRPC trailers last.
struct BatchBody {
    batches: mpsc::Receiver<BatchOrError>,
    /// The images of the batch whose head went out last.
    images: Option<bytes::Bytes>,
    done: bool,
}

impl http_body::Body for BatchBody {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        if let Some(images) = self.images.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(images))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let trailers = |status: Status| {
            let mut map = http::HeaderMap::new();
            // Only a message that cannot be a header fails; the status code still goes out.
            if status.add_header(&mut map).is_err() {
                Status::new(status.code(), "").add_header(&mut map).ok();
            }
            Poll::Ready(Some(Ok(http_body::Frame::trailers(map))))
        };
        match self.batches.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(batch))) => match wire::batch_frame(batch) {
                Ok((head, images)) => {
                    self.images = (!images.is_empty()).then_some(images);
                    Poll::Ready(Some(Ok(http_body::Frame::data(head))))
                }
                Err(why) => {
                    self.done = true;
                    trailers(Status::internal(why))
                }
            },
            Poll::Ready(Some(Err(status))) => {
                self.done = true;
                trailers(status)
            }
            Poll::Ready(None) => {
                self.done = true;
                trailers(Status::ok(""))
            }
        }
    }
}

type BatchStream = ReceiverStream<Result<Batch, Status>>;

#[tonic::async_trait]
impl DataService for Service {
    async fn handshake(
        &self,
        request: Request<HandshakeRequest>,
    ) -> Result<Response<HandshakeResponse>, Status> {
        let request = request.into_inner();
        if request.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "protocol version {} is not spoken here: this data server speaks version {PROTOCOL_VERSION}; render and build the job's launcher with one hetgen release",
                request.protocol_version
            )));
        }
        check_trainer_id(&request.trainer_id, &self.0.config)?;
        self.0.touch();
        if let Some(suppressed) = self.0.logs.connected.allow() {
            tracing::info!(trainer = %LogId(&request.trainer_id), suppressed, "trainer connected");
        }
        let [h, w, c] = self.0.engine.output_shape();
        Ok(Response::new(HandshakeResponse {
            protocol_version: PROTOCOL_VERSION,
            server_id: self.0.config.server_id.clone(),
            cores: self.0.engine.threads() as u32,
            max_inflight_shards: self.0.config.max_inflight_shards,
            tensors: vec![
                TensorSpec {
                    name: "images".into(),
                    dtype: DType::DtypeUint8 as i32,
                    shape: vec![h, w, c],
                },
                TensorSpec {
                    name: "labels".into(),
                    dtype: DType::DtypeInt64 as i32,
                    shape: vec![],
                },
            ],
            samples_per_epoch: self.0.engine.samples_per_epoch(),
        }))
    }

    type StreamShardStream = BatchStream;

    /// Served by [`ZeroCopyShards`] in front of this service; here for completeness of the
    /// generated trait (and for any caller of the plain tonic service).
    async fn stream_shard(
        &self,
        request: Request<ShardRequest>,
    ) -> Result<Response<BatchStream>, Status> {
        let batches = self.open_shard(request.into_inner())?;
        Ok(Response::new(ReceiverStream::new(batches)))
    }

    async fn ack(&self, request: Request<AckRequest>) -> Result<Response<AckResponse>, Status> {
        let request = request.into_inner();
        check_trainer_id(&request.trainer_id, &self.0.config)?;
        self.0.touch();
        let mut trainers = self.0.trainers.lock().expect("lock poisoned");
        // The first shard this server does not owe the trainer, if any.
        let missing = match trainers.get_mut(&request.trainer_id) {
            None => request.shards.first().copied(),
            Some(trainer) => {
                trainer.last_seen = Instant::now();
                let missing = request.shards.iter().copied().find(|shard| {
                    let key = (request.epoch, *shard);
                    match trainer.unacked.iter().position(|k| *k == key) {
                        Some(i) => {
                            trainer.unacked.remove(i);
                            false
                        }
                        None => true,
                    }
                });
                if trainer.idle() {
                    trainers.remove(&request.trainer_id);
                }
                missing
            }
        };
        match missing {
            Some(shard) => Err(Status::not_found(format!(
                "shard {shard} of epoch {} was never streamed to trainer `{}` by this server (or was acknowledged already, or forgotten)",
                request.epoch,
                LogId(&request.trainer_id)
            ))),
            None => Ok(Response::new(AckResponse {})),
        }
    }

    async fn heartbeat(
        &self,
        _request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        self.0.touch();
        Ok(Response::new(HeartbeatResponse {
            stats: Some(self.0.stats()),
        }))
    }

    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        let request = request.into_inner();
        let reason = request.reason;
        let waiting_for = self.0.finished(&request.trainer_host, request.failed)?;
        if waiting_for.is_empty() {
            tracing::info!(reason = %LogId(&reason), "shutdown requested by a trainer");
            self.0.request_stop(StopReason::Shutdown(reason));
        } else if let Some(suppressed) = self.0.logs.finished.allow() {
            tracing::info!(
                host = %LogId(&request.trainer_host),
                waiting_for = ?waiting_for,
                suppressed,
                "a trainer host finished; serving the others"
            );
        }
        Ok(Response::new(ShutdownResponse { waiting_for }))
    }
}

/// Refuse requests no honest trainer sends, before any work is done.
fn validate_shard(shared: &Shared, request: &ShardRequest) -> Result<(), Status> {
    check_trainer_id(&request.trainer_id, &shared.config)?;
    if request.sample_ids.is_empty() {
        return Err(Status::invalid_argument(
            "shard request carries no sample ids",
        ));
    }
    if request.sample_ids.len() > MAX_SHARD_SAMPLES {
        return Err(Status::invalid_argument(format!(
            "shard request carries {} sample ids; at most {MAX_SHARD_SAMPLES} per shard",
            request.sample_ids.len()
        )));
    }
    if request.batch_size == 0 || request.batch_size > MAX_BATCH_SIZE {
        return Err(Status::invalid_argument(format!(
            "batch size {} is outside 1..={MAX_BATCH_SIZE}",
            request.batch_size
        )));
    }
    let bytes = shared
        .sample_bytes
        .saturating_mul(request.batch_size as usize);
    if bytes > MAX_MESSAGE_BYTES - (1 << 20) {
        return Err(Status::invalid_argument(format!(
            "a batch of {} samples is {bytes} bytes, over the {MAX_MESSAGE_BYTES}-byte message limit; use smaller batches",
            request.batch_size
        )));
    }
    let samples = shared.engine.samples_per_epoch();
    if let Some(bad) = request.sample_ids.iter().find(|id| **id >= samples) {
        return Err(Status::out_of_range(format!(
            "unknown sample {bad}: the source has {samples} samples per epoch"
        )));
    }
    Ok(())
}

/// Runs on a blocking thread: preprocess the shard and feed the response stream.
fn run_shard(shared: &Shared, request: ShardRequest, tx: mpsc::Sender<BatchOrError>) {
    let batches = request
        .sample_ids
        .len()
        .div_ceil(request.batch_size as usize) as u32;
    let mut sent_batches = 0u32;
    let mut emit = |batch: hetgen_pipeline::Batch| {
        if shared.stopping.load(Ordering::SeqCst) {
            return false;
        }
        let n = batch.len() as u64;
        let checksum = batch_checksum(&batch.images, &batch.sample_ids, &batch.labels);
        let message = Batch {
            epoch: batch.epoch,
            shard: batch.shard,
            index: batch.index,
            last: batch.index + 1 == batches,
            sample_ids: batch.sample_ids,
            labels: batch.labels,
            images: batch.images,
            checksum,
        };
        shared.queued.fetch_add(1, Ordering::Relaxed);
        let sent = tx.blocking_send(Ok(message)).is_ok();
        shared.queued.fetch_sub(1, Ordering::Relaxed);
        if sent {
            sent_batches += 1;
            shared.samples_served.fetch_add(n, Ordering::Relaxed);
            shared.touch();
        }
        sent
    };
    let result = shared.engine.run_shard(
        request.epoch,
        request.shard,
        &request.sample_ids,
        request.batch_size,
        &mut emit,
    );
    match result {
        Err(e) => {
            if let Some(suppressed) = shared.logs.failed.allow() {
                tracing::error!(epoch = request.epoch, shard = request.shard, error = %e, suppressed, "shard failed");
            }
            let _ = tx.blocking_send(Err(Status::data_loss(format!(
                "shard {} of epoch {}: {e}",
                request.shard, request.epoch
            ))));
        }
        // Cut short by a stop (SIGTERM, Shutdown, the watchdog): the stream must not end OK, or
        // a client that does not count batches would take the shard as complete.
        Ok(()) if sent_batches < batches && !tx.is_closed() => {
            let _ = tx.blocking_send(Err(Status::unavailable(format!(
                "this data server is stopping: shard {} of epoch {} ends after {sent_batches} of {batches} batches",
                request.shard, request.epoch
            ))));
        }
        Ok(()) => {}
    }
}

/// Serve on `listener` until Shutdown, the watchdog, or `stop` completes; returns why.
pub async fn serve(
    engine: Arc<dyn Batches>,
    config: ServerConfig,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<StopReason, ServeError> {
    let [h, w, c] = engine.output_shape();
    let (stop_tx, mut stop_rx) = watch::channel(None);
    let shared = Arc::new(Shared {
        engine,
        last_contact: Mutex::new(Instant::now()),
        stopping: AtomicBool::new(false),
        stop: stop_tx,
        trainers: Mutex::new(HashMap::new()),
        finished: Mutex::new(BTreeSet::new()),
        logs: Logs::default(),
        samples_served: AtomicU64::new(0),
        queued: AtomicU32::new(0),
        rate: Mutex::new((Instant::now(), 0)),
        sample_bytes: (h * w * c) as usize,
        config,
    });
    tracing::info!(
        server = %shared.config.server_id,
        address = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        threads = shared.engine.threads(),
        samples_per_epoch = shared.engine.samples_per_epoch(),
        "data server listening"
    );

    // The caller's stop signal and the watchdog both end up as a stop request.
    let on_stop = shared.clone();
    tokio::spawn(async move {
        stop.await;
        on_stop.request_stop(StopReason::Stopped);
    });
    let watchdog = shared.clone();
    tokio::spawn(async move {
        let limit = watchdog.config.watchdog;
        let mut last_log = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_millis(200).min(limit)).await;
            let silent = watchdog
                .last_contact
                .lock()
                .expect("lock poisoned")
                .elapsed();
            if silent > limit {
                watchdog.request_stop(StopReason::Watchdog(limit));
                return;
            }
            if last_log.elapsed() >= watchdog.config.log_every {
                last_log = Instant::now();
                let s = watchdog.stats();
                tracing::info!(
                    samples_per_s = format!("{:.1}", s.samples_per_s),
                    queue_depth = s.queue_depth,
                    busy_threads = s.busy_threads,
                    samples_served = s.samples_served,
                    "data server counters"
                );
            }
        }
    });

    let service = DataServiceServer::new(Service(shared.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let service = ZeroCopyShards {
        inner: service,
        service: Service(shared.clone()),
    };
    let service = tonic::service::interceptor::InterceptedService::new(
        service,
        RequireToken::new(shared.config.token.clone()),
    );
    // No Nagle: a batch's last partial segment must not wait for the previous one's ACK.
    let incoming = tokio_stream::StreamExt::map(TcpListenerStream::new(listener), |socket| {
        if let Ok(socket) = &socket {
            socket.set_nodelay(true).ok();
        }
        socket
    });
    let mut stopped = stop_rx.clone();
    let server = tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
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
    let reason = shared.stop.borrow().clone().unwrap_or(StopReason::Stopped);
    tracing::info!(%reason, "data server stopped");
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::LogId;

    #[test]
    fn trainer_ids_in_logs_are_escaped_and_cut_short() {
        assert_eq!(LogId("algo-2/rank-0").to_string(), "algo-2/rank-0");
        assert_eq!(
            LogId("evil\u{202e}\n\u{1b}[2J").to_string(),
            "evil\\u{202e}\\u{a}\\u{1b}[2J"
        );
        let long = "x".repeat(100_000);
        assert_eq!(
            LogId(&long).to_string(),
            format!("{}… (100000 characters)", "x".repeat(64))
        );
    }
}
