//! One host's process: started in a process group of its own, its output copied line by line
//! into its log and to the supervisor, and its failure reason when it fails.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hetgen_env::process::Signal;

use super::{Exit, HostCommand, Stream};
use crate::LocalError;

/// SageMaker's limit on `FailureReason`.
const MAX_REASON: usize = 1024;

/// What a host's threads tell the supervisor.
pub(super) enum Event {
    /// A line of host `i`'s output, without its newline, and where it was in its stream.
    Line(usize, Stream, String, LineAt),
    /// One of a host's two streams ended.
    Eof,
    /// Host `i`'s process exited, at that moment.
    Exited(usize, std::io::Result<ExitStatus>, Instant),
    /// Every address host `i` waits for answered SERVING: it may start.
    Ready(usize),
}

/// When a line was read, and where it ended in its stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct LineAt {
    pub read_at: Instant,
    /// The bytes of the stream up to the line's end.
    pub end: u64,
}

/// How much of one of a host's output streams has been written: what the pump has read from
/// the pipe and what waits in it. Taken before a signal is sent, it tells the lines the host
/// wrote before the signal (those ending at or before it) from those it may have written
/// because of it, whenever the pump gets to read them.
pub(super) struct Tap {
    /// The pipe's read end (a duplicate of the pump's).
    pipe: OwnedFd,
    /// Bytes the pump has read from it.
    read: Arc<AtomicU64>,
}

impl Tap {
    /// Bytes written to the stream so far, at least: the pipe's unread bytes are counted first,
    /// so bytes the pump reads meanwhile are counted once (or, written meanwhile, also).
    pub fn written(&self) -> u64 {
        let waiting = rustix::io::ioctl_fionread(&self.pipe).unwrap_or(0);
        waiting + self.read.load(Ordering::SeqCst)
    }
}

/// Starts host `i`: its process id and the taps on its stdout and stderr.
pub(super) fn spawn(
    i: usize,
    command: &HostCommand,
    tx: &Sender<Event>,
) -> Result<(u32, [Tap; 2]), LocalError> {
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
    let tap = |pipe: &dyn AsFd| {
        pipe.as_fd()
            .try_clone_to_owned()
            .map(|pipe| Tap {
                pipe,
                read: Arc::default(),
            })
            .map_err(spawn_error)
    };
    let taps = [tap(&stdout)?, tap(&stderr)?];
    pump(i, Stream::Stdout, stdout, &taps[0], log.clone(), tx.clone());
    pump(i, Stream::Stderr, stderr, &taps[1], log, tx.clone());
    let tx = tx.clone();
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(Event::Exited(i, status, Instant::now()));
    });
    Ok((pid, taps))
}

/// A stream whose reads are counted.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

/// Copies one stream line by line into the host's log and to the supervisor, counting what it
/// reads from the pipe on `tap`.
fn pump(
    i: usize,
    stream: Stream,
    from: impl Read + Send + 'static,
    tap: &Tap,
    log: Arc<Mutex<File>>,
    tx: Sender<Event>,
) {
    let read = tap.read.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(Counted { inner: from, read });
        let mut buf = Vec::new();
        let mut end = 0u64;
        // A failed read ends the stream like EOF: the host closed it or died.
        while reader.read_until(b'\n', &mut buf).unwrap_or(0) > 0 {
            end += buf.len() as u64;
            let at = LineAt {
                read_at: Instant::now(),
                end,
            };
            if !buf.ends_with(b"\n") {
                buf.push(b'\n');
            }
            {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                // A full disk loses log lines, not the run: the terminal still shows them.
                let _ = log.write_all(&buf);
            }
            let line = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
            if tx.send(Event::Line(i, stream, line, at)).is_err() {
                return;
            }
            buf.clear();
        }
        let _ = tx.send(Event::Eof);
    });
}

pub(super) fn to_exit(pid: u32, status: std::io::Result<ExitStatus>, duration: Duration) -> Exit {
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

/// Signals the process group led by `pid`. A group that is gone already is not an error.
///
/// SIGKILL also goes to the groups of the leader's children: a host on AWS's image starts the
/// image's script in a session of its own (so that a stop's SIGTERM reaches it through the
/// container's first process alone), which a contained host's PID namespace ends with it but
/// an uncontained host's group does not hold.
pub(super) fn kill_group(pid: u32, signal: Signal) {
    if signal == Signal::KILL {
        for child in children(pid) {
            let _ = hetgen_env::process::signal_group(child, signal);
        }
    }
    let _ = hetgen_env::process::signal_group(pid, signal);
}

/// The processes whose parent is `pid`, from `/proc`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            // `pid (comm) state ppid …`; the name may hold spaces and parentheses.
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// SageMaker's form: `AlgorithmError: <the failure file>`, with where it happened.
pub(super) fn failure_reason(command: &HostCommand, exit: &Exit) -> String {
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
