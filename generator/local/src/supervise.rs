//! Running the hosts: one process per host, each the leader of its own process group, watched
//! until the job ends the way SageMaker ends one.
//!
//! - Completed: every host's process exited 0.
//! - Failed: a host exited non-zero or was killed; the reason is its `output/failure`, else its
//!   exit status. The other hosts then get SIGTERM and, after the grace period, SIGKILL, as
//!   StopTrainingJob does.
//! - Stopped: a stop was requested (Ctrl-C, SIGTERM) or the max runtime passed; same shutdown.
//!
//! When a host's main process exits, its whole process group is killed: on SageMaker the
//! container ends with its entry point, taking every process it started along. That is what
//! makes "no process left behind" hold even for hosts whose children outlive them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use hetgen_env::process::Signal;
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::LocalError;
use crate::Step;
use crate::layout::Host;

/// SageMaker's limit on `FailureReason`.
const MAX_REASON: usize = 1024;
/// How often stop requests and deadlines are looked at when nothing else happens.
const POLL: Duration = Duration::from_millis(50);
/// How long output may keep coming after every host exited: only a process that left its
/// host's process group can still hold a pipe open, and it must not hang the run.
const DRAIN: Duration = Duration::from_secs(2);

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
}

impl HostCommand {
    /// Where the host's output is kept.
    pub fn log_file(&self) -> PathBuf {
        self.base_dir.join("output/log.txt")
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
    /// The process id (also its process group id).
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

enum Event {
    Line(usize, Stream, String),
    Eof,
    Exited(usize, std::io::Result<ExitStatus>, Instant),
}

struct Running {
    pid: u32,
    started: Instant,
    exit: Option<Exit>,
}

/// Runs every host until the job ends, then makes sure none of their processes is left.
pub fn supervise(
    commands: &[HostCommand],
    limits: Limits,
    stop: &StopRequests,
    observer: &mut dyn Observer,
) -> Result<Outcome, LocalError> {
    let (tx, rx) = mpsc::channel();
    let start = SystemTime::now();
    let started_at = Instant::now();
    // Taken before any host starts: a stop asked for while they start (a Ctrl-C, or an observer
    // told of a start) must stop the job, not be counted as already seen.
    let mut stops_seen = stop.count();
    let mut hosts: Vec<Running> = Vec::with_capacity(commands.len());
    for (i, command) in commands.iter().enumerate() {
        match spawn(i, command, &tx) {
            Ok(pid) => {
                observer.started(&command.host, pid);
                hosts.push(Running {
                    pid,
                    started: Instant::now(),
                    exit: None,
                });
            }
            Err(e) => {
                // Those already started must not outlive a run that never began.
                for h in &hosts {
                    kill_group(h.pid, Signal::KILL);
                }
                return Err(e);
            }
        }
    }
    drop(tx);

    let mut ending: Option<(Status, String, Option<String>)> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut open_streams = 2 * commands.len();
    let mut drain_until: Option<Instant> = None;
    // A limit too far off to be an `Instant` is no limit (checked: it is the user's number).
    let deadline = limits.max_runtime.and_then(|d| started_at.checked_add(d));
    let after_grace = || Instant::now().checked_add(limits.grace);

    loop {
        let all_exited = hosts.iter().all(|h| h.exit.is_some());
        if all_exited {
            let until = *drain_until.get_or_insert_with(|| Instant::now() + DRAIN);
            if open_streams == 0 || Instant::now() >= until {
                break;
            }
        }
        let mut wait = POLL;
        // Only moments still to act on: a deadline already acted on is in the past and would
        // make every wait zero, spinning for the whole grace period.
        let pending = [
            deadline.filter(|_| ending.is_none()),
            kill_at.filter(|_| !killed),
            drain_until,
        ];
        for t in pending.into_iter().flatten() {
            wait = wait.min(t.saturating_duration_since(Instant::now()));
        }
        match rx.recv_timeout(wait) {
            Ok(Event::Line(i, stream, line)) => {
                let host = &commands[i].host;
                observer.output(host, stream, &line);
                // Either stream: a script's output may reach the host's stderr on its way
                // through torchrun and the training toolkit.
                if let Some(step) = Step::parse(&line) {
                    observer.step(host, &step);
                }
            }
            Ok(Event::Eof) => open_streams -= 1,
            Ok(Event::Exited(i, status, at)) => {
                let h = &mut hosts[i];
                // The container ends with its entry point: nothing it started survives it.
                kill_group(h.pid, Signal::KILL);
                let exit = to_exit(h.pid, status, at.duration_since(h.started));
                observer.exited(&commands[i].host, &exit);
                if ending.is_none() && !exit.success() {
                    let reason = failure_reason(&commands[i], &exit);
                    observer.stopping(&reason);
                    ending = Some((Status::Failed, "Failed".to_owned(), Some(reason)));
                    h.exit = Some(exit);
                    terminate(&hosts);
                    kill_at = after_grace();
                } else {
                    h.exit = Some(exit);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }

        let stops = stop.count();
        if stops > stops_seen {
            stops_seen = stops;
            if ending.is_none() {
                let reason = "stopped on request (Ctrl-C or SIGTERM)".to_owned();
                observer.stopping(&reason);
                ending = Some((Status::Stopped, "Stopped".to_owned(), Some(reason)));
                terminate(&hosts);
                kill_at = after_grace();
            } else {
                // Asked twice: do not wait out the grace period.
                kill_at = Some(Instant::now());
            }
        }
        if ending.is_none()
            && let Some(limit) = limits.max_runtime
            && deadline.is_some_and(|d| Instant::now() >= d)
        {
            let reason = format!(
                "the job ran past its max runtime of {} s",
                limit.as_secs_f64()
            );
            observer.stopping(&reason);
            ending = Some((
                Status::Stopped,
                "MaxRuntimeExceeded".to_owned(),
                Some(reason),
            ));
            terminate(&hosts);
            kill_at = after_grace();
        }
        if !killed && kill_at.is_some_and(|t| Instant::now() >= t) {
            killed = true;
            for h in hosts.iter().filter(|h| h.exit.is_none()) {
                kill_group(h.pid, Signal::KILL);
            }
        }
    }

    // Belt and braces: every group is gone already, unless the loop ended by disconnection.
    for h in &hosts {
        kill_group(h.pid, Signal::KILL);
    }
    let (status, secondary_status, failure_reason) =
        ending.unwrap_or((Status::Completed, "Completed".to_owned(), None));
    let exits = hosts
        .into_iter()
        .map(|h| {
            h.exit.unwrap_or(Exit {
                pid: h.pid,
                exit_code: None,
                signal: None,
                duration: h.started.elapsed(),
            })
        })
        .collect();
    Ok(Outcome {
        status,
        secondary_status,
        failure_reason,
        start,
        end: SystemTime::now(),
        exits,
    })
}

fn spawn(i: usize, command: &HostCommand, tx: &Sender<Event>) -> Result<u32, LocalError> {
    let spawn_error = |source| LocalError::Spawn {
        host: command.host.name.clone(),
        program: command.program.clone(),
        source,
    };
    let log_path = command.log_file();
    let log = File::create(&log_path).map_err(|source| LocalError::Write {
        path: log_path.clone(),
        source,
    })?;
    let log = Arc::new(Mutex::new(log));

    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .env_clear()
        .envs(&command.env)
        .current_dir(&command.base_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: signals reach the host and everything it started, and the terminal's
        // Ctrl-C reaches only hetgen, which stops the hosts in order.
        .process_group(0);
    #[cfg(target_os = "linux")]
    {
        let cpus = command.cpus.as_deref().map(crate::cpus::cpu_set);
        let hosts = command.hosts_binding.clone();
        // SAFETY: between fork and exec the closure makes only system calls.
        unsafe {
            cmd.pre_exec(move || {
                // If hetgen itself is killed outright, the host's leader dies with it.
                hetgen_env::process::die_with_parent()?;
                if let Some(hosts) = &hosts {
                    hosts.apply()?;
                }
                match &cpus {
                    Some(set) => crate::cpus::pin(set),
                    None => Ok(()),
                }
            });
        }
    }
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    pump(i, Stream::Stdout, stdout, log.clone(), tx.clone());
    pump(i, Stream::Stderr, stderr, log, tx.clone());
    let tx = tx.clone();
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(Event::Exited(i, status, Instant::now()));
    });
    Ok(pid)
}

/// Copies one stream line by line into the host's log and to the supervisor.
fn pump(
    i: usize,
    stream: Stream,
    from: impl Read + Send + 'static,
    log: Arc<Mutex<File>>,
    tx: Sender<Event>,
) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut buf = Vec::new();
        // A failed read ends the stream like EOF: the host closed it or died.
        while reader.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            if !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                // A full disk loses log lines, not the run: the terminal still shows them.
                let _ = log.write_all(&buf);
            }
            let line = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
            if tx.send(Event::Line(i, stream, line)).is_err() {
                return;
            }
            buf.clear();
        }
        let _ = tx.send(Event::Eof);
    });
}

fn to_exit(pid: u32, status: std::io::Result<ExitStatus>, duration: Duration) -> Exit {
    match status {
        Ok(status) => Exit {
            pid,
            exit_code: status.code(),
            signal: status.signal(),
            duration,
        },
        Err(_) => Exit {
            pid,
            exit_code: None,
            signal: None,
            duration,
        },
    }
}

/// SIGTERM to every host still running, as StopTrainingJob sends.
fn terminate(hosts: &[Running]) {
    for h in hosts.iter().filter(|h| h.exit.is_none()) {
        kill_group(h.pid, Signal::TERM);
    }
}

/// Signals the process group led by `pid`. A group that is gone already is not an error.
fn kill_group(pid: u32, signal: Signal) {
    let _ = hetgen_env::process::signal_group(pid, signal);
}

/// SageMaker's form: `AlgorithmError: <the failure file>`, with where it happened.
fn failure_reason(command: &HostCommand, exit: &Exit) -> String {
    let host = &command.host;
    let file = read_failure(&command.base_dir.join("output/failure"));
    let reason = match file {
        Some(text) => format!(
            "AlgorithmError: {text} ({} in {}, {})",
            host.name,
            host.group,
            exit.describe()
        ),
        None => format!(
            "AlgorithmError: {} in {} ended with {}",
            host.name,
            host.group,
            exit.describe()
        ),
    };
    truncate(reason, MAX_REASON)
}

fn read_failure(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}
