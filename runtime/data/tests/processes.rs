//! The data role as real processes (`hetgen-data-server`), each with its own SageMaker tree and
//! loopback address, killed and signalled for real.

mod common;
#[path = "common/peers.rs"]
mod peers;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use hetgen_data::client::{Client, RemoteStream};
use hetgen_fixtures::InstanceTrees;
use hetgen_pipeline::{Batch, BatchStream};
use hetgen_spec::model::Job;

struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    /// The (first) trainer host, whose ids (`algo-N/rank-0`) the job's servers accept.
    trainer: String,
    /// Every trainer host: the servers stop once all of them said they finished.
    trainers: Vec<String>,
    // The tests of this file share one process environment (HETGEN_HOSTS_FILE) and host names,
    // so clusters run one at a time.
    _serial: std::sync::MutexGuard<'static, ()>,
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
static CLUSTERS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

impl Cluster {
    /// The `data-test` job with `data_hosts` data hosts: trees for `algo-1..=data_hosts`
    /// (data_group) and one trainer host after them.
    fn new(data_hosts: usize) -> Cluster {
        Cluster::of(hetgen_fixtures::spec("data-test").set("instance_group.0.count", data_hosts))
    }

    /// [`Cluster::new`] with one data host and `hosts` trainer hosts running `ranks` trainer
    /// processes each (a script): servers refuse trainer ids of ranks beyond the job's, so a
    /// test that plays many trainers needs a job that has them.
    fn with_ranks(hosts: u32, ranks: u32) -> Cluster {
        Cluster::of(
            hetgen_fixtures::spec("data-test")
                .set("instance_group.0.count", 1)
                .set("instance_group.1.count", hosts)
                .remove("trainer.model")
                .remove("trainer.steps")
                .set("trainer.script", "train.py")
                .set("trainer.processes_per_host", ranks),
        )
    }

    fn of(spec: hetgen_fixtures::Spec) -> Cluster {
        let serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let dir = tempfile::tempdir().unwrap();
        // Distinct loopback subnets and ports per test process and cluster keep runs apart.
        let pid = std::process::id();
        let nth = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let net = (pid % 200) as u8 + 20;
        let port = 20000 + (pid % 20000) as u16 + nth * 7;
        let job = spec.job();
        hetgen_fixtures::write_job_file(dir.path(), &job, "data-test.toml");
        let trees = InstanceTrees::lay_out(dir.path(), &job);
        trees.write_hosts_file(|n| format!("127.{net}.{}.{n}", port % 250));
        let trainers = trees.hosts_of("dnn_group");
        let trainer = trainers[0].clone();
        // SAFETY: set before any thread of this test reads the environment; every test in this
        // file sets the same value for its process.
        unsafe { std::env::set_var("HETGEN_HOSTS_FILE", dir.path().join("hosts.txt")) };
        Cluster {
            dir,
            port,
            trainer,
            trainers,
            _serial: serial,
        }
    }

    fn start(&self, host: &str, extra: &[(&str, &str)]) -> Child {
        self.command(host, extra).spawn().unwrap()
    }

    /// The server of `host`, not started yet.
    fn command(&self, host: &str, extra: &[(&str, &str)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hetgen-data-server"));
        command
            .env("SAGEMAKER_BASE_DIR", self.dir.path().join(host))
            .env("HETGEN_JOB_FILE", self.dir.path().join("job.json"))
            .env("HETGEN_JOB_TOKEN", TOKEN)
            .env("HETGEN_HOSTS_FILE", self.dir.path().join("hosts.txt"))
            .env("HETGEN_DATA_PORT", self.port.to_string())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in extra {
            command.env(k, v);
        }
        command
    }

    /// The address `host` listens on, from the hosts file.
    fn address(&self, host: &str) -> std::net::SocketAddr {
        let hosts = std::fs::read_to_string(self.dir.path().join("hosts.txt")).unwrap();
        let ip = hosts
            .lines()
            .find_map(|l| l.strip_suffix(&format!(" {host}")))
            .unwrap();
        std::net::SocketAddr::new(ip.parse().unwrap(), self.port)
    }

    fn hosts(&self, names: &[&str]) -> Vec<(String, u16)> {
        names.iter().map(|n| (n.to_string(), self.port)).collect()
    }

    /// A client of the servers on `names`, as the job's trainer host.
    fn connect(&self, job: &Job, names: &[&str]) -> Client {
        let mut config = client_config();
        config.trainer_id = format!("{}/rank-0", self.trainer);
        Client::connect(&self.hosts(names), job.pipeline.output_shape, config).unwrap()
    }

    /// `client` tells the servers the trainer host finished, as its launcher does at the end.
    fn finished(&self, client: &Client, reason: &str) -> Vec<(String, String)> {
        let mut unreached = Vec::new();
        for host in &self.trainers {
            unreached.extend(client.finished(host, false, reason));
        }
        unreached
    }

    fn failure(&self, host: &str) -> PathBuf {
        self.dir.path().join(host).join("output/failure")
    }
}

/// Wait for the process to exit within `limit`; its status and stderr.
fn exited_within(child: &mut Child, limit: Duration) -> Option<(std::process::ExitStatus, String)> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return Some((status, err));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Wait for the process to exit within `limit_s` seconds, successfully and with `saying` in its
/// stderr.
fn exits_saying(child: &mut Child, limit_s: u64, saying: &str) {
    let (status, stderr) = exited_within(child, Duration::from_secs(limit_s))
        .unwrap_or_else(|| panic!("no exit within {limit_s} s (to say `{saying}`)"));
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains(saying), "{stderr}");
}

struct Reaper(Vec<Child>);
impl Drop for Reaper {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A cluster of three data servers, started, and a client of `job` connected to all three.
fn three_servers(job: &Job) -> (Cluster, Reaper, Client) {
    let hosts = ["algo-1", "algo-2", "algo-3"];
    let cluster = Cluster::new(3);
    let children = hosts.iter().map(|h| cluster.start(h, &[])).collect();
    let client = cluster.connect(job, &hosts);
    (cluster, Reaper(children), client)
}

/// Every batch of `stream`, taken as a trainer takes them, slower than the servers make them
/// (so every server's credits stay in use), with `each` told how many have come after each one.
fn consume_slowly(stream: &mut impl BatchStream, mut each: impl FnMut(usize)) -> Vec<Batch> {
    let mut batches = Vec::new();
    while let Some(batch) = stream.next_batch() {
        batches.push(batch.unwrap());
        each(batches.len());
        std::thread::sleep(Duration::from_millis(10));
    }
    batches
}

#[test]
fn one_of_three_servers_killed_mid_epoch_loses_and_repeats_nothing() {
    let job = job();
    let (cluster, mut children, client) = three_servers(&job);
    let mut stream = client.stream(input(&job, &client, 2, false), None);
    let batches = consume_slowly(&mut stream, |n| {
        if n == 12 {
            children.0[1].kill().unwrap(); // SIGKILL, mid-epoch 0
            children.0[1].wait().unwrap();
        }
    });
    assert_exactly_once(&batches, 2, 600);
    assert!(
        cluster
            .finished(&client, "done")
            .iter()
            .all(|(host, _)| host == "algo-2")
    );
    for i in [0, 2] {
        let (status, _) = exited_within(&mut children.0[i], Duration::from_secs(2))
            .expect("exits within 2 s of Shutdown");
        assert!(status.success());
    }
}

#[test]
fn servers_exit_by_watchdog_when_the_trainer_disappears() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![cluster.start("algo-1", &[("HETGEN_WATCHDOG_S", "1")])]);
    let job = job();
    {
        let client = cluster.connect(&job, &["algo-1"]);
        let mut stream = client.stream(input(&job, &client, 1, false), None);
        stream.next_batch().unwrap().unwrap();
        // The trainer vanishes here: its connection and heartbeats end with the client.
    }
    exits_saying(&mut children.0[0], 6, "watchdog");
}

/// Sends `signal` (`TERM`, `INT`) to `child`.
fn signal(child: &Child, signal: &str) {
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status();
    assert!(sent.unwrap().success());
}

/// One data server streaming to its job's trainer, then sent SIGTERM: the job is being stopped.
fn stopped_while_streaming() -> (Cluster, Reaper, Client, RemoteStream) {
    let cluster = Cluster::new(1);
    let children = Reaper(vec![cluster.start("algo-1", &[])]);
    let job = job();
    let client = cluster.connect(&job, &["algo-1"]);
    let mut stream = client.stream(input(&job, &client, 50, false), None);
    stream.next_batch().unwrap().unwrap();
    signal(&children.0[0], "TERM");
    (cluster, children, client, stream)
}

#[test]
fn sigterm_lets_a_streaming_trainer_finish_before_the_server_stops() {
    let (cluster, mut children, client, mut stream) = stopped_while_streaming();
    // The whole job is being stopped and the trainer's own signal is on its way: the server
    // goes on serving it meanwhile instead of failing its stream. The stop is said again, as
    // the container's start on AWS's image repeats it every second: still one stop.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(250));
        signal(&children.0[0], "TERM");
    }
    for _ in 0..3 {
        stream
            .next_batch()
            .unwrap()
            .expect("still served after SIGTERM");
    }
    assert!(children.0[0].try_wait().unwrap().is_none());
    drop(stream);
    // The trainer's launcher says it finished: the server stops at once, cleanly.
    let unreached = cluster.finished(&client, "stopped");
    assert!(unreached.is_empty(), "{unreached:?}");
    exits_saying(&mut children.0[0], 4, "SIGTERM received");
}

#[test]
fn a_second_signal_stops_a_draining_server_at_once() {
    let (_cluster, mut children, _client, _stream) = stopped_while_streaming();
    std::thread::sleep(Duration::from_millis(300));
    signal(&children.0[0], "INT");
    // Well before the drain period would have ended.
    exits_saying(&mut children.0[0], 3, "SIGINT received again");
}

#[test]
fn a_draining_server_stops_on_its_own_when_the_trainer_never_finishes() {
    let (_cluster, mut children, _client, _stream) = stopped_while_streaming();
    // The trainer keeps its connection (and heartbeats) but never says it finished.
    exits_saying(&mut children.0[0], 12, "after the drain period");
}

#[test]
fn a_server_without_a_token_fails_with_the_reason_in_the_failure_file() {
    let cluster = Cluster::new(1);
    let mut child = cluster.start("algo-1", &[("HETGEN_JOB_TOKEN", "short")]);
    let (status, stderr) =
        exited_within(&mut child, Duration::from_secs(5)).expect("fails at once");
    assert!(!status.success());
    assert!(stderr.contains("HETGEN_JOB_TOKEN"), "{stderr}");
    let failure = std::fs::read_to_string(cluster.failure("algo-1")).unwrap();
    assert!(failure.contains("HETGEN_JOB_TOKEN"), "{failure}");
}

#[test]
fn bad_numeric_variables_fail_with_the_reason_in_the_failure_file() {
    let cluster = Cluster::new(1);
    // `1e20` seconds once panicked the server at start, leaving no failure file.
    for (var, value) in [
        ("HETGEN_WATCHDOG_S", "1e20"),
        ("HETGEN_WATCHDOG_S", "inf"),
        ("HETGEN_WATCHDOG_S", "nan"),
        ("HETGEN_WATCHDOG_S", "-5"),
        ("HETGEN_WATCHDOG_S", "0"),
        // Once stopped the server at once, with exit code 0.
        ("HETGEN_WATCHDOG_S", "1e-12"),
        ("HETGEN_WATCHDOG_S", "0.5"),
        ("HETGEN_WATCHDOG_S", "soon"),
        ("HETGEN_DATA_PORT", "0"),
        ("HETGEN_DATA_PORT", "65536"),
        ("HETGEN_DATA_PORT", "-1"),
        ("HETGEN_DATA_MEMORY_MIB", "8"),
        ("HETGEN_DATA_MEMORY_MIB", "1e-300"),
        ("HETGEN_DATA_MAX_CONNECTIONS", "0"),
        ("HETGEN_DATA_MAX_CONNECTIONS", "inf"),
        // Below a trainer's heartbeat, a live trainer would be taken for idle.
        ("HETGEN_DATA_IDLE_S", "1"),
        ("HETGEN_DATA_IDLE_S", "nan"),
    ] {
        let _ = std::fs::remove_file(cluster.failure("algo-1"));
        let mut child = cluster.start("algo-1", &[(var, value)]);
        let (status, stderr) =
            exited_within(&mut child, Duration::from_secs(10)).expect("fails at once");
        assert_eq!(status.code(), Some(1), "{var}={value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{var}={value}: {stderr}");
        let failure = std::fs::read_to_string(cluster.failure("algo-1"))
            .unwrap_or_else(|e| panic!("{var}={value}: no failure file ({e}): {stderr}"));
        assert!(
            failure.contains(var) && (failure.contains(" to ") || failure.contains("at most")),
            "{var}={value}: {failure}"
        );
    }
}

#[test]
fn the_soak_refuses_a_duration_that_is_not_one() {
    // `cargo test` builds the package's examples beside its test binaries.
    let soak = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples/soak");
    // `--minutes nan` once panicked.
    for minutes in ["nan", "inf", "0", "-1", "soon"] {
        let out = Command::new(&soak)
            .args(["--minutes", minutes])
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", soak.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{minutes}: {stderr}");
        assert!(stderr.contains("--minutes"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_client_calling_in_a_loop_costs_the_log_a_few_lines_a_second() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![cluster.start("algo-1", &[])]);
    let job = job();
    // Every connect is a Handshake, once logged each.
    for _ in 0..200 {
        drop(cluster.connect(&job, &["algo-1"]));
    }
    // A call in a later window is logged, with the count of those left out.
    std::thread::sleep(Duration::from_millis(1100));
    drop(cluster.connect(&job, &["algo-1"]));
    signal(&children.0[0], "INT");
    signal(&children.0[0], "INT");
    let (_, stderr) = exited_within(&mut children.0[0], Duration::from_secs(10)).expect("stops");
    let connected = stderr.matches("trainer connected").count();
    assert!(connected <= 40, "{connected} lines");
    // What was left out is counted in the lines let through: every call is accounted for.
    let told: u64 = stderr
        .lines()
        .filter(|l| l.contains("trainer connected"))
        .filter_map(|l| {
            l.split("suppressed=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(connected as u64 + told, 201, "{stderr}");
}

/// A TCP connection to `address` once it listens.
fn when_listening(address: std::net::SocketAddr) -> std::net::TcpStream {
    let started = Instant::now();
    loop {
        match std::net::TcpStream::connect(address) {
            Ok(socket) => return socket,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!("{address}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Whether the server still holds `socket` open: reading finds no end (what the server sent,
/// its HTTP/2 settings, is read and dropped).
fn held_open(socket: &std::net::TcpStream) -> bool {
    use std::io::Read;
    socket.set_nonblocking(true).unwrap();
    let mut buffer = [0u8; 256];
    loop {
        match (&*socket).read(&mut buffer) {
            Ok(0) => return false,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

fn held(flood: &[std::net::TcpStream]) -> usize {
    flood.iter().filter(|s| held_open(s)).count()
}

/// A trainer streams one whole epoch from `host`: every sample once.
fn one_epoch(client: &Client, job: &Job) {
    let mut stream = client.stream(input(job, client, 1, false), None);
    let batches: Vec<_> = std::iter::from_fn(|| stream.next_batch())
        .map(Result::unwrap)
        .collect();
    assert_exactly_once(&batches, 1, 600);
}

#[test]
fn connections_that_say_nothing_give_way_to_a_trainer_and_are_closed() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![cluster.start(
        "algo-1",
        &[
            ("HETGEN_DATA_MAX_CONNECTIONS", "8"),
            ("HETGEN_DATA_IDLE_S", "6"),
        ],
    )]);
    let address = cluster.address("algo-1");
    let mut flood = vec![when_listening(address)];
    let flooded = Instant::now();
    flood.extend((0..29).map(|_| std::net::TcpStream::connect(address).unwrap()));
    std::thread::sleep(Duration::from_millis(500));
    // Guests all: at most the guests' cap of them (an eighth of 8) stays open.
    let open = held(&flood);
    assert_eq!(
        open, 1,
        "{open} of 30 connections held, with a cap of 1 guest"
    );
    let job = job();
    let client = cluster.connect(&job, &["algo-1"]);
    assert!(held(&flood) < open, "no guest gave way to the trainer");
    one_epoch(&client, &job);
    // The trainer's connection, vouched for by its token and heartbeating, outlives the guest
    // deadline and the idle timeout.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(flooded.elapsed()));
    one_epoch(&client, &job);
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "guest connections");
}

/// Connections that made an authenticated request and then went quiet give way when the
/// connections are at their cap.
#[test]
fn quiet_trainers_give_way_at_the_cap() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![cluster.start(
        "algo-1",
        &[
            ("HETGEN_DATA_MAX_CONNECTIONS", "8"),
            ("HETGEN_DATA_IDLE_S", "6"),
        ],
    )]);
    drop(when_listening(cluster.address("algo-1")));
    let job = job();
    // Eight trainers that handshake (vouching for their connections) and then say nothing, as
    // a client does until it streams.
    let _quiet: Vec<Client> = (0..8).map(|_| cluster.connect(&job, &["algo-1"])).collect();
    std::thread::sleep(Duration::from_secs(4));
    let started = Instant::now();
    let client = cluster.connect(&job, &["algo-1"]);
    assert!(started.elapsed() < Duration::from_secs(3));
    one_epoch(&client, &job);
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "closed the quietest");
}

/// CPU seconds `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which may hold spaces) end in `)`.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn out_of_descriptors_the_accept_loop_waits_and_quiet_connections_make_room() {
    use std::os::unix::process::CommandExt;
    let cluster = Cluster::new(1);
    let mut command = cluster.command("algo-1", &[]);
    // SAFETY: only setrlimit runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 40,
                rlim_max: 40,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    let mut children = Reaper(vec![command.spawn().unwrap()]);
    let address = cluster.address("algo-1");
    let mut flood = vec![when_listening(address)];
    // Past the 40 descriptors: the rest wait in the listen backlog.
    flood.extend((0..80).map(|_| std::net::TcpStream::connect(address).unwrap()));
    std::thread::sleep(Duration::from_millis(300));
    let pid = children.0[0].id();
    let before = cpu_seconds(pid);
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_seconds(pid) - before;
    // Spinning on EMFILE took a whole core (about 2 s here).
    assert!(spent < 0.6, "{spent:.2} s of CPU in 2 s out of descriptors");
    let job = job();
    let client = cluster.connect(&job, &["algo-1"]);
    one_epoch(&client, &job);
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "backing off");
    drop(flood);
}

#[test]
fn a_frozen_server_costs_the_trainer_little_and_serves_again_once_resumed() {
    let job = job();
    // A stall timeout far beyond the freeze: the frozen server must not count as lost.
    let (cluster, mut children, client) = three_servers(&job);
    let mut stream = client.stream(input(&job, &client, 30, false), None);
    let mut frozen_at = None;
    let mut resumed_at = None;
    let mut during_freeze = 0;
    let mut served_before_resume = 0;
    let batches = consume_slowly(&mut stream, |n| {
        if n == 100 {
            signal(&children.0[1], "STOP"); // algo-2, mid-epoch
            frozen_at = Some(Instant::now());
        }
        if let Some(at) = frozen_at
            && resumed_at.is_none()
        {
            // The freeze's first second is the others' head start; after it, an epoch
            // barrier waiting on the frozen server would let nothing through.
            if at.elapsed() > Duration::from_secs(1) {
                during_freeze += 1;
            }
            if at.elapsed() > Duration::from_secs(4) {
                signal(&children.0[1], "CONT");
                resumed_at = Some(Instant::now());
                served_before_resume = client.batches_by_source()["algo-2"];
            }
        }
    });
    assert!(resumed_at.is_some(), "the job ended before the freeze did");
    assert_exactly_once(&batches, 30, 600);
    // About 300 batches fit in those 3 s; an epoch barrier on the frozen server passes none.
    assert!(
        during_freeze >= 100,
        "{during_freeze} batches in the freeze's last 3 s"
    );
    let served = client.batches_by_source()["algo-2"];
    assert!(
        served > served_before_resume,
        "algo-2 served nothing after it resumed ({served} batches in all)"
    );
    assert!(client.report().backup_shards > 0);
    cluster.finished(&client, "done");
    for child in children.0.iter_mut() {
        let (status, stderr) =
            exited_within(child, Duration::from_secs(5)).expect("exits on Shutdown");
        assert!(status.success(), "{stderr}");
    }
}

#[test]
fn connections_that_ping_but_hold_no_token_cannot_keep_a_trainer_out() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![
        cluster.start("algo-1", &[("HETGEN_DATA_MAX_CONNECTIONS", "32")]),
    ]);
    let address = cluster.address("algo-1");
    drop(when_listening(address));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    // As many as the connection cap, each never quiet for long.
    let flood: Vec<_> = (0..32)
        .map(|_| runtime.spawn(peers::pinging_guest(address, flooding.clone())))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    // A trainer still gets in, at once, and streams whole epochs beside the flood.
    let job = job();
    let connecting = Instant::now();
    let client = cluster.connect(&job, &["algo-1"]);
    assert!(
        connecting.elapsed() < Duration::from_secs(5),
        "the trainer took {:?} to connect",
        connecting.elapsed()
    );
    one_epoch(&client, &job);
    // Past the guest deadline, every guest was closed however busy it kept its connection.
    std::thread::sleep(Duration::from_secs(4));
    one_epoch(&client, &job);
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let closed: usize = flood
        .into_iter()
        .map(|task| runtime.block_on(task).unwrap())
        .sum();
    assert!(
        closed >= 32,
        "the server closed only {closed} connections of the flood"
    );
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "guest connections");
}

#[test]
fn stalled_streams_hold_no_thread_and_give_way_to_a_new_trainer() {
    let cluster = Cluster::with_ranks(2, 1024);
    let mut children = Reaper(vec![
        cluster.start("algo-1", &[("HETGEN_DATA_STALL_S", "120")]),
    ]);
    let address = cluster.address("algo-1");
    drop(when_listening(address));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // A full trainer table, every trainer with a stream that takes nothing: more streams than
    // tokio's 512 blocking threads.
    let stalled = runtime
        .block_on(peers::stalled_streams(
            address,
            TOKEN,
            &cluster.trainer,
            1..1025,
        ))
        .unwrap();
    std::thread::sleep(hetgen_data::STREAM_GIVE_WAY + Duration::from_secs(1));
    let job = job();
    let started = Instant::now();
    let client = cluster.connect(&job, &["algo-1"]);
    one_epoch(&client, &job);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "an epoch took {:?} beside the stalled streams",
        started.elapsed()
    );
    let closed = stalled.iter().filter(|c| c.is_finished()).count();
    assert!(closed > 0, "no stalled stream gave way");
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "gave way");
}

#[test]
fn a_stream_whose_client_takes_nothing_is_cancelled_at_the_stall_timeout() {
    let cluster = Cluster::with_ranks(1, 32);
    let mut children = Reaper(vec![
        cluster.start("algo-1", &[("HETGEN_DATA_STALL_S", "3")]),
    ]);
    let address = cluster.address("algo-1");
    drop(when_listening(address));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let started = Instant::now();
    let stalled = runtime
        .block_on(peers::stalled_streams(
            address,
            TOKEN,
            &cluster.trainer,
            1..17,
        ))
        .unwrap();
    let waited = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), async {
            for connection in stalled {
                connection.await.unwrap();
            }
        })
        .await
    });
    assert!(waited.is_ok(), "stalled streams still open after 10 s");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "closed before the stall timeout"
    );
    // The server still serves a trainer that reads.
    let job = job();
    let client = cluster.connect(&job, &["algo-1"]);
    one_epoch(&client, &job);
    cluster.finished(&client, "done");
    exits_saying(&mut children.0[0], 5, "took no data for the stall timeout");
}

#[test]
fn a_frozen_server_holds_no_trainer_host_that_tells_it_training_is_over() {
    let cluster = Cluster::new(1);
    let mut children = Reaper(vec![cluster.start("algo-1", &[])]);
    drop(when_listening(cluster.address("algo-1")));
    signal(&children.0[0], "STOP");
    // The trainer host tells it training is over, and does not wait for it to answer.
    let started = Instant::now();
    let untold = hetgen_data::client::tell_finished(
        &cluster.hosts(&["algo-1"]),
        TOKEN,
        &cluster.trainer,
        false,
        "done",
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(untold.len(), 1, "{untold:?}");
    // Resumed, it finds the message the trainer host left, and stops.
    std::thread::sleep(Duration::from_secs(1));
    signal(&children.0[0], "CONT");
    exits_saying(&mut children.0[0], 5, "trainer sent Shutdown");
}

#[test]
fn a_server_whose_trainers_and_peers_are_gone_stops_without_waiting_for_its_watchdog() {
    let cluster = Cluster::new(2);
    let mut children = Reaper(vec![
        cluster.start("algo-1", &[]),
        cluster.start("algo-2", &[]),
    ]);
    let job = job();
    let client = cluster.connect(&job, &["algo-1", "algo-2"]);
    one_epoch(&client, &job);
    // The trainer goes without a word (as one does when the server missed its Shutdown).
    drop(client);
    // Its peer still serves: the job may not be over, so it waits.
    std::thread::sleep(hetgen_data::server::ORPHAN_QUIET + Duration::from_secs(2));
    assert!(
        children.0[0].try_wait().unwrap().is_none(),
        "stopped while a peer still served"
    );
    // The peer gone too, the job is over.
    let _ = children.0[1].kill();
    exits_saying(
        &mut children.0[0],
        8,
        "none of the job's other data servers answers",
    );
}

/// The data host of `data-test` as a Kubernetes pod: the server learns its cluster from the
/// `HETGEN_KUBE_*` variables (no `resourceconfig.json` under its root), its name and its
/// trainer host's are the pods' DNS names, which the hosts file maps to loopback addresses.
/// The server's address and the trainer host's name.
fn start_as_pod(cluster: &Cluster, extra: &[(&str, &str)]) -> (Child, SocketAddr, &'static str) {
    const DATA_POD: &str = "data-test-data-group-0-0.data-test";
    const TRAINER_POD: &str = "data-test-node-0-0.data-test";
    const GROUPS: &str = r#"[
        {"name":"data_group","replicated_job":"data-group","count":1,"instance_type":"ml.c5.xlarge"},
        {"name":"dnn_group","replicated_job":"node","count":1,"instance_type":"ml.m5.xlarge"}]"#;
    let (data_ip, trainer_ip) = (
        cluster.address("algo-1").ip(),
        cluster.address(&cluster.trainer).ip(),
    );
    let hosts = cluster.dir.path().join("hosts.txt");
    let mut text = std::fs::read_to_string(&hosts).unwrap();
    text.push_str(&format!(
        "{data_ip} {DATA_POD}\n{trainer_ip} {TRAINER_POD}\n"
    ));
    std::fs::write(&hosts, text).unwrap();
    let vars = [
        ("HETGEN_KUBE_GROUPS", GROUPS),
        ("HETGEN_KUBE_GROUP", "data_group"),
        ("HETGEN_KUBE_JOBSET", "data-test"),
        ("HETGEN_KUBE_INDEX", "0"),
    ];
    let pod_root = cluster.dir.path().join("pod");
    assert!(!pod_root.join("input/config/resourceconfig.json").exists());
    let child = cluster
        .command("pod", &[&vars[..], extra].concat())
        .spawn()
        .unwrap();
    (child, SocketAddr::new(data_ip, cluster.port), TRAINER_POD)
}

fn health_check(service: &str) -> tonic_health::pb::HealthCheckRequest {
    tonic_health::pb::HealthCheckRequest {
        service: service.to_owned(),
    }
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

#[test]
fn a_readiness_probe_needs_no_token_and_sees_the_server_stop() {
    use hetgen_data::proto::HeartbeatRequest;
    use hetgen_data::proto::data_service_client::DataServiceClient;
    use tonic_health::pb::health_client::HealthClient;

    let cluster = Cluster::new(1);
    let (child, address, trainer) = start_as_pod(&cluster, &[]);
    let mut children = Reaper(vec![child]);
    drop(when_listening(address));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let channel = runtime.block_on(async {
        tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    let mut health = HealthClient::new(channel.clone());
    // What kubelet's probe asks (no service name), and the data service by name: no token.
    for service in ["", "hetgen.data.v1.DataService"] {
        let answer = runtime
            .block_on(health.check(health_check(service)))
            .unwrap_or_else(|e| panic!("`{service}`: {e}"));
        assert_eq!(answer.into_inner().status, SERVING, "`{service}`");
    }
    let unknown = runtime
        .block_on(health.check(health_check("no.such.Service")))
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    // Every call of the data service still needs the token, on the probe's own connection too.
    let refused = runtime
        .block_on(DataServiceClient::new(channel.clone()).heartbeat(HeartbeatRequest::default()))
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");

    // A watcher sees SERVING, then NOT_SERVING once the job's trainer host has finished.
    let mut watch = runtime
        .block_on(health.watch(health_check("")))
        .unwrap()
        .into_inner();
    let first = runtime.block_on(watch.message()).unwrap().unwrap();
    assert_eq!(first.status, SERVING);
    let job = job();
    let mut config = client_config();
    config.trainer_id = format!("{trainer}/rank-0");
    let client = Client::connect(
        &[(
            "data-test-data-group-0-0.data-test".to_owned(),
            cluster.port,
        )],
        job.pipeline.output_shape,
        config,
    )
    .unwrap();
    // The server knows the pod names of its trainer hosts: this one's word ends the job.
    assert!(client.finished(trainer, false, "done").is_empty());
    let next = runtime.block_on(watch.message()).unwrap().unwrap();
    assert_eq!(next.status, NOT_SERVING);
    exits_saying(&mut children.0[0], 5, "shutdown requested by a trainer");
}

/// A raw HTTP/2 connection to `address` that has made one health check without the token:
/// its handle, which keeps it open, and its driver, which ends when the server closes it.
async fn probed(
    address: SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
) {
    let socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let (send, connection) = h2::client::handshake(socket).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.unwrap();
    let handle = send.clone();
    let request = http::Request::post(format!("http://{address}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = send.send_request(request, false).unwrap();
    // One uncompressed message: the empty HealthCheckRequest (the whole server).
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut message = Vec::new();
    while let Some(chunk) = body.data().await {
        message.extend_from_slice(&chunk.unwrap());
    }
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    // A frame holding `status: SERVING` (field 1, varint 1).
    assert_eq!(message, [0, 0, 0, 0, 2, 8, 1]);
    (handle, driver)
}

#[test]
fn probe_connections_are_guests_and_give_way_to_each_other() {
    let cluster = Cluster::new(1);
    // Eight connections: a guest cap of one.
    let (child, address, _) = start_as_pod(&cluster, &[("HETGEN_DATA_MAX_CONNECTIONS", "8")]);
    let _children = Reaper(vec![child]);
    drop(when_listening(address));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (_keep_first, first) = probed(address).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !first.is_finished(),
            "an open probe connection is not closed at once"
        );
        // The second probe takes the first one's place: a probe vouches for nothing, so probes
        // are held to the guests' cap and cannot crowd trainers out.
        let (_keep_second, second) = probed(address).await;
        let opened = Instant::now();
        tokio::time::timeout(Duration::from_secs(3), first)
            .await
            .expect("the first probe's connection is closed")
            .unwrap();
        // And a probe's connection is closed by the guest deadline.
        tokio::time::timeout(Duration::from_secs(8), second)
            .await
            .expect("closed within the guest deadline")
            .unwrap();
        // By the guest deadline (5 s), not by anything quicker.
        assert!(
            opened.elapsed() > Duration::from_secs(4),
            "{:?}",
            opened.elapsed()
        );
    });
}
