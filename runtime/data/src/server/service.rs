//! The gRPC service: Handshake, Ack, Heartbeat and Shutdown. StreamShard is served by the
//! transport in front of it ([`super::transport`]); the plain tonic method here opens the same
//! stream ([`shard::open`]).

use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::connections::Peer;
use super::flow::BatchOrError;
use super::log_id::LogId;
use super::refusal::Refusal;
use super::shard;
use super::stall::Watch;
use super::state::{Shared, StopReason};
use super::trainer_id::check_trainer_id;
use crate::PROTOCOL_VERSION;
use crate::proto::data_service_server::DataService;
use crate::proto::{
    AckRequest, AckResponse, DType, HandshakeRequest, HandshakeResponse, HeartbeatRequest,
    HeartbeatResponse, ShardRequest, ShutdownRequest, ShutdownResponse, TensorSpec,
};

#[derive(Clone)]
pub(crate) struct Service(pub(crate) Arc<Shared>);

/// A shard's batches as the plain tonic service streams them, telling the stream's watch when
/// it is dropped, as the transport's body does.
pub(crate) struct BatchStream {
    batches: ReceiverStream<BatchOrError>,
    watch: Arc<Watch>,
}

impl tokio_stream::Stream for BatchStream {
    type Item = BatchOrError;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<BatchOrError>> {
        let next = std::pin::Pin::new(&mut self.batches).poll_next(cx);
        if next.is_ready() {
            self.watch.progressed();
        }
        next
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.watch.body_dropped();
    }
}

#[tonic::async_trait]
impl DataService for Service {
    async fn handshake(
        &self,
        request: Request<HandshakeRequest>,
    ) -> Result<Response<HandshakeResponse>, Status> {
        let request = request.into_inner();
        if request.protocol_version != PROTOCOL_VERSION {
            return Err(Refusal::Protocol(request.protocol_version).into());
        }
        check_trainer_id(&request.trainer_id, &self.0.config)?;
        self.0.touch();
        if let Some(suppressed) = self.0.logs.connected.allow() {
            tracing::info!(trainer = %LogId(&request.trainer_id), suppressed, "trainer connected");
        }
        let [h, w, c] = self.0.engine.output_shape();
        // A Python dataset's batches describe their own tensors.
        let tensors = if h == 0 {
            Vec::new()
        } else {
            vec![
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
            ]
        };
        Ok(Response::new(HandshakeResponse {
            protocol_version: PROTOCOL_VERSION,
            server_id: self.0.config.server_id.clone(),
            cores: self.0.engine.threads() as u32,
            max_inflight_shards: self.0.config.max_inflight_shards,
            tensors,
            samples_per_epoch: self.0.engine.samples_per_epoch(),
            shards: self.0.engine.shards().unwrap_or(0),
        }))
    }

    type StreamShardStream = BatchStream;

    /// Served by [`super::transport`] in front of this service; here for completeness of the
    /// generated trait (and for any caller of the plain tonic service).
    async fn stream_shard(
        &self,
        request: Request<ShardRequest>,
    ) -> Result<Response<BatchStream>, Status> {
        // The making of the batches holds the reservation until the stream is over.
        let peer = request.extensions().get::<Peer>().cloned();
        let open = shard::open(self.0.clone(), request.into_inner(), peer).await?;
        Ok(Response::new(BatchStream {
            batches: ReceiverStream::new(open.batches),
            watch: open.watch,
        }))
    }

    async fn ack(&self, request: Request<AckRequest>) -> Result<Response<AckResponse>, Status> {
        let request = request.into_inner();
        check_trainer_id(&request.trainer_id, &self.0.config)?;
        self.0.touch();
        self.0
            .acknowledge(&request.trainer_id, request.epoch, &request.shards)?;
        Ok(Response::new(AckResponse {}))
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
