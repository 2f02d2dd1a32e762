//! The data port while this host is still building its pipeline.
//!
//! A Python dataset's factory may take minutes (an index to read, a manifest to list). Were the
//! port closed meanwhile, a trainer would see only refused connections and, at its connect
//! timeout, fail blaming the network. So the port answers from the start: every call is
//! `UNAVAILABLE` with [`BUILDING`] and the seconds spent so far, which a trainer reports
//! ("waiting for algo-1: dataset still building: 40 s") and retries. Nothing is served and no
//! token is needed to learn that a host is building; the health service is not here, so a
//! readiness probe fails until the real server takes over the same socket.

use std::future::Future;
use std::time::Instant;

use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::config::{DEFAULT_IDLE, DEFAULT_MAX_CONNECTIONS};
use super::connections::{self, Connections};
use crate::proto::data_service_server::{DataService, DataServiceServer};
use crate::proto::{
    AckRequest, AckResponse, Batch, HandshakeRequest, HandshakeResponse, HeartbeatRequest,
    HeartbeatResponse, ShardRequest, ShutdownRequest, ShutdownResponse,
};

/// How an `UNAVAILABLE` answer says the host is still building its dataset; the seconds so far
/// follow (`dataset still building: 40 s`).
pub const BUILDING: &str = "dataset still building";

/// The seconds a [`BUILDING`] answer says, if `message` is one.
pub fn building_for(message: &str) -> Option<u64> {
    message
        .strip_prefix(BUILDING)?
        .strip_prefix(": ")?
        .strip_suffix(" s")?
        .parse()
        .ok()
}

struct Starting {
    since: Instant,
}

impl Starting {
    fn unavailable(&self) -> Status {
        Status::unavailable(format!("{BUILDING}: {} s", self.since.elapsed().as_secs()))
    }
}

type NoBatches = tokio_stream::Empty<Result<Batch, Status>>;

#[tonic::async_trait]
impl DataService for Starting {
    async fn handshake(
        &self,
        _: Request<HandshakeRequest>,
    ) -> Result<Response<HandshakeResponse>, Status> {
        Err(self.unavailable())
    }

    type StreamShardStream = NoBatches;

    async fn stream_shard(&self, _: Request<ShardRequest>) -> Result<Response<NoBatches>, Status> {
        Err(self.unavailable())
    }

    async fn ack(&self, _: Request<AckRequest>) -> Result<Response<AckResponse>, Status> {
        Err(self.unavailable())
    }

    async fn heartbeat(
        &self,
        _: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        Err(self.unavailable())
    }

    async fn shutdown(
        &self,
        _: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        Err(self.unavailable())
    }
}

/// Answer [`BUILDING`] on `listener` until `built` completes, then close its connections
/// (their clients connect again, to the real server on the same socket).
/// Connections are limited as the real server's are by default (its limits from the
/// environment are read once the pipeline is built).
pub async fn answer_while_building(
    listener: TcpListener,
    built: impl Future<Output = ()> + Send + 'static,
) {
    let since = Instant::now();
    let connections = Connections::new(DEFAULT_MAX_CONNECTIONS, DEFAULT_IDLE);
    let incoming = connections::incoming(listener, connections);
    let served = tonic::transport::Server::builder()
        .add_service(DataServiceServer::new(Starting { since }))
        .serve_with_incoming_shutdown(incoming, built)
        .await;
    if let Err(e) = served {
        // The real server binds nothing new: it serves the same socket, and says if it fails.
        tracing::warn!(error = %e, "answering while the dataset builds failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_building_answer_says_its_seconds() {
        let starting = Starting {
            since: Instant::now(),
        };
        assert_eq!(building_for(starting.unavailable().message()), Some(0));
        assert_eq!(building_for("dataset still building: 40 s"), Some(40));
        assert_eq!(building_for("shutting down"), None);
    }
}
