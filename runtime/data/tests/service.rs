//! The data service in-process: servers on 127.0.0.1, the real client, real gRPC.

mod common;

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use hetgen_data::PROTOCOL_VERSION;
use hetgen_data::auth::AttachToken;
use hetgen_data::client::Client;
use hetgen_data::proto::data_service_client::DataServiceClient;
use hetgen_data::proto::{AckRequest, HandshakeRequest, ShardRequest, ShutdownRequest};
use hetgen_data::server::{Batches, StopReason};
use hetgen_pipeline::{Batch, BatchStream, ShardWork};
use tonic::Code;

/// Many epochs through one server with the fewest credits: a credit lost at any epoch
/// boundary would stall the stream long before the end.
#[test]
fn credits_survive_many_epoch_boundaries() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| c.max_inflight_shards = 1);
    let client = connect(&job, &hosts(&[&server]));
    let mut stream = client.stream(input(&job, &client, 12, false), None);
    let batches = drain(&mut stream);
    assert_exactly_once(&batches, 12, 600);
}

#[test]
fn three_servers_yield_every_sample_once_per_epoch() {
    let job = job();
    let servers = servers(&job, 3);
    let client = connect(&job, &hosts(&servers));
    assert_eq!(client.samples_per_epoch(), 600);
    let mut stream = client.stream(input(&job, &client, 2, false), None);
    let batches = drain(&mut stream);
    assert_exactly_once(&batches, 2, 600);
    assert!(batches.iter().all(|b| b.data.len() == b.len() * 8 * 8 * 3));
    // Batches of one shard arrive in index order, whatever the interleaving of shards.
    let mut next = std::collections::HashMap::new();
    for b in &batches {
        let expected = next.entry((b.epoch, b.shard)).or_insert(0);
        assert_eq!(b.index, *expected);
        *expected += 1;
    }
}

#[test]
fn deterministic_order_is_the_same_with_one_and_three_servers() {
    let job = job();
    let order = |n: usize| {
        let servers = servers(&job, n);
        let client = connect(&job, &hosts(&servers));
        let mut stream = client.stream(input(&job, &client, 2, true), None);
        drain(&mut stream)
    };
    let one = order(1);
    let three = order(3);
    assert_exactly_once(&one, 2, 600);
    assert_eq!(one, three, "same batches, same pixels, same order");
}

#[test]
fn a_resumed_stream_yields_exactly_the_rest() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |_| {});
    let client = connect(&job, &hosts(&[&server]));
    let mut first = client.stream(input(&job, &client, 2, false), None);
    let mut batches: Vec<_> = (0..23)
        .map(|_| first.next_batch().unwrap().unwrap())
        .collect();
    let position = first.position();
    drop(first);
    let mut rest = client.stream(input(&job, &client, 2, false), Some(position));
    batches.extend(drain(&mut rest));
    assert_exactly_once(&batches, 2, 600);
}

/// Hybrid input: `servers` and this host's own engine as one more source.
fn hybrid(
    job: &hetgen_spec::model::Job,
    servers: &[impl Borrow<TestServer>],
) -> hetgen_data::client::Client {
    connect(job, &hosts(servers))
        .with_local(engine(job))
        .unwrap()
}

#[test]
fn hybrid_input_yields_every_sample_once_and_both_sides_contribute() {
    let job = job();
    let servers = servers(&job, 2);
    let client = hybrid(&job, &servers);
    assert_eq!(client.local_threads(), 1);
    let mut stream = client.stream(input(&job, &client, 3, false), None);
    let batches = drain(&mut stream);
    assert_exactly_once(&batches, 3, 600);
    let counts = client.batches_by_source();
    assert_eq!(
        counts.values().sum::<u64>(),
        batches.len() as u64,
        "{counts:?}"
    );
    assert!(counts[hetgen_data::client::LOCAL_SOURCE] > 0, "{counts:?}");
    let remote: u64 = counts
        .iter()
        .filter(|(name, _)| *name != hetgen_data::client::LOCAL_SOURCE)
        .map(|(_, n)| n)
        .sum();
    assert!(remote > 0, "{counts:?}");
}

#[test]
fn deterministic_order_is_the_same_hybrid_remote_only_and_homogeneous() {
    let job = job();
    let servers = servers(&job, 2);
    let remote_client = connect(&job, &hosts(&servers));
    let config = input(&job, &remote_client, 2, true);
    let remote = drain(&mut remote_client.stream(config.clone(), None));
    let client = hybrid(&job, &servers);
    let mixed = drain(&mut client.stream(config.clone(), None));
    let homogeneous = drain(&mut hetgen_pipeline::LocalInput::new(
        engine(&job),
        config,
        None,
    ));
    assert_exactly_once(&remote, 2, 600);
    assert!(
        client.batches_by_source().values().all(|n| *n > 0),
        "every source made some: {:?}",
        client.batches_by_source()
    );
    assert!(remote == mixed, "hybrid and remote-only differ");
    assert!(homogeneous == mixed, "hybrid and homogeneous differ");
}

#[test]
fn a_resumed_hybrid_stream_continues_exactly() {
    let job = job();
    let servers = servers(&job, 2);
    let client = hybrid(&job, &servers);
    let config = input(&job, &client, 2, true);
    let whole = drain(&mut client.stream(config.clone(), None));
    let mut first = client.stream(config.clone(), None);
    let mut batches: Vec<_> = (0..23)
        .map(|_| first.next_batch().unwrap().unwrap())
        .collect();
    let position = first.position();
    drop(first);
    batches.extend(drain(&mut client.stream(config, Some(position))));
    assert_exactly_once(&batches, 2, 600);
    assert!(
        whole == batches,
        "the resumed run differs from the whole one"
    );
}

#[test]
fn hybrid_input_finishes_the_epoch_alone_when_every_server_is_lost() {
    let job = job();
    let mut a = TestServer::start(&job, "algo-1", |_| {});
    let client = hybrid(&job, &[&a]);
    let mut stream = client.stream(input(&job, &client, 2, false), None);
    let mut batches: Vec<_> = (0..10)
        .map(|_| stream.next_batch().unwrap().unwrap())
        .collect();
    a.stop();
    batches.extend(drain(&mut stream));
    assert_exactly_once(&batches, 2, 600);
}

type RawClient =
    DataServiceClient<tonic::codegen::InterceptedService<tonic::transport::Channel, AttachToken>>;

fn raw_client(server: &TestServer, token: &str) -> (tokio::runtime::Runtime, RawClient) {
    client_of(server, token, None)
}

/// The generated client on a runtime of its own, with `token`, receiving with an HTTP/2
/// stream window of `window` bytes (hyper's default without).
fn client_of(
    server: &TestServer,
    token: &str,
    window: Option<u32>,
) -> (tokio::runtime::Runtime, RawClient) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", server.address))
        .unwrap()
        .initial_stream_window_size(window);
    let channel = runtime.block_on(endpoint.connect()).unwrap();
    (
        runtime,
        DataServiceClient::with_interceptor(channel, AttachToken::new(token).unwrap()),
    )
}

/// A codec that sends and receives message bytes as they are.
#[derive(Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// StreamShard with `message` as the request's bytes, and the job's token.
async fn raw_stream_shard(server: &TestServer, message: Vec<u8>) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let path = "/hetgen.data.v1.DataService/StreamShard".parse().unwrap();
    let mut stream = grpc
        .server_streaming(request, path, Raw)
        .await?
        .into_inner();
    while stream.message().await?.is_some() {}
    Ok(())
}

#[test]
fn a_wrong_token_gets_unauthenticated_and_no_data() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |_| {});
    let (rt, mut client) = raw_client(&server, "not-the-job-token-at-all");
    let handshake = rt.block_on(client.handshake(HandshakeRequest {
        protocol_version: PROTOCOL_VERSION,
        trainer_id: "x".into(),
    }));
    assert_eq!(handshake.unwrap_err().code(), Code::Unauthenticated);
    let stream = rt.block_on(client.stream_shard(ShardRequest {
        epoch: 0,
        shard: 0,
        sample_ids: vec![1, 2],
        batch_size: 2,
        trainer_id: "x".into(),
        ..Default::default()
    }));
    assert_eq!(stream.unwrap_err().code(), Code::Unauthenticated);
    let shutdown = rt.block_on(client.shutdown(ShutdownRequest {
        reason: "evil".into(),
        ..Default::default()
    }));
    assert_eq!(shutdown.unwrap_err().code(), Code::Unauthenticated);
    assert!(
        server.stopped_within(Duration::from_millis(300)).is_none(),
        "still serving"
    );

    let mut config = client_config();
    config.token = "not-the-job-token-at-all".into();
    let err =
        hetgen_data::client::Client::connect(&hosts(&[&server]), job.pipeline.output_shape, config)
            .err()
            .unwrap();
    assert!(err.to_string().contains("Unauthenticated"), "{err}");
}

#[test]
fn bad_requests_get_clear_statuses_and_the_server_keeps_serving() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |_| {});
    let (rt, mut client) = raw_client(&server, TOKEN);
    let old = rt
        .block_on(client.handshake(HandshakeRequest {
            protocol_version: 99,
            trainer_id: "x".into(),
        }))
        .unwrap_err();
    assert_eq!(old.code(), Code::FailedPrecondition);
    assert!(old.message().contains("99"), "{}", old.message());
    let shard = |ids: Vec<u64>, batch_size| ShardRequest {
        epoch: 0,
        shard: 3,
        sample_ids: ids,
        batch_size,
        trainer_id: "x".into(),
        ..Default::default()
    };
    let cases = [
        (
            shard(vec![1, 600], 4),
            Code::OutOfRange,
            "unknown sample 600",
        ),
        (shard(vec![], 4), Code::InvalidArgument, "no sample ids"),
        (shard(vec![1], 0), Code::InvalidArgument, "batch size 0"),
        (
            shard(vec![1], u32::MAX),
            Code::InvalidArgument,
            "batch size",
        ),
        (
            shard(vec![0; (1 << 20) + 1], 4),
            Code::InvalidArgument,
            "at most",
        ),
        // A shard of a dataset of shards, from a server of images by sample id.
        (
            ShardRequest {
                stream: true,
                ..shard(vec![], 4)
            },
            Code::InvalidArgument,
            "the request is for a dataset of shards, but this data server's source is a source of samples by id",
        ),
    ];
    for (request, code, text) in cases {
        let status = rt.block_on(client.stream_shard(request)).unwrap_err();
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(status.message().contains(text), "{}", status.message());
    }
    // Bytes that are no ShardRequest at all, straight onto the wire.
    let status = rt
        .block_on(raw_stream_shard(&server, vec![0xff, 0xff, 0xff]))
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{}", status.message());
    assert!(
        status.message().contains("malformed shard request"),
        "{}",
        status.message()
    );
    let ack = rt
        .block_on(client.ack(AckRequest {
            epoch: 0,
            shards: vec![9],
            trainer_id: "x".into(),
        }))
        .unwrap_err();
    assert_eq!(ack.code(), Code::NotFound);
    // Still serving everyone.
    let client = connect(&job, &hosts(&[&server]));
    let mut stream = client.stream(input(&job, &client, 1, false), None);
    assert_exactly_once(&drain(&mut stream), 1, 600);
}

#[test]
fn shutdown_stops_every_server_within_two_seconds() {
    let job = job();
    let servers = servers(&job, 2);
    let client = connect(&job, &hosts(&servers));
    let mut stream = client.stream(input(&job, &client, 1, false), None);
    stream.next_batch().unwrap().unwrap();
    let asked = Instant::now();
    assert!(client.shutdown("training finished").is_empty());
    for server in &servers {
        let reason = server
            .stopped_within(Duration::from_secs(2))
            .expect("stopped within 2 s");
        assert_eq!(reason, StopReason::Shutdown("training finished".into()));
    }
    assert!(asked.elapsed() < Duration::from_secs(2));
}

#[test]
fn the_watchdog_stops_a_server_nobody_talks_to() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| c.watchdog = Duration::from_millis(600));
    {
        // A trainer that connects, then goes silent (its heartbeats stop with it).
        let client = connect(&job, &hosts(&[&server]));
        let mut stream = client.stream(input(&job, &client, 1, false), None);
        stream.next_batch().unwrap().unwrap();
        assert!(
            server.stopped_within(Duration::from_millis(1500)).is_none(),
            "heartbeats keep it alive"
        );
    }
    let reason = server
        .stopped_within(Duration::from_secs(5))
        .expect("the watchdog fired");
    assert_eq!(reason, StopReason::Watchdog(Duration::from_millis(600)));
}

/// On Kubernetes the trainer pods are created only once every data pod is Ready, however long
/// their nodes take to come: a server waits for its first trainer past its watchdog, and the
/// watchdog runs from that trainer's contact on.
#[test]
fn where_trainers_start_later_the_watchdog_counts_from_the_first_trainer() {
    let job = job();
    let watchdog = Duration::from_millis(400);
    let server = TestServer::start(&job, "algo-1", |c| {
        c.watchdog = watchdog;
        c.watch_from_start = false;
    });
    assert!(
        server.stopped_within(watchdog * 4).is_none(),
        "no trainer yet: the server waits for the first"
    );
    {
        let client = connect(&job, &hosts(&[&server]));
        let mut stream = client.stream(input(&job, &client, 1, false), None);
        stream.next_batch().unwrap().unwrap();
    }
    let reason = server
        .stopped_within(Duration::from_secs(5))
        .expect("the watchdog fired once the trainer went silent");
    assert_eq!(reason, StopReason::Watchdog(watchdog));
}

/// A stream of all 600 samples, one per batch: long enough that a stop always cuts it short.
fn long_shard(trainer: &str, shard: u32) -> ShardRequest {
    ShardRequest {
        epoch: 0,
        shard,
        sample_ids: (0..600).collect(),
        batch_size: 1,
        trainer_id: trainer.into(),
        ..Default::default()
    }
}

/// Opens `trainer`'s [`long_shard`] `shard`: the stream once the server grants it, or why not.
fn open_long(
    rt: &tokio::runtime::Runtime,
    client: &mut RawClient,
    trainer: &str,
    shard: u32,
) -> Result<tonic::Streaming<hetgen_data::proto::Batch>, tonic::Status> {
    rt.block_on(client.stream_shard(long_shard(trainer, shard)))
        .map(tonic::Response::into_inner)
}

#[test]
fn a_shard_cut_short_by_a_stop_ends_unavailable_never_ok() {
    let job = job();
    for by_signal in [false, true] {
        let mut server = TestServer::start(&job, "algo-1", |_| {});
        let (rt, mut client) = raw_client(&server, TOKEN);
        let mut stream = open_long(&rt, &mut client, "t", 0).unwrap();
        let first = rt.block_on(stream.message()).unwrap().unwrap();
        assert!(!first.last);
        if by_signal {
            server.stop();
        } else {
            rt.block_on(client.shutdown(ShutdownRequest {
                reason: "done".into(),
                ..Default::default()
            }))
            .unwrap();
        }
        let mut received = 1;
        let end = loop {
            match rt.block_on(stream.message()) {
                Ok(Some(batch)) => {
                    received += 1;
                    assert!(!batch.last, "the whole shard went out");
                }
                Ok(None) => break None,
                Err(status) => break Some(status),
            }
        };
        let status = end.unwrap_or_else(|| {
            panic!("the stream ended OK after {received} of 600 batches (signal: {by_signal})")
        });
        assert!(
            matches!(status.code(), Code::Unavailable | Code::Aborted),
            "{status:?}"
        );
        assert!(status.message().contains("of 600 batches"), "{status:?}");
    }
}

/// A unary call with `body` as its HTTP body, as any HTTP/2 client could send it.
fn raw_unary(server: &TestServer, method: &str, body: Vec<u8>) -> tonic::Status {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let body = http_body_util::Full::new(bytes::Bytes::from(body));
        let response = raw_call(server, method, tonic::body::Body::new(body)).await;
        status_of(response).await
    })
}

/// `body` POSTed to the data service's `method` on a connection of its own, with gRPC's
/// headers and the job's token: what any HTTP/2 client could send, whatever the body.
async fn raw_call(
    server: &TestServer,
    method: &str,
    body: tonic::body::Body,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    use tonic::codegen::Service;
    let mut channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.address))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/hetgen.data.v1.DataService/{method}",
            server.address
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(body)
        .unwrap();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .unwrap();
    channel.call(request).await.unwrap()
}

/// The gRPC status a response carries: in its headers when the call ended at once, else in
/// its trailers.
async fn status_of(response: tonic::codegen::http::Response<tonic::body::Body>) -> tonic::Status {
    use http_body_util::BodyExt;
    if let Some(status) = tonic::Status::from_header_map(response.headers()) {
        return status;
    }
    let collected = response.into_body().collect().await.unwrap();
    tonic::Status::from_header_map(collected.trailers().expect("trailers")).expect("a status")
}

/// `message` as one uncompressed gRPC frame.
fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend((message.len() as u32).to_be_bytes());
    out.extend(message);
    out
}

fn handshake_bytes(trainer_id: String) -> Vec<u8> {
    prost::Message::encode_to_vec(&HandshakeRequest {
        protocol_version: PROTOCOL_VERSION,
        trainer_id,
    })
}

#[test]
fn bad_unary_bodies_are_the_clients_fault_and_bounded() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |_| {});
    let compressed = {
        let mut f = frame(&handshake_bytes("t".into()));
        f[0] = 1;
        f
    };
    let mut short = frame(&handshake_bytes("t".into()));
    short.pop();
    let cases = [
        (
            "Handshake",
            frame(&[0xff, 0xff, 0xff]),
            Code::InvalidArgument,
        ),
        ("Ack", frame(&[0xff, 0xff, 0xff]), Code::InvalidArgument),
        ("Heartbeat", frame(&[0x0a, 0x7f]), Code::InvalidArgument),
        ("Handshake", compressed, Code::Unimplemented),
        ("Handshake", short, Code::InvalidArgument),
        ("Handshake", vec![0, 0], Code::InvalidArgument),
        // Read no further than the limit: a 2 MiB Handshake is never buffered whole.
        (
            "Handshake",
            frame(&handshake_bytes("x".repeat(2 << 20))),
            Code::ResourceExhausted,
        ),
        // Under the body limit, over the id limit.
        (
            "Handshake",
            frame(&handshake_bytes("\u{202e}".repeat(300))),
            Code::InvalidArgument,
        ),
    ];
    for (method, body, code) in cases {
        let status = raw_unary(&server, method, body);
        assert_eq!(status.code(), code, "{method}: {status:?}");
    }
    // The real thing still works.
    let ok = raw_unary(&server, "Handshake", frame(&handshake_bytes("t".into())));
    assert_eq!(ok.code(), Code::Ok, "{ok:?}");
}

#[test]
fn one_trainer_cannot_open_streams_without_bound() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| c.max_streams_per_trainer = 3);
    let (rt, mut client) = raw_client(&server, TOKEN);
    // Three stalled streams (opened, never read) are allowed; a fourth is not.
    let stalled: Vec<_> = (0..3)
        .map(|shard| open_long(&rt, &mut client, "t", shard).unwrap())
        .collect();
    let refused = open_long(&rt, &mut client, "t", 3).unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("at most 3"), "{refused:?}");
    // Another trainer is not held back by this one.
    let mut other = open_long(&rt, &mut client, "u", 0).unwrap();
    assert!(rt.block_on(other.message()).unwrap().is_some());
    drop(stalled);
}

#[test]
fn unacknowledged_shards_are_remembered_up_to_a_bound_per_trainer() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| c.max_unacked_per_trainer = 4);
    let (rt, mut client) = raw_client(&server, TOKEN);
    for shard in 0..6u32 {
        let request = ShardRequest {
            epoch: 0,
            shard,
            sample_ids: vec![u64::from(shard)],
            batch_size: 1,
            trainer_id: "t".into(),
            ..Default::default()
        };
        let mut stream = rt
            .block_on(client.stream_shard(request))
            .unwrap()
            .into_inner();
        while rt.block_on(stream.message()).unwrap().is_some() {}
    }
    let ack = |shard: u32| {
        rt.block_on(client.clone().ack(AckRequest {
            epoch: 0,
            shards: vec![shard],
            trainer_id: "t".into(),
        }))
    };
    // Shards 0 and 1 were forgotten to keep four; 2 to 5 are still owed an Ack.
    assert_eq!(ack(0).unwrap_err().code(), Code::NotFound);
    assert_eq!(ack(1).unwrap_err().code(), Code::NotFound);
    for shard in 2..6 {
        ack(shard).unwrap();
    }
}

#[test]
fn a_server_stops_once_every_trainer_host_has_finished() {
    let job = job();
    let trainers = ["algo-3".to_owned(), "algo-4".to_owned()];
    let server = TestServer::start(&job, "algo-1", |c| c.trainer_hosts = trainers.to_vec());
    // Inside a job a trainer's id names its host.
    let as_trainer = |server: &TestServer| {
        let mut config = client_config();
        config.trainer_id = "algo-3/rank-0".into();
        Client::connect(&hosts(&[server]), job.pipeline.output_shape, config).unwrap()
    };
    let client = as_trainer(&server);
    // A fast host that finished does not cut the slow one off; a stranger is refused, whether
    // or not it says it failed.
    assert!(client.finished("algo-4", false, "done").is_empty());
    // Nor does a Shutdown that names no host: inside a job it is no trainer host's word.
    let refused = client.shutdown("done");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].1.contains("`` is not a trainer host"),
        "{refused:?}"
    );
    for failed in [false, true] {
        let refused = client.finished("algo-9", failed, "done");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0]
                .1
                .contains("`algo-9` is not a trainer host of this job (algo-3, algo-4)"),
            "{refused:?}"
        );
    }
    assert!(server.stopped_within(Duration::from_millis(500)).is_none());
    // The slow one still streams.
    let mut stream = client.stream(input(&job, &client, 1, true), None);
    assert!(stream.next_batch().unwrap().is_ok());
    drop(stream);
    assert!(client.finished("algo-3", false, "done").is_empty());
    assert_eq!(
        server.stopped_within(Duration::from_secs(10)),
        Some(StopReason::Shutdown("done".into()))
    );

    // A host whose training failed ends the job at once.
    let server = TestServer::start(&job, "algo-2", |c| c.trainer_hosts = trainers.to_vec());
    let client = as_trainer(&server);
    assert!(client.finished("algo-3", true, "trainer failed").is_empty());
    assert_eq!(
        server.stopped_within(Duration::from_secs(10)),
        Some(StopReason::Shutdown("trainer failed".into()))
    );
}

/// A one-sample shard of `trainer`, read to its end (and never acknowledged).
fn stream_one(
    rt: &tokio::runtime::Runtime,
    client: &mut DataServiceClient<
        tonic::codegen::InterceptedService<tonic::transport::Channel, AttachToken>,
    >,
    trainer: &str,
) -> Result<(), tonic::Status> {
    let request = ShardRequest {
        epoch: 0,
        shard: 0,
        sample_ids: vec![0],
        batch_size: 1,
        trainer_id: trainer.into(),
        ..Default::default()
    };
    let mut stream = rt.block_on(client.stream_shard(request))?.into_inner();
    while rt.block_on(stream.message())?.is_some() {}
    Ok(())
}

#[test]
fn inside_a_job_trainer_ids_name_its_trainer_hosts() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| {
        c.trainer_hosts = vec!["algo-3".into(), "algo-4".into()]
    });
    let (rt, mut client) = raw_client(&server, TOKEN);
    for ours in ["algo-3/rank-0", "algo-4/rank-65535", "algo-3/launcher"] {
        stream_one(&rt, &mut client, ours).unwrap_or_else(|e| panic!("{ours}: {e:?}"));
    }
    // Any other string once made a trainer of its own.
    for stranger in [
        "t",
        "algo-9/rank-0",
        "algo-3/rank-65536",
        "algo-3/rank-+1",
        "algo-3/rank-01",
        "algo-3/rank-00",
        "algo-3/rank-x",
        "algo-3",
        "/rank-0",
    ] {
        let refused = stream_one(&rt, &mut client, stranger).unwrap_err();
        assert_eq!(
            refused.code(),
            Code::PermissionDenied,
            "{stranger}: {refused:?}"
        );
        assert!(
            refused
                .message()
                .contains("the trainer hosts algo-3, algo-4"),
            "{refused:?}"
        );
    }
}

#[test]
fn with_the_jobs_world_size_known_an_id_names_one_of_its_ranks() {
    // Two trainer hosts of two ranks each: ranks 0 to 3, not the 65 536 one caller could pose
    // as to take that many fair shares of the memory budget.
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| {
        c.trainer_hosts = vec!["algo-3".into(), "algo-4".into()];
        c.world_size = Some(4);
    });
    let (rt, mut client) = raw_client(&server, TOKEN);
    for ours in ["algo-3/rank-0", "algo-4/rank-3", "algo-4/launcher"] {
        stream_one(&rt, &mut client, ours).unwrap_or_else(|e| panic!("{ours}: {e:?}"));
    }
    for stranger in ["algo-3/rank-4", "algo-4/rank-767"] {
        let refused = stream_one(&rt, &mut client, stranger).unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
        assert!(
            refused.message().contains("`<trainer host>/rank-<0..=3>`"),
            "{refused:?}"
        );
    }
}

#[test]
fn a_full_trainer_table_locks_no_trainer_out() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |c| c.trainer_hosts = vec!["algo-3".into()]);
    let (rt, mut client) = raw_client(&server, TOKEN);
    // More ids than the table holds, each owing an Ack: once, every new id after the 1 024th
    // was RESOURCE_EXHAUSTED, a legitimate trainer's included.
    for rank in 0..hetgen_data::server::MAX_TRAINERS + 10 {
        stream_one(&rt, &mut client, &format!("algo-3/rank-{rank}"))
            .unwrap_or_else(|e| panic!("rank {rank}: {e:?}"));
    }
    stream_one(&rt, &mut client, "algo-3/rank-60000").unwrap();
    // The ones that gave way were the longest silent: the latest still owe their Ack.
    let ack = |rank: usize| {
        rt.block_on(client.clone().ack(AckRequest {
            epoch: 0,
            shards: vec![0],
            trainer_id: format!("algo-3/rank-{rank}"),
        }))
    };
    assert_eq!(ack(0).unwrap_err().code(), Code::NotFound);
    ack(hetgen_data::server::MAX_TRAINERS + 9).unwrap();
}

/// A client that reads no more than 4 KiB of a stream ahead of its caller, so a stream it
/// does not read stalls on the server as soon as that is sent (with the default 2 MiB
/// windows a test shard would be sent whole).
fn stalling_client(server: &TestServer) -> (tokio::runtime::Runtime, RawClient) {
    client_of(server, TOKEN, Some(4096))
}

/// A shard stream of `trainer` whose every batch has `batch_size` samples.
fn shard_of(trainer: &str, shard: u32, batch_size: u32) -> ShardRequest {
    ShardRequest {
        batch_size,
        ..long_shard(trainer, shard)
    }
}

#[test]
fn a_batch_no_stream_could_hold_within_the_memory_budget_is_refused_naming_the_limit() {
    let job = job();
    // 8×8×3 images: a stream of 16-sample batches may hold 4 × 16 × (192 + 16) = 13 KiB.
    let server = TestServer::start(&job, "algo-1", |c| c.memory_budget = 64 << 10);
    let (rt, mut client) = raw_client(&server, TOKEN);
    let refused = rt
        .block_on(client.stream_shard(shard_of("t", 0, 128)))
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    for named in [
        "memory budget",
        "HETGEN_DATA_MEMORY_MIB",
        "at most 78 samples",
    ] {
        assert!(refused.message().contains(named), "{named}: {refused:?}");
    }
    let mut fits = rt
        .block_on(client.stream_shard(shard_of("t", 0, 16)))
        .unwrap()
        .into_inner();
    assert!(rt.block_on(fits.message()).unwrap().is_some());
}

#[test]
fn streams_over_the_memory_budget_wait_for_others_to_end_whatever_their_trainer_ids() {
    let job = job();
    // Room for three streams of 16-sample batches (13 KiB each) at a time, and a few request
    // bodies (1 KiB each).
    let server = TestServer::start(&job, "algo-1", |c| c.memory_budget = 44 << 10);
    let (rt, mut client) = stalling_client(&server);
    let mut stalled: Vec<_> = (0..3)
        .map(|shard| {
            rt.block_on(client.stream_shard(shard_of("a", shard, 16)))
                .unwrap()
                .into_inner()
        })
        .collect();
    // Another id is no way around the budget: its stream, within a fair share (half the
    // budget, with one other trainer streaming), waits, holding nothing.
    let mut other = client.clone();
    let waiting = rt.spawn(async move { other.stream_shard(shard_of("b", 3, 16)).await });
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !waiting.is_finished(),
        "a second stream opened over the budget"
    );
    // One over a fair share is refused at once, with the figures: 26 KiB of 32-sample batches,
    // more than the 22 KiB half the budget is with one other trainer streaming (a waiting
    // stream holds nothing, so `b` does not count).
    let started = Instant::now();
    let refused = rt
        .block_on(client.stream_shard(shard_of("c", 4, 32)))
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?} {refused:?}",
        started.elapsed()
    );
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("more than a fair share")
            && refused.message().contains("2 streaming trainers")
            && refused.message().contains("HETGEN_DATA_MEMORY_MIB"),
        "{}",
        refused.message()
    );
    stalled.pop();
    let mut served = rt.block_on(waiting).unwrap().unwrap().into_inner();
    let mut batches = 0;
    while rt.block_on(served.message()).unwrap().is_some() {
        batches += 1;
    }
    assert_eq!(batches, 600 / 16 + 1);
}

#[test]
fn one_connection_holds_a_trainers_streams_and_a_few_calls_whatever_the_ids() {
    let job = job();
    // 3 streams per trainer + 4 unary calls: 7 requests at once per connection.
    let server = TestServer::start(&job, "algo-1", |c| c.max_streams_per_trainer = 3);
    let (rt, client) = stalling_client(&server);
    let open_one = |n: u32| {
        let mut client = client.clone();
        rt.spawn(async move {
            client
                .stream_shard(long_shard(&format!("id-{n}"), n))
                .await
                .map(|r| r.into_inner())
        })
    };
    // Each stream under its own id: the per-trainer limit never applies.
    let held: Vec<_> = (0..7)
        .map(|n| rt.block_on(open_one(n)).unwrap().unwrap())
        .collect();
    let queued = open_one(7);
    std::thread::sleep(Duration::from_millis(800));
    assert!(
        !queued.is_finished(),
        "an 8th request ran on one connection"
    );
    drop(held);
    let mut stream = rt.block_on(queued).unwrap().unwrap();
    assert!(rt.block_on(stream.message()).unwrap().is_some());
}

#[test]
fn a_request_body_that_stops_arriving_is_cut_off_at_the_deadline() {
    let job = job();
    let server = TestServer::start(&job, "algo-1", |_| {});
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let status = runtime.block_on(async {
        // A frame that says 1000 bytes, 10 of them sent, and then nothing (never the end).
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>(1);
        let mut first = vec![0u8];
        first.extend(1000u32.to_be_bytes());
        first.extend([0u8; 10]);
        tx.send(Ok(http_body::Frame::data(first.into())))
            .await
            .unwrap();
        let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        let call = raw_call(&server, "StreamShard", tonic::body::Body::new(body));
        let response = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("the server answers within its body deadline");
        drop(tx);
        status_of(response).await
    });
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("did not arrive"), "{status:?}");
}

/// A producer whose every batch takes `delay` longer: a straggler (a noisy neighbour, slow
/// reads, a custom stage that pauses).
struct Slow {
    engine: Arc<hetgen_pipeline::Engine>,
    delay: Duration,
}

impl Batches for Slow {
    fn output_shape(&self) -> [u32; 3] {
        self.engine.output_shape()
    }
    fn samples_per_epoch(&self) -> u64 {
        self.engine.samples_per_epoch()
    }
    fn threads(&self) -> usize {
        self.engine.threads()
    }
    fn busy_threads(&self) -> usize {
        self.engine.busy_threads()
    }
    fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(hetgen_pipeline::Batch) -> bool,
    ) -> Result<(), hetgen_pipeline::PipelineError> {
        self.engine.run_shard(work, &mut |batch| {
            std::thread::sleep(self.delay);
            emit(batch)
        })
    }
}

/// Three servers, the third `delay` slower per batch (and this host's own pipeline beside
/// them, with `hybrid`); 2 epochs streamed.
fn with_a_straggler(delay: Duration, deterministic: bool, hybrid: bool) -> (Vec<Batch>, u64, u64) {
    let job = job();
    let fast = servers(&job, 2);
    let slow = TestServer::serving(
        Arc::new(Slow {
            engine: engine(&job),
            delay,
        }),
        "algo-3",
        |_| {},
    );
    let mut client = connect(&job, &hosts(&[&fast[0], &fast[1], &slow]));
    if hybrid {
        client = client.with_local(engine(&job)).unwrap();
    }
    let mut stream = client.stream(input(&job, &client, 2, deterministic), None);
    let batches = drain(&mut stream);
    let input = client.report();
    (batches, input.backup_shards, input.duplicate_batches)
}

#[test]
fn a_straggling_server_is_hedged_and_every_sample_arrives_once() {
    // 300 ms a batch against about 1 ms: its shards are overdue at once.
    let (batches, backups, duplicates) = with_a_straggler(Duration::from_millis(300), false, false);
    assert_exactly_once(&batches, 2, 600);
    assert!(backups > 0, "no shard of the straggler was backed up");
    // 2 epochs of 15 shards: at most a tenth of them plus one per credit (3 × 2) each.
    assert!(backups <= 2 * (2 + 6), "{backups} backups");
    eprintln!("backups {backups}, duplicates dropped {duplicates}");
}

#[test]
fn hedging_keeps_deterministic_order() {
    let job = job();
    let reference = {
        let server = TestServer::start(&job, "algo-1", |_| {});
        let client = connect(&job, &hosts(&[&server]));
        let mut stream = client.stream(input(&job, &client, 2, true), None);
        drain(&mut stream)
    };
    let (batches, backups, _) = with_a_straggler(Duration::from_millis(300), true, false);
    assert!(backups > 0, "no shard of the straggler was backed up");
    assert_eq!(batches, reference, "same batches, same pixels, same order");
}

#[test]
fn a_stream_the_client_drops_stops_its_work_on_the_server() {
    let job = job();
    // One stream per trainer: the second can open only once the first's work has ended.
    let server = TestServer::start(&job, "algo-1", |c| c.max_streams_per_trainer = 1);
    let (rt, mut client) = stalling_client(&server);
    let mut first = open_long(&rt, &mut client, "t", 0).unwrap();
    assert!(rt.block_on(first.message()).unwrap().is_some());
    // A hedged shard's losing copy is dropped like this, mid-shard.
    drop(first);
    let started = Instant::now();
    let second = loop {
        match open_long(&rt, &mut client, "t", 1) {
            Ok(stream) => break stream,
            Err(status) if status.code() == Code::ResourceExhausted => {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the dropped stream's work still holds its place: {status:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    drop(second);
}

#[test]
fn with_hybrid_input_the_local_pipeline_backs_up_a_straggler_like_a_server() {
    let (batches, backups, _) = with_a_straggler(Duration::from_millis(300), false, true);
    assert_exactly_once(&batches, 2, 600);
    assert!(backups > 0, "no shard of the straggler was backed up");
}

/// Opens a StreamShard request on a raw HTTP/2 connection and sends only the first `sent`
/// bytes of a body whose frame header declares `declared` bytes; the request stays open
/// while the returned connection lives.
async fn partial_shard_request(
    server: &TestServer,
    declared: u32,
    sent: usize,
) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let (h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut h2 = h2.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{}/hetgen.data.v1.DataService/StreamShard",
        server.address
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("authorization", format!("Bearer {TOKEN}"))
    .body(())
    .unwrap();
    let (_response, mut body) = h2.send_request(request, false).unwrap();
    let mut frame = vec![0u8];
    frame.extend(declared.to_be_bytes());
    frame.resize(sent, 0);
    body.send_data(frame.into(), false).unwrap();
    // The body stays unfinished: `body` is leaked on purpose, with its stream.
    std::mem::forget(body);
    h2
}

#[test]
fn request_bodies_hold_the_budget_they_sent_not_the_size_they_declare() {
    let job = job();
    // Five bodies declare 16 MiB each, more than the 64 MiB the bodies' budget holds.
    let server = TestServer::start(&job, "algo-1", |_| {});
    let (rt, mut client) = raw_client(&server, TOKEN);
    let _peers: Vec<_> = (0..5)
        .map(|_| rt.block_on(partial_shard_request(&server, 16 << 20, 12)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // The trainer's request is read at once: the five bodies hold the 12 bytes each sent. Had
    // they reserved what they declared, it would wait for their deadline.
    let started = Instant::now();
    let mut stream = rt
        .block_on(client.stream_shard(shard_of("algo-1/rank-0", 0, 16)))
        .unwrap()
        .into_inner();
    while rt.block_on(stream.message()).unwrap().is_some() {}
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the stream waited {:?}",
        started.elapsed()
    );
}

#[test]
fn a_request_is_read_at_once_with_the_data_budget_full_of_stalled_streams() {
    let job = job();
    // Three stalled streams of 16-sample batches (13 KiB each) fill the data budget but for
    // 1000 bytes, less than a 600-id request's body (1.2 KiB) and more than a stream of
    // 1-sample batches (832 bytes). The request is read from the bodies' own budget, so that
    // stream opens at once; were bodies reserved from the data budget, the request would wait
    // 10 s and be refused for its body.
    let stream = 4 * 16 * (192 + 16);
    let server = TestServer::start(&job, "algo-1", |c| c.memory_budget = 3 * stream + 1000);
    let (rt, mut client) = stalling_client(&server);
    let _stalled: Vec<_> = (0..3)
        .map(|shard| {
            rt.block_on(client.stream_shard(shard_of("a", shard, 16)))
                .unwrap()
                .into_inner()
        })
        .collect();
    let started = Instant::now();
    let mut served = rt
        .block_on(client.stream_shard(shard_of("b", 3, 1)))
        .unwrap()
        .into_inner();
    assert!(rt.block_on(served.message()).unwrap().is_some());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the request waited {:?}",
        started.elapsed()
    );
}

#[test]
fn a_server_that_refuses_a_stream_for_now_is_asked_again_not_dropped() {
    let job = job();
    // Room for one 16-sample stream (13 KiB) at a time: with two trainers streaming, a fair
    // share is half of it, less than a stream, so a stream that finds the other's running is
    // refused (`ResourceExhausted`, over a fair share) rather than queued. The only server
    // refusing must not be dropped for it: the trainer asks again after a rest, and both read
    // every sample of every epoch exactly once.
    let server = TestServer::start(&job, "algo-1", |c| c.memory_budget = 20 << 10);
    let hosts = hosts(&[&server]);
    let trainers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let (job, hosts) = (job.clone(), hosts.clone());
            std::thread::spawn(move || {
                let mut config = client_config();
                config.trainer_id = format!("test-{name}/rank-0");
                let client = Client::connect(&hosts, job.pipeline.output_shape, config).unwrap();
                let mut stream = client.stream(input(&job, &client, 6, false), None);
                drain(&mut stream)
            })
        })
        .collect();
    for trainer in trainers {
        let batches = trainer
            .join()
            .expect("a trainer's epochs ended in an error");
        assert_exactly_once(&batches, 6, 600);
    }
}
