//! Soak test of the data service, run on purpose (not part of `make test`): several data
//! servers and several trainer ranks, as real processes on loopback addresses, for minutes on
//! end, with data servers killed (SIGKILL) or frozen (SIGSTOP, then SIGCONT 1 to 15 s later:
//! shorter and longer than the trainers' 10 s stall timeout) at random moments. Every epoch of every round is
//! checked against the epoch plan: samples lost and samples yielded twice must both be 0. The
//! peak RSS of every process is reported.
//!
//! ```text
//! cargo build --release -p hetgen-data --bins --examples
//! $CARGO_TARGET_DIR/release/examples/soak --minutes 10 --servers 3 --trainers 2
//! ```
//!
//! The work is done in rounds: a round starts the servers and the trainers, kills or freezes
//! up to all servers but one while the trainers stream, waits for the trainers, stops what is left and
//! checks the trainers' audit files. Rounds repeat until the time is up. A trainer is this same
//! program run as `soak trainer …`.
//!
//! `soak stragglers` measures what one frozen server costs the trainers, `soak misbehaving`
//! what a peer beside the job costs them (pinging connections without the token, shard streams
//! that never take a byte); both alternate runs with and without, and check every run.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use hetgen_data::audit::AuditFile;
use hetgen_data::client::{Client, ClientConfig};
use hetgen_fixtures::InstanceTrees;
use hetgen_pipeline::plan::EpochPlan;
use hetgen_pipeline::{BatchStream, InputConfig};
use hetgen_spec::model::Job;

mod misbehaving;
#[path = "../../tests/common/peers.rs"]
mod peers;
mod stragglers;

use misbehaving::misbehaving;
use stragglers::stragglers;

const TOKEN: &str = "soak-0123456789abcdef0123456789";
const SEED: u64 = 11;
const SAMPLES: u64 = 6_000;
const SHARD_SIZE: u32 = 128;
const BATCH_SIZE: u32 = 32;
const SHAPE: [u32; 3] = [64, 64, 3];

/// The soak's job: the shared `data-test` job at the soak's scale, with `servers` data hosts.
fn job(servers: usize) -> Job {
    hetgen_fixtures::spec("data-test")
        .set("job.name", "soak")
        .set("job.seed", SEED)
        .set("instance_group.0.count", servers)
        .set("pipeline.source.shape", [80, 80, 3])
        .set("pipeline.source.classes", 10)
        .set("pipeline.source.samples", SAMPLES)
        .set("pipeline.batch_size", BATCH_SIZE)
        .set("pipeline.shard_size", SHARD_SIZE)
        .set("pipeline.threads", 1)
        .set("pipeline.stage.0.size", [SHAPE[0], SHAPE[1]])
        .job()
}

/// `--name value` from the command line.
/// The value of `name`, or `default`; a value that does not parse ends the run with exit 2.
fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    let Some(value) = args
        .iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
    else {
        return default;
    };
    value.parse().unwrap_or_else(|_| {
        eprintln!("soak: {name} {value}: not a valid value");
        std::process::exit(2)
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("trainer") => trainer(&args),
        Some("stragglers") => stragglers(&args),
        Some("misbehaving") => misbehaving(&args),
        _ => coordinator(&args),
    }
}

/// `hetgen-data-server`, built beside the examples.
fn server_binary(me: &Path) -> PathBuf {
    me.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("hetgen-data-server"))
        .filter(|p| p.exists())
        .expect("hetgen-data-server next to examples/ (cargo build -p hetgen-data --bins)")
}

/// One trainer rank: stream the epochs, record every yielded sample, report the peak RSS.
fn trainer(args: &[String]) -> ExitCode {
    hetgen_data::tune_allocator();
    let rank: u32 = flag(args, "--rank", 0);
    let world: u32 = flag(args, "--world", 1);
    let epochs: u32 = flag(args, "--epochs", 2);
    let step_ms: u64 = flag(args, "--step-ms", 0);
    let audit: PathBuf = flag(args, "--audit", PathBuf::from("audit.txt"));
    let hosts: Vec<(String, u16)> = flag(args, "--hosts", String::new())
        .split(',')
        .map(|h| {
            let (ip, port) = h.rsplit_once(':').expect("host:port");
            (ip.to_owned(), port.parse().expect("a port"))
        })
        .collect();
    // The servers accept ids of the job's trainer host (`setup` makes it the host after them).
    let trainer_host = format!("algo-{}", hosts.len() + 1);
    let mut config = ClientConfig::new(format!("{trainer_host}/rank-{rank}"), TOKEN.to_owned());
    config.connect_timeout = Duration::from_secs(30);
    config.stall_timeout = Duration::from_secs(10);
    config.heartbeat = Duration::from_millis(500);
    let client = match Client::connect(&hosts, SHAPE, config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("trainer {rank}: cannot connect: {e}");
            return ExitCode::FAILURE;
        }
    };
    let input = InputConfig {
        seed: SEED,
        samples_per_epoch: client.samples_per_epoch(),
        shards: None,
        shard_size: SHARD_SIZE,
        batch_size: BATCH_SIZE,
        epochs: Some(epochs),
        rank,
        world,
        deterministic: false,
    };
    let mut file = AuditFile::open(&audit).expect("the audit file opens");
    let mut stream = client.stream(input, None);
    while let Some(batch) = stream.next_batch() {
        match batch {
            Ok(batch) => file.record(&batch).expect("the audit file is writable"),
            Err(e) => {
                eprintln!("trainer {rank}: stream failed: {e}");
                return ExitCode::FAILURE;
            }
        }
        if step_ms > 0 {
            std::thread::sleep(Duration::from_millis(step_ms));
        }
    }
    drop(file);
    let input = client.report();
    println!(
        "peak_rss_kib {} backup_shards {} duplicate_batches {}",
        peak_rss_kib(std::process::id()).unwrap_or(0),
        input.backup_shards,
        input.duplicate_batches
    );
    ExitCode::SUCCESS
}

/// A figure from a trainer's report line (`name value name value …`).
fn reported(out: &str, name: &str) -> Option<u64> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let at = words.iter().position(|w| *w == name)?;
    words.get(at + 1)?.parse().ok()
}

/// `VmHWM` of a live process, KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A small xorshift generator: the soak's random choices, reproducible from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Everything about one process the soak started.
struct Proc {
    name: String,
    child: Child,
    peak_kib: u64,
    killed: bool,
    /// When a frozen (SIGSTOPped) server is to be resumed.
    thaw_at: Option<Instant>,
}

impl Proc {
    fn new(name: String, child: Child) -> Proc {
        Proc {
            name,
            child,
            peak_kib: 0,
            killed: false,
            thaw_at: None,
        }
    }

    fn sample(&mut self) {
        if let Some(kib) = peak_rss_kib(self.child.id()) {
            self.peak_kib = self.peak_kib.max(kib);
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on a child this process has not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    /// SIGCONT if frozen and `now` is the time (or any time, with `force`).
    fn thaw(&mut self, force: bool) -> bool {
        match self.thaw_at {
            Some(at) if force || Instant::now() >= at => {
                self.signal(libc::SIGCONT);
                self.thaw_at = None;
                true
            }
            _ => false,
        }
    }
}

#[derive(Default)]
struct Totals {
    rounds: u32,
    failed_rounds: u32,
    kills: u32,
    freezes: u32,
    epochs: u64,
    samples: u64,
    lost: u64,
    duplicated: u64,
    unexpected: u64,
    /// role → peak RSS of each of its processes, KiB.
    peaks: BTreeMap<&'static str, Vec<u64>>,
}

impl Totals {
    /// The line a comparison command ends with, and its exit status: failure if any sample was
    /// lost, repeated or not in the plan, or a trainer failed.
    fn checked(&self) -> ExitCode {
        println!(
            "samples checked: {}; lost: {}; duplicated: {}; failed trainers: {}",
            self.samples, self.lost, self.duplicated, self.failed_rounds
        );
        if self.lost + self.duplicated + self.unexpected + u64::from(self.failed_rounds) > 0 {
            return ExitCode::FAILURE;
        }
        ExitCode::SUCCESS
    }
}

fn coordinator(args: &[String]) -> ExitCode {
    let minutes: f64 = flag(args, "--minutes", 10.0);
    // `nan` and `inf` parse as numbers, and `Duration::from_secs_f64` panics on them.
    if !(0.1..=1440.0).contains(&minutes) {
        eprintln!("soak: --minutes {minutes}: expected minutes from 0.1 to 1440");
        return ExitCode::from(2);
    }
    let servers: usize = flag(args, "--servers", 3);
    let trainers: u32 = flag(args, "--trainers", 2);
    let epochs: u32 = flag(args, "--epochs", 3);
    let step_ms: u64 = flag(args, "--step-ms", 10);
    let mut rng = Rng(flag(args, "--seed", 0x9e37_79b9_7f4a_7c15u64) | 1);
    let cluster = Cluster::set_up(servers, 31_000);
    let deadline = Instant::now() + Duration::from_secs_f64(minutes * 60.0);
    let started = Instant::now();
    let mut totals = Totals::default();
    // Kills fall within the first 80% of a round, judged by the round before.
    let mut last_round = Duration::from_secs(10);
    eprintln!(
        "soak: {servers} data servers, {trainers} trainer ranks, {epochs} epochs of {SAMPLES} samples a round, for {minutes} min"
    );
    while Instant::now() < deadline {
        totals.rounds += 1;
        let round = totals.rounds;
        let round_started = Instant::now();
        let mut procs = cluster.start_servers();
        let mut ranks = cluster.start_trainers(round, trainers, epochs, step_ms);

        // Kill or freeze up to all servers but one, at random moments while the trainers
        // stream.
        let planned = rng.below(servers as u64) as usize;
        let window = (last_round.as_millis() as u64 * 4 / 5).max(1_000);
        let mut strike_at: Vec<Instant> = (0..planned)
            .map(|_| Instant::now() + Duration::from_millis(200 + rng.below(window)))
            .collect();
        strike_at.sort();
        let statuses = strike_while_streaming(
            &mut procs,
            &mut ranks,
            strike_at,
            &mut rng,
            &mut totals,
            round,
            started,
        );
        end_round(&mut procs, &mut ranks, &statuses, &mut totals, round);
        last_round = round_started.elapsed();
        check_round(cluster.dir.path(), round, trainers, epochs, &mut totals);
        record_peaks(&procs, &ranks, &mut totals);
        eprintln!(
            "round {round} done at {:.0} s: {} kills and {} freezes so far, lost {}, duplicated {}",
            started.elapsed().as_secs_f64(),
            totals.kills,
            totals.freezes,
            totals.lost,
            totals.duplicated
        );
    }
    report(&totals, started.elapsed(), servers, trainers, epochs)
}

/// Until every trainer rank has exited: sample peak RSS, resume frozen servers when due, and
/// strike a server at each of `strike_at`; the ranks' exit statuses.
fn strike_while_streaming(
    procs: &mut [Proc],
    ranks: &mut [Proc],
    mut strike_at: Vec<Instant>,
    rng: &mut Rng,
    totals: &mut Totals,
    round: u32,
    started: Instant,
) -> Vec<Option<std::process::ExitStatus>> {
    let mut statuses = vec![None; ranks.len()];
    while statuses.iter().any(Option::is_none) {
        for p in procs.iter_mut().chain(ranks.iter_mut()) {
            p.sample();
        }
        for (i, r) in ranks.iter_mut().enumerate() {
            if statuses[i].is_none() {
                statuses[i] = r.child.try_wait().expect("wait on a trainer");
            }
        }
        for p in procs.iter_mut() {
            if p.thaw(false) {
                eprintln!(
                    "round {round}: resumed {} at {:.1} s",
                    p.name,
                    started.elapsed().as_secs_f64()
                );
            }
        }
        if strike_at.first().is_some_and(|t| Instant::now() >= *t) {
            strike_at.remove(0);
            strike(procs, rng, totals, round, started);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    statuses
}

/// The round's peak RSS per process, by role.
fn record_peaks(procs: &[Proc], ranks: &[Proc], totals: &mut Totals) {
    let servers = procs.iter().map(|p| p.peak_kib);
    totals
        .peaks
        .entry("data server")
        .or_default()
        .extend(servers);
    let trainers = ranks.iter().map(|r| r.peak_kib);
    totals.peaks.entry("trainer").or_default().extend(trainers);
}

/// Stop the round's servers, and read each rank's report and exit status into `totals`.
fn end_round(
    procs: &mut [Proc],
    ranks: &mut [Proc],
    statuses: &[Option<std::process::ExitStatus>],
    totals: &mut Totals,
    round: u32,
) {
    for p in procs.iter_mut().filter(|p| !p.killed) {
        p.sample();
        p.thaw(true);
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
    let mut ok = true;
    for (r, status) in ranks.iter_mut().zip(statuses) {
        let mut out = String::new();
        if let Some(stdout) = r.child.stdout.take() {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                out.push_str(&line);
            }
        }
        // The trainer's own reading is the exact peak; the sampled one is a lower bound.
        if let Some(kib) = reported(&out, "peak_rss_kib") {
            r.peak_kib = r.peak_kib.max(kib);
        }
        if !status.is_some_and(|s| s.success()) {
            ok = false;
            eprintln!("round {round}: {} failed ({status:?})", r.name);
        }
    }
    if !ok {
        totals.failed_rounds += 1;
    }
}

/// What the soak's rounds run on: this program (the trainer ranks) and the data server, the
/// hosts' trees in a temporary folder, and a port and loopback network of this process's own.
struct Cluster {
    me: PathBuf,
    server_bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// The data hosts' (name, address).
    hosts: Vec<(String, String)>,
}

impl Cluster {
    /// Job file, SageMaker trees and hosts file for `servers` data hosts, on a port from
    /// `base_port` on (each soak command its own range).
    fn set_up(servers: usize, base_port: u16) -> Cluster {
        let me = std::env::current_exe().expect("the soak's own path");
        let server_bin = server_binary(&me);
        let dir = tempfile::tempdir().expect("a temporary folder");
        let port = base_port + (std::process::id() % 2_000) as u16;
        let net = 100 + (std::process::id() % 100) as u8;
        let job = job(servers);
        hetgen_fixtures::write_job_file(dir.path(), &job, "soak.toml");
        let trees = InstanceTrees::lay_out(dir.path(), &job);
        let address = |n: usize| format!("127.{net}.0.{n}");
        trees.write_hosts_file(address);
        // The data hosts come first: `algo-N` for N from 1.
        let hosts = (1..)
            .zip(trees.hosts_of("data_group"))
            .map(|(n, host)| (host, address(n)))
            .collect();
        Cluster {
            me,
            server_bin,
            dir,
            port,
            hosts,
        }
    }

    /// The data servers' socket addresses.
    fn addresses(&self) -> Vec<std::net::SocketAddr> {
        self.hosts
            .iter()
            .map(|(_, ip)| std::net::SocketAddr::new(ip.parse().expect("an IP"), self.port))
            .collect()
    }

    /// The data servers of a round, one per host.
    fn start_servers(&self) -> Vec<Proc> {
        let dir = self.dir.path();
        self.hosts
            .iter()
            .map(|(host, _)| {
                let child = Command::new(&self.server_bin)
                    .env("SAGEMAKER_BASE_DIR", dir.join(host))
                    .env("HETGEN_JOB_FILE", dir.join("job.json"))
                    .env("HETGEN_JOB_TOKEN", TOKEN)
                    .env("HETGEN_HOSTS_FILE", dir.join("hosts.txt"))
                    .env("HETGEN_DATA_PORT", self.port.to_string())
                    .env("HETGEN_WATCHDOG_S", "30")
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("a data server starts");
                Proc::new(host.clone(), child)
            })
            .collect()
    }

    /// The trainer ranks of a round: this program as `soak trainer`, auditing into the folder.
    fn start_trainers(&self, round: u32, trainers: u32, epochs: u32, step_ms: u64) -> Vec<Proc> {
        let host_list = self
            .hosts
            .iter()
            .map(|(_, ip)| format!("{ip}:{}", self.port))
            .collect::<Vec<_>>()
            .join(",");
        (0..trainers)
            .map(|rank| {
                let audit = self.dir.path().join(format!("audit-{round}-{rank}.txt"));
                let child = Command::new(&self.me)
                    .args(["trainer", "--rank", &rank.to_string()])
                    .args(["--world", &trainers.to_string()])
                    .args(["--epochs", &epochs.to_string()])
                    .args(["--step-ms", &step_ms.to_string()])
                    .args(["--hosts", &host_list])
                    .arg("--audit")
                    .arg(&audit)
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("a trainer starts");
                Proc::new(format!("rank-{rank}"), child)
            })
            .collect()
    }
}

/// Kill (SIGKILL) or freeze (SIGSTOP, resumed 1 to 15 s later) one of the servers still
/// serving, as long as another one is.
fn strike(procs: &mut [Proc], rng: &mut Rng, totals: &mut Totals, round: u32, started: Instant) {
    let serving: Vec<usize> = (0..procs.len())
        .filter(|&i| !procs[i].killed && procs[i].thaw_at.is_none())
        .collect();
    if serving.len() < 2 {
        return;
    }
    let victim = &mut procs[serving[rng.below(serving.len() as u64) as usize]];
    victim.sample();
    let at = started.elapsed().as_secs_f64();
    if rng.below(2) == 0 {
        victim.child.kill().expect("SIGKILL a data server");
        victim.child.wait().expect("reap it");
        victim.killed = true;
        totals.kills += 1;
        eprintln!("round {round}: killed {} at {at:.1} s", victim.name);
    } else {
        let frozen = Duration::from_millis(1_000 + rng.below(14_000));
        victim.signal(libc::SIGSTOP);
        victim.thaw_at = Some(Instant::now() + frozen);
        totals.freezes += 1;
        eprintln!(
            "round {round}: froze {} at {at:.1} s for {:.1} s",
            victim.name,
            frozen.as_secs_f64()
        );
    }
}

/// Compare what the trainers of `round` yielded with the epoch plan, epoch by epoch.
fn check_round(dir: &Path, round: u32, trainers: u32, epochs: u32, totals: &mut Totals) {
    let mut seen: HashMap<(u32, u64), u32> = HashMap::new();
    for rank in 0..trainers {
        let path = dir.join(format!("audit-{round}-{rank}.txt"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if let (Some(e), Some(id)) = (words.next(), words.next())
                && let (Ok(e), Ok(id)) = (e.parse(), id.parse())
            {
                *seen.entry((e, id)).or_default() += 1;
            }
        }
        let _ = std::fs::remove_file(path);
    }
    for epoch in 0..epochs {
        let mut expected = 0u64;
        for rank in 0..trainers {
            let plan = EpochPlan::new(SEED, epoch, SAMPLES, SHARD_SIZE, rank, trainers);
            for id in plan.shards.iter().flat_map(|s| &s.sample_ids) {
                expected += 1;
                match seen.remove(&(epoch, *id)) {
                    None => totals.lost += 1,
                    Some(n) => totals.duplicated += u64::from(n - 1),
                }
            }
        }
        totals.epochs += 1;
        totals.samples += expected;
    }
    totals.unexpected += seen.values().map(|&n| u64::from(n)).sum::<u64>();
}

fn report(t: &Totals, took: Duration, servers: usize, trainers: u32, epochs: u32) -> ExitCode {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "soak: {:.1} min, {} rounds ({} with a failed trainer), {servers} servers and {trainers} trainer ranks a round, {epochs} epochs a round",
        took.as_secs_f64() / 60.0,
        t.rounds,
        t.failed_rounds
    );
    let _ = writeln!(
        out,
        "data servers killed: {}; frozen and resumed: {}; epochs checked: {}; samples checked: {}",
        t.kills, t.freezes, t.epochs, t.samples
    );
    let _ = writeln!(
        out,
        "lost: {}; duplicated: {}; not in the plan: {}",
        t.lost, t.duplicated, t.unexpected
    );
    for (role, peaks) in &t.peaks {
        let mut sorted = peaks.clone();
        sorted.sort_unstable();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
        let max = sorted.last().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "peak RSS per {role} process: median {:.1} MiB, max {:.1} MiB ({} processes)",
            mib(median),
            mib(max),
            sorted.len()
        );
    }
    if t.lost == 0 && t.duplicated == 0 && t.unexpected == 0 && t.failed_rounds == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
