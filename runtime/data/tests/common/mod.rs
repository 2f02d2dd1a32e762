//! Shared set-up of the data service tests: a small synthetic job, in-process servers on
//! 127.0.0.1, and helpers to drain a stream.

#![allow(dead_code)]

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hetgen_data::client::{Client, ClientConfig};
use hetgen_data::server::{Batches, ServerConfig, StopReason, serve};
use hetgen_pipeline::{Batch, BatchStream, Engine, InputConfig, StageRegistry};
use hetgen_spec::model::Job;

pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The shared fixture `data-test`: three data hosts and one trainer host on a synthetic source.
pub fn job() -> Job {
    hetgen_fixtures::spec("data-test").job()
}

pub fn engine(job: &Job) -> Arc<Engine> {
    Arc::new(Engine::new(job, &StageRegistry::builtin(), &BTreeMap::new(), Some(1)).unwrap())
}

/// A data server on its own thread and runtime, as a separate host would be.
pub struct TestServer {
    pub address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: std::sync::mpsc::Receiver<StopReason>,
}

impl TestServer {
    pub fn start(job: &Job, name: &str, configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        TestServer::serving(engine(job), name, configure)
    }

    /// A server of `engine`'s batches (a test's own producer: a slow one, say).
    pub fn serving(
        engine: Arc<dyn Batches>,
        name: &str,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = ServerConfig::new(name.to_owned(), TOKEN.to_owned(), &*engine);
        configure(&mut config);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (done_tx, done) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let reason = serve(engine, config, listener, async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
                let _ = done_tx.send(reason);
            });
        });
        let address = addr_rx.recv().unwrap();
        TestServer {
            address,
            stop: Some(stop),
            done,
        }
    }

    /// Why the server stopped, waiting at most `limit`.
    pub fn stopped_within(&self, limit: Duration) -> Option<StopReason> {
        self.done.recv_timeout(limit).ok()
    }

    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Servers `algo-1` to `algo-<n>`, each configured as [`ServerConfig::new`] sets it up.
pub fn servers(job: &Job, n: usize) -> Vec<TestServer> {
    (1..=n)
        .map(|i| TestServer::start(job, &format!("algo-{i}"), |_| {}))
        .collect()
}

/// The `(address, port)` of each server, as a client connects to them.
pub fn hosts(servers: &[impl Borrow<TestServer>]) -> Vec<(String, u16)> {
    servers
        .iter()
        .map(|s| {
            (
                s.borrow().address.ip().to_string(),
                s.borrow().address.port(),
            )
        })
        .collect()
}

pub fn client_config() -> ClientConfig {
    let mut config = ClientConfig::new("test/rank-0".into(), TOKEN.into());
    config.connect_timeout = Duration::from_secs(20);
    config.stall_timeout = Duration::from_secs(10);
    config.heartbeat = Duration::from_millis(200);
    config
}

pub fn connect(job: &Job, hosts: &[(String, u16)]) -> Client {
    Client::connect(hosts, job.pipeline.output_shape, client_config()).unwrap()
}

pub fn input(job: &Job, client: &Client, epochs: u32, deterministic: bool) -> InputConfig {
    InputConfig {
        seed: job.seed,
        samples_per_epoch: client.samples_per_epoch(),
        shards: client.shards(),
        shard_size: job.pipeline.shard_size,
        batch_size: job.pipeline.batch_size,
        epochs: Some(epochs),
        rank: 0,
        world: 1,
        deterministic,
    }
}

pub fn drain(stream: &mut dyn BatchStream) -> Vec<Batch> {
    let mut out = Vec::new();
    while let Some(batch) = stream.next_batch() {
        out.push(batch.expect("no stream error"));
    }
    out
}

/// Every sample id of every epoch exactly once.
pub fn assert_exactly_once(batches: &[Batch], epochs: u32, samples: u64) {
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    for b in batches {
        for id in &b.sample_ids {
            *seen.entry((b.epoch, *id)).or_default() += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(
        twice.is_empty(),
        "samples yielded more than once: {twice:?}"
    );
    for epoch in 0..epochs {
        let n = seen.keys().filter(|(e, _)| *e == epoch).count() as u64;
        assert_eq!(
            n, samples,
            "epoch {epoch}: {n} of {samples} samples yielded"
        );
    }
}
