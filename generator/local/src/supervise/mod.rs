//! Running the hosts: one process per host, each the leader of its own process group, watched
//! until the job ends the way SageMaker ends one.
//!
//! - Completed: every host's process exited 0.
//! - Failed: a host exited non-zero or was killed; the reason is its `output/failure`, else its
//!   exit status. The other hosts then get SIGTERM and, after the grace period, SIGKILL, as
//!   StopTrainingJob does. The reason is that of a host that failed on its own: the first whose
//!   script raised before that stop began, else the host whose failure began it, never one the
//!   stop itself ended.
//! - Stopped: a stop was requested (Ctrl-C, SIGTERM) or the max runtime passed; same shutdown.
//!
//! When a host's main process exits, its whole process group is killed: on SageMaker the
//! container ends with its entry point, taking every process it started along. That is what
//! makes "no process left behind" hold even for hosts whose children outlive them.
//!
//! A host may wait for others to be Ready before it starts (a Kubernetes trainer pod for its
//! data pods, [`HostCommand::waits_for`]); should the job end first, it never starts.
//!
//! Its rooms: `host` starts one host's process and reads its output, `ready` watches for the
//! moment a waiting host may start, `run` watches the hosts and ends the job, and this module
//! holds what callers see.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::LocalError;
use crate::Step;
use crate::layout::Host;

mod host;
mod ready;
mod run;

/// What to run for one host.
#[derive(Debug, Clone)]
pub struct HostCommand {
    /// The host it simulates.
    pub host: Host,
    /// The program (the launcher).
    pub program: PathBuf,
    /// Its arguments (`train`).
    pub args: Vec<String>,
    /// Its whole environment: nothing else is inherited.
    pub env: BTreeMap<String, String>,
    /// The host's `/opt/ml`; also its working directory.
    pub base_dir: PathBuf,
    /// Cores it may run on; `None` for all.
    pub cpus: Option<Vec<usize>>,
    /// A hosts file the host sees as `/etc/hosts` (in a mount namespace of its own).
    pub hosts_binding: Option<crate::framework::HostsBinding>,
    /// Addresses whose gRPC health service must answer SERVING before this host starts, as
    /// JobSet holds a replicatedJob back until those it `dependsOn` are Ready (`ready`);
    /// empty: it starts with the run.
    pub waits_for: Vec<SocketAddr>,
}

impl HostCommand {
    /// Where the host's output is kept.
    pub fn log_file(&self) -> PathBuf {
        self.base_dir.join(crate::run_dir::HOST_LOG)
    }
}

/// Limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Stop the job after this long.
    pub max_runtime: Option<Duration>,
    /// Between SIGTERM and SIGKILL when hosts are stopped.
    pub grace: Duration,
}

/// A job's status, with SageMaker's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Every host exited 0.
    Completed,
    /// A host failed.
    Failed,
    /// Stopped on request or at the max runtime.
    Stopped,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Completed => "Completed",
            Status::Failed => "Failed",
            Status::Stopped => "Stopped",
        })
    }
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How one host's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exit {
    /// The process id (also its process group id); 0 for a host that never started (it was
    /// waiting for others to be Ready when the job ended).
    pub pid: u32,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// From start to exit.
    pub duration: Duration,
}

impl Exit {
    /// Whether the host succeeded.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// `exit code 3` or `signal 9 (SIGKILL)`.
    pub fn describe(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(signal)) => format!(
                "signal {signal} ({})",
                hetgen_env::process::signal_name(signal)
            ),
            (None, None) => "an unknown status".to_owned(),
        }
    }
}

/// What happened, told as it happens. The library prints nothing; the CLI shows these.
pub trait Observer {
    /// A host's process started.
    fn started(&mut self, _host: &Host, _pid: u32) {}
    /// A line of a host's output (already written to its log).
    fn output(&mut self, host: &Host, stream: Stream, line: &str);
    /// A trainer's step line, after its `output`.
    fn step(&mut self, _host: &Host, _step: &Step) {}
    /// A host's process ended.
    fn exited(&mut self, _host: &Host, _exit: &Exit) {}
    /// The job is being stopped; `reason` says why.
    fn stopping(&mut self, _reason: &str) {}
}

/// Requests to stop the job: the first stops it gracefully, a second kills at once.
#[derive(Debug, Clone, Default)]
pub struct StopRequests(Arc<AtomicUsize>);

impl StopRequests {
    /// A fresh counter, not tied to any signal.
    pub fn new() -> StopRequests {
        StopRequests::default()
    }

    /// Counts SIGINT and SIGTERM sent to this process as stop requests from now on (the
    /// hosts, in process groups of their own, do not get the terminal's Ctrl-C themselves:
    /// the supervisor stops them in order). Only one counter per process can be tied.
    pub fn from_signals() -> StopRequests {
        static TIED: OnceLock<StopRequests> = OnceLock::new();
        TIED.get_or_init(|| {
            let requests = StopRequests::new();
            for signal in [SIGINT, SIGTERM] {
                let counter = requests.clone();
                // signal-hook's `flag::register`, counting instead of setting: every signal
                // counts, so a second Ctrl-C is seen however soon it follows the first.
                // SAFETY: the action is one atomic add on memory it owns, async-signal-safe.
                // Registering SIGINT or SIGTERM cannot fail (only SIGKILL and the like are
                // refused).
                let _ =
                    unsafe { signal_hook::low_level::register(signal, move || counter.request()) };
            }
            requests
        })
        .clone()
    }

    /// Asks for a stop.
    pub fn request(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// How many stops were asked for so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The job's status.
    pub status: Status,
    /// SageMaker's secondary status: `Completed`, `Failed`, `Stopped` or `MaxRuntimeExceeded`.
    pub secondary_status: String,
    /// Why it did not complete.
    pub failure_reason: Option<String>,
    /// When the first host started.
    pub start: SystemTime,
    /// When the last host ended.
    pub end: SystemTime,
    /// Per host, in the order of the commands.
    pub exits: Vec<Exit>,
}

/// Runs every host until the job ends, then makes sure none of their processes is left.
pub fn supervise(
    commands: &[HostCommand],
    limits: Limits,
    stop: &StopRequests,
    observer: &mut dyn Observer,
) -> Result<Outcome, LocalError> {
    let start = SystemTime::now();
    // Taken before any host starts: a stop asked for while they start (a Ctrl-C, or an observer
    // told of a start) must stop the job, not be counted as already seen.
    let stops_seen = stop.count();
    let started_at = Instant::now();
    let (tx, events) = std::sync::mpsc::channel();
    let hosts = run::start_hosts(commands, &tx, observer)?;
    // Ends with this function, whether or not every waiting host got to start.
    let _probes = ready::Probes::start(commands, tx.clone());
    let mut run = run::Run::new(commands, hosts, tx, limits, started_at, stops_seen);
    run.watch(&events, stop, observer);
    Ok(run.finish(start))
}
