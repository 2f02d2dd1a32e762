//! The data service's HTTP/2 layer, in front of the generated tonic service: every request
//! body is read under a limit and checked to be one uncompressed gRPC frame of its message
//! before anything decodes it, and StreamShard is served here, writing each batch as two data
//! chunks ([`crate::wire`]) so its images are never copied into an encode buffer. It sits
//! behind the token check, like the tonic service.
//!
//! The wire format is in three places that belong together: the .proto (`runtime/proto`),
//! [`crate::wire`] (a batch's bytes) and this module (how they are framed on a stream).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tonic::Status;
use tonic::codegen::http;

use super::budget::{self, Reservation};
use super::config::{MAX_SHARD_SAMPLES, MAX_UNARY_REQUEST};
use super::connections::Peer;
use super::flow::BatchOrError;
use super::refusal::Refusal;
use super::shard;
use super::stall::Watch;
use super::state::Shared;
use crate::proto::{AckRequest, HandshakeRequest, HeartbeatRequest, ShardRequest, ShutdownRequest};
use crate::wire;

/// The path of the StreamShard method.
const STREAM_SHARD: &str = "/hetgen.data.v1.DataService/StreamShard";
/// Largest StreamShard request body read (the sample ids of one shard, with room to spare).
const MAX_SHARD_REQUEST: usize = 16 * MAX_SHARD_SAMPLES;
/// Time for a request's whole body to arrive once its headers have: a trainer sends a request
/// in one go, so only a peer that holds a body open on purpose is cut off.
pub(crate) const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The server's HTTP/2 receive windows: they bound what a peer can make the server buffer of
/// request bodies it has not read yet. Requests are small (a shard's ids); the large windows
/// that let batches flow are the client's ([`crate::STREAM_WINDOW`]).
pub(crate) const RECEIVE_STREAM_WINDOW: u32 = 1 << 20;
/// Receive window of a whole connection (all its requests together).
pub(crate) const RECEIVE_CONNECTION_WINDOW: u32 = 2 << 20;

/// Serves StreamShard itself and checks every unary body before the tonic service `inner`
/// decodes it.
#[derive(Clone)]
pub(crate) struct ZeroCopyShards<S> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared>,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for ZeroCopyShards<S> {
    const NAME: &'static str = S::NAME;
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
fn one_frame(body: &[u8]) -> Result<&[u8], Refusal> {
    // One gRPC frame: a compression flag, a big-endian length, the message.
    let [flag, a, b, c, d, message @ ..] = body else {
        return Err(Refusal::NotOneFrame);
    };
    if *flag != 0 {
        return Err(Refusal::Compressed);
    }
    let said = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
    if message.len() != said {
        return Err(Refusal::FrameLength {
            said,
            carried: message.len(),
        });
    }
    Ok(message)
}

/// The body of a request, read up to `limit` bytes within [`BODY_DEADLINE`]: a larger one is
/// refused before it is buffered.
async fn read_body(body: tonic::body::Body, limit: usize) -> Result<bytes::Bytes, Refusal> {
    let collect = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(BODY_DEADLINE, collect).await {
        Err(_) => Err(Refusal::BodyDeadline {
            seconds: BODY_DEADLINE.as_secs(),
        }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(Refusal::BodyTooLarge { limit })
        }
        Ok(Err(e)) => Err(Refusal::Unreadable(e.to_string())),
    }
}

/// A shard request's body, read within [`BODY_DEADLINE`]. Its bytes are reserved from the
/// server's budget of request bodies as they arrive (never the size its frame header
/// declares), not from the data budget, so a request is read whatever the batches in flight
/// hold; the reservation ends with the body.
async fn shard_body(shared: &Shared, body: tonic::body::Body) -> Result<bytes::Bytes, Refusal> {
    let budget = &shared.bodies;
    let read = async {
        let mut body = std::pin::pin!(body);
        let mut bytes = bytes::BytesMut::new();
        let mut reserved: Option<Reservation> = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Refusal::Unreadable(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if bytes.len() + data.len() > MAX_SHARD_REQUEST + 5 {
                return Err(Refusal::BodyTooLarge {
                    limit: MAX_SHARD_REQUEST + 5,
                });
            }
            let more = budget
                .reserve(data.len() as u64, budget::WAIT)
                .await
                .map_err(|short| match short {
                    budget::Short::Never => Refusal::BodyTooLarge {
                        limit: budget.bytes() as usize,
                    },
                    budget::Short::Busy => Refusal::BodyBudgetBusy {
                        size: bytes.len() + data.len(),
                        budget_mib: budget.mib(),
                        waited_s: budget::WAIT.as_secs(),
                    },
                })?;
            match &mut reserved {
                Some(reserved) => reserved.join(more),
                None => reserved = Some(more),
            }
            bytes.extend_from_slice(&data);
            // A frame that says it is larger than any shard request is refused before the rest
            // of it arrives.
            if bytes.len() >= 5 {
                let said = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
                if said > MAX_SHARD_REQUEST {
                    return Err(Refusal::BodyTooLarge {
                        limit: MAX_SHARD_REQUEST + 5,
                    });
                }
            }
        }
        Ok(bytes.freeze())
    };
    tokio::time::timeout(BODY_DEADLINE, read)
        .await
        .unwrap_or(Err(Refusal::BodyDeadline {
            seconds: BODY_DEADLINE.as_secs(),
        }))
}

/// A unary call's body, checked to be one uncompressed frame of its request message, for the
/// tonic service to decode again: a bad body is the client's fault, not an `INTERNAL` error.
async fn unary_body(check: CheckMessage, body: tonic::body::Body) -> Result<bytes::Bytes, Refusal> {
    let bytes = read_body(body, MAX_UNARY_REQUEST + 5).await?;
    let message = one_frame(&bytes)?;
    check(message).map_err(Refusal::Malformed)?;
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
                    Err(refusal) => Ok(Status::from(refusal).into_http()),
                }
            });
        }
        if path != STREAM_SHARD {
            return Box::pin(self.inner.call(request));
        }
        let shared = self.shared.clone();
        Box::pin(async move {
            Ok(match shard_response(shared, request).await {
                Ok(response) => response,
                Err(refusal) => Status::from(refusal).into_http(),
            })
        })
    }
}

async fn shard_response(
    shared: Arc<Shared>,
    request: HttpRequest,
) -> Result<HttpResponse, Refusal> {
    let peer = request.extensions().get::<Peer>().cloned();
    let body = shard_body(&shared, request.into_body()).await?;
    let message = one_frame(&body)?;
    let request =
        <ShardRequest as prost::Message>::decode(message).map_err(Refusal::MalformedShard)?;
    drop(body);
    let open = shard::open(shared, request, peer).await?;
    let body = BatchBody {
        batches: open.batches,
        images: None,
        done: false,
        _reservation: open.reservation,
        watch: open.watch,
    };
    http::Response::builder()
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::new(body))
        .map_err(|e| Refusal::Internal(e.to_string()))
}

/// The response body of a shard: per batch its head, then its images; gRPC trailers last.
struct BatchBody {
    batches: mpsc::Receiver<BatchOrError>,
    /// The images of the batch whose head went out last.
    images: Option<bytes::Bytes>,
    done: bool,
    /// The stream's share of the memory budget, given back when the response is dropped.
    _reservation: Arc<Reservation>,
    /// Told each time the client takes a batch's head or images (hyper asks for the next
    /// frame only once the client's window has room).
    watch: Arc<Watch>,
}

impl Drop for BatchBody {
    fn drop(&mut self) {
        self.watch.body_dropped();
    }
}

impl http_body::Body for BatchBody {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        if let Some(images) = self.images.take() {
            self.watch.progressed();
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
                    self.watch.progressed();
                    self.images = (!images.is_empty()).then_some(images);
                    Poll::Ready(Some(Ok(http_body::Frame::data(head))))
                }
                Err(why) => {
                    self.done = true;
                    trailers(Refusal::Internal(why).into())
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
