//! The data service in-process: servers on 127.0.0.1, the real client, real gRPC.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hetgen_data::PROTOCOL_VERSION;
use hetgen_data::auth::AttachToken;
use hetgen_data::proto::data_service_client::DataServiceClient;
use hetgen_data::proto::{AckRequest, HandshakeRequest, ShardRequest, ShutdownRequest};
use hetgen_data::server::StopReason;
use hetgen_pipeline::BatchStream;
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
    let servers: Vec<_> = (1..=3)
        .map(|i| TestServer::start(&job, &format!("algo-{i}"), |_| {}))
        .collect();
    let client = connect(&job, &hosts(&servers.iter().collect::<Vec<_>>()));
    assert_eq!(client.samples_per_epoch(), 600);
    let mut stream = client.stream(input(&job, &client, 2, false), None);
    let batches = drain(&mut stream);
    assert_exactly_once(&batches, 2, 600);
    assert!(
        batches
            .iter()
            .all(|b| b.images.len() == b.len() * 8 * 8 * 3)
    );
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
        let servers: Vec<_> = (1..=n)
            .map(|i| TestServer::start(&job, &format!("algo-{i}"), |_| {}))
            .collect();
        let client = connect(&job, &hosts(&servers.iter().collect::<Vec<_>>()));
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

fn raw_client(
    server: &TestServer,
    token: &str,
) -> (
    tokio::runtime::Runtime,
    DataServiceClient<tonic::codegen::InterceptedService<tonic::transport::Channel, AttachToken>>,
) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let channel = runtime
        .block_on(
            tonic::transport::Endpoint::from_shared(format!("http://{}", server.address))
                .unwrap()
                .connect(),
        )
        .unwrap();
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
    }));
    assert_eq!(stream.unwrap_err().code(), Code::Unauthenticated);
    let shutdown = rt.block_on(client.shutdown(ShutdownRequest {
        reason: "evil".into(),
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
    let servers: Vec<_> = (1..=2)
        .map(|i| TestServer::start(&job, &format!("algo-{i}"), |_| {}))
        .collect();
    let client = connect(&job, &hosts(&servers.iter().collect::<Vec<_>>()));
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
