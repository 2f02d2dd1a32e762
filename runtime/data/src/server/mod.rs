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
//! - What costs memory is counted in bytes, in `budget`s for all peers: a stream reserves its
//!   worst case from the data budget when it opens, a shard request body its bytes from the
//!   bodies' budget as they arrive (a request never waits on batches in flight).
//!
//! **Worst case memory of a stalled stream** (a client that opens a shard and stops reading):
//! the engine stops at the channel, so the stream holds the two batches queued in it, the one
//! the engine has made and is waiting to queue, and the one hyper is writing (its head and its
//! image buffer): at most 4 × the batch's size (`batch_size × height × width × channels`
//! bytes), whatever the shard's length. A 256-sample 224×224×3 batch is 38.5 MB, so one stalled
//! stream holds at most ~154 MB, and all streams together at most the budget.
//!
//! Every refusal is a `refusal::Refusal`, mapped to its gRPC status in one place.
//!
//! The port also serves the standard `grpc.health.v1.Health` service, without the token, for
//! readiness probes (`health`).

mod budget;
mod config;
mod connections;
mod flow;
mod health;
mod lock;
mod log_id;
mod refusal;
mod service;
mod shard;
mod stall;
mod starting;
mod state;
mod stream;
mod trainer_id;
mod transport;
mod watchdog;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use hetgen_pipeline::Batches;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::MAX_MESSAGE_BYTES;
use crate::auth::RequireToken;
use crate::proto::data_service_server::DataServiceServer;
pub use budget::MEMORY_VAR;
pub use config::{
    DEFAULT_IDLE, DEFAULT_MAX_CONNECTIONS, KEEPALIVE, MAX_BATCH_SIZE, MAX_RANK, MAX_SHARD_SAMPLES,
    MAX_TRAINER_ID, MAX_TRAINERS, MAX_UNARY_REQUEST, ServerConfig,
};
use connections::Connections;
pub use connections::{IDLE_VAR, MAX_CONNECTIONS_VAR};
pub use log_id::LogId;
use service::Service;
pub use stall::{DEFAULT_STALL, STALL_VAR};
pub use starting::{BUILDING, answer_while_building, building_for};
use state::Shared;
pub use state::StopReason;
use transport::{RECEIVE_CONNECTION_WINDOW, RECEIVE_STREAM_WINDOW, ZeroCopyShards};
pub use watchdog::ORPHAN_QUIET;
use watchdog::watchdog;

/// Requests in flight on one connection beyond a trainer's shard streams: its Heartbeat, Ack,
/// Handshake and Shutdown.
const UNARY_PER_CONNECTION: u32 = 4;

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
        shared: shared.clone(),
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
    // Outside the token check: a readiness probe carries no token (see `health`).
    let health = health::service(stop_rx.clone()).await;
    let mut stopped = stop_rx.clone();
    let server = tonic::transport::Server::builder()
        .initial_stream_window_size(RECEIVE_STREAM_WINDOW)
        .initial_connection_window_size(RECEIVE_CONNECTION_WINDOW)
        .max_concurrent_streams(per_connection)
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .add_service(service)
        .add_service(health)
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
