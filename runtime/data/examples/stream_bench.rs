//! Throughput of ready batches from one and two data servers into one client over loopback,
//! beside a plain TCP socket moving the same bytes in the same run.
//!
//! `cargo run --release -p hetgen-data --example stream_bench [SECONDS] [ROUNDS]`
//!
//! For clients in other processes (`bench/python_stream.sh` times the Python package against
//! the Rust client on the same servers): `stream_bench serve N` starts N servers, prints
//! `servers ADDR,ADDR…` and serves until its standard input closes; `stream_bench client
//! ADDR,ADDR… SECONDS` prints the Rust client's rate from them, `rust-client-rate GB/S`, and
//! the CPU time its process spent per gigabyte received, `rust-client-cpu-s-per-gb S` (user +
//! system time of all its threads: what a trainer host gives the data client per GB/s of
//! input; `bench/python_stream.sh` measures it with servers and client on separate cores).
//!
//! "Ready" batches: the servers serve a prepared batch through [`Batches`] instead of running a
//! pipeline, so the measurement is the service (gRPC framing, HTTP/2 flow control, checksums,
//! the scheduler, the trainer's side), not the preprocessing.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetgen_data::client::{Client, ClientConfig};
use hetgen_data::server::{ServerConfig, serve};

const BATCH: usize = 128;
const SAMPLE_BYTES: usize = 224 * 224 * 3;
use bytes::Bytes;
use hetgen_data::server::Batches;
use hetgen_pipeline::{Batch, BatchStream, Contents, InputConfig, PipelineError, ShardWork};

const TOKEN: &str = "bench-token-0123456789abcdef";

/// A producer of ready batches: every shard's batches are one prepared buffer, shared, so
/// the rows time the service (framing, HTTP/2 flow control, checksums, scheduling, the
/// trainer-side batch), not the pipeline.
struct Ready {
    /// One full batch of images; shorter batches are slices of it.
    images: Bytes,
}

impl Batches for Ready {
    fn output_shape(&self) -> [u32; 3] {
        [224, 224, 3]
    }
    fn samples_per_epoch(&self) -> u64 {
        100_000
    }
    fn threads(&self) -> usize {
        1
    }
    fn busy_threads(&self) -> usize {
        0
    }
    fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), PipelineError> {
        for (index, chunk) in work.ids.chunks(work.batch_size as usize).enumerate() {
            let batch = Batch {
                epoch: work.epoch,
                shard: work.shard,
                index: index as u32,
                sample_ids: chunk.to_vec(),
                data: self.images.slice(..chunk.len() * SAMPLE_BYTES),
                contents: Contents::Images {
                    shape: [224, 224, 3],
                    labels: chunk.iter().map(|id| (id % 10) as i64).collect(),
                },
            };
            if !emit(batch) {
                break;
            }
        }
        Ok(())
    }
}

fn server(name: &str) -> std::net::SocketAddr {
    let ready = Arc::new(Ready {
        images: Bytes::from(vec![7u8; BATCH * SAMPLE_BYTES]),
    });
    let config = ServerConfig::new(name.to_owned(), TOKEN.to_owned(), &*ready);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("address"))
                .expect("send");
            let _ = serve(ready, config, listener, std::future::pending()).await;
        });
    });
    rx.recv().expect("server address")
}

fn grpc(job: &hetgen_spec::model::Job, servers: usize, budget: Duration) -> f64 {
    let hosts: Vec<(String, u16)> = (0..servers)
        .map(|i| server(&format!("algo-{}", i + 1)))
        .map(|a| (a.ip().to_string(), a.port()))
        .collect();
    let (streamed, client) = stream_from(job, &hosts, budget);
    client.shutdown("benchmark over");
    streamed.rate
}

/// What one client measured: bytes per second of images, and CPU seconds of this process
/// (every thread, user and system) over the same interval.
struct Streamed {
    rate: f64,
    cpu_s: f64,
    bytes: usize,
}

/// Streams from `hosts` into one client for `budget`; the client is returned so the caller
/// decides whether the servers are told to stop.
fn stream_from(
    job: &hetgen_spec::model::Job,
    hosts: &[(String, u16)],
    budget: Duration,
) -> (Streamed, Client) {
    let client = Client::connect(
        hosts,
        job.pipeline.output_shape,
        ClientConfig::new("bench".into(), TOKEN.into()),
    )
    .expect("connect");
    let config = InputConfig {
        seed: 1,
        samples_per_epoch: client.samples_per_epoch(),
        shards: None,
        shard_size: job.pipeline.shard_size,
        batch_size: job.pipeline.batch_size,
        epochs: None,
        rank: 0,
        world: 1,
        deterministic: false,
    };
    let mut stream = client.stream(config, None);
    for _ in 0..4 {
        stream.next_batch().expect("batch").expect("no error");
    }
    let (start, cpu_start, mut bytes) = (Instant::now(), process_cpu_s(), 0usize);
    while start.elapsed() < budget {
        bytes += stream
            .next_batch()
            .expect("batch")
            .expect("no error")
            .data
            .len();
    }
    let streamed = Streamed {
        rate: bytes as f64 / start.elapsed().as_secs_f64(),
        cpu_s: process_cpu_s() - cpu_start,
        bytes,
    };
    drop(stream);
    (streamed, client)
}

/// User + system CPU seconds of this process so far, all threads together.
fn process_cpu_s() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given.
    let usage = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()), 0);
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn tcp(batch_bytes: usize, budget: Duration) -> f64 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().expect("accept");
        let batch = vec![7u8; batch_bytes];
        while socket.write_all(&batch).is_ok() {}
    });
    let mut socket = std::net::TcpStream::connect(address).expect("connect");
    // Like the client, the reader ends up with an owned batch: read into a fresh buffer.
    let (start, mut bytes) = (Instant::now(), 0usize);
    while start.elapsed() < budget {
        let mut batch = vec![0u8; batch_bytes];
        socket.read_exact(&mut batch).expect("read");
        bytes += batch.len();
    }
    bytes as f64 / start.elapsed().as_secs_f64()
}

/// `serve N`: servers for clients in other processes, until standard input closes.
fn serve_for_others(count: usize) {
    let addresses: Vec<String> = (0..count)
        .map(|i| server(&format!("algo-{}", i + 1)).to_string())
        .collect();
    println!("servers {}", addresses.join(","));
    std::io::stdout().flush().expect("stdout");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}

/// `client ADDR,ADDR… SECONDS`: the Rust client's rate from servers of another process.
fn client_of_others(job: &hetgen_spec::model::Job, addresses: &str, seconds: f64) {
    let hosts: Vec<(String, u16)> = addresses
        .split(',')
        .map(|a| {
            let a: std::net::SocketAddr = a.parse().expect("ADDR is ip:port");
            (a.ip().to_string(), a.port())
        })
        .collect();
    let (streamed, _client) = stream_from(job, &hosts, Duration::from_secs_f64(seconds));
    println!("rust-client-rate {:.3}", streamed.rate / 1e9);
    println!(
        "rust-client-cpu-s-per-gb {:.3}",
        streamed.cpu_s / (streamed.bytes as f64 / 1e9)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os("HETGEN_DEFAULT_MALLOC").is_none() {
        hetgen_data::tune_allocator();
    }
    // The job bench/python_stream.py gives `hetgen.Loader` too.
    let job = hetgen_fixtures::spec("stream-bench").job();
    match args.first().map(String::as_str) {
        Some("serve") => {
            return serve_for_others(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1));
        }
        Some("client") => {
            let seconds = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3.0);
            return client_of_others(
                &job,
                args.get(1).expect("client ADDR,ADDR SECONDS"),
                seconds,
            );
        }
        _ => {}
    }
    let mut args = args.into_iter();
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let budget = Duration::from_secs_f64(seconds);
    let batch_bytes = BATCH * SAMPLE_BYTES;
    let gb = |r: f64| r / 1e9;
    println!(
        "batches of {BATCH} × 224×224×3 u8 ({:.1} MB) over loopback, {seconds} s per measurement",
        batch_bytes as f64 / 1e6
    );
    // A shared machine's speed drifts over seconds: each round measures the three paths back
    // to back, and ratios compare within a round.
    println!(
        "| round | plain TCP GB/s | 1 server GB/s | 2 servers GB/s | 1 server / TCP | 2 servers / TCP |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut ratios = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let plain = tcp(batch_bytes, budget);
        let one = grpc(&job, 1, budget);
        let two = grpc(&job, 2, budget);
        println!(
            "| {round} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            gb(plain),
            gb(one),
            gb(two),
            one / plain,
            two / plain
        );
        ratios.0.push(one / plain);
        ratios.1.push(two / plain);
    }
    println!(
        "median ratio to plain TCP: 1 server {:.2}, 2 servers {:.2}",
        median(ratios.0),
        median(ratios.1)
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}
