//! One Python worker process and the conversation with it (the messages are
//! [`super::protocol`]'s): started, handed its setup, asked for batches and probes (each step
//! of one within the deadline it is given, as its progress slot shows), and killed when
//! dropped.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::protocol::{Built, ErrorKind, MadeBatch, Reply, Request, Setup};
use super::segments::Ring;
use super::stack;
use crate::tensor::Tensor;

/// Largest message a worker may send (its batch's description, or a traceback).
const MAX_MESSAGE: usize = 64 << 20;

/// The signal on which a worker writes every thread's Python stack to its stack file
/// (`faulthandler`) and then ends by it.
const STACK_SIGNAL: i32 = libc::SIGUSR1;

/// How long a worker signalled for its stack has to write it and end before it is killed.
const STACK_GRACE: Duration = Duration::from_secs(2);

/// Why a start given up on by its caller failed.
const STOPPED: &str = "stopped while it built the dataset";

/// How often a worker that is starting is checked on (and the caller's `waiting` asked).
const TICK: Duration = Duration::from_millis(100);

/// What a worker made of a batch request.
pub(super) struct Made {
    pub(super) data: Bytes,
    pub(super) tensors: Vec<Tensor>,
    pub(super) structure: String,
}

/// What a worker was doing, from its progress slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Doing {
    /// Nothing it said yet: it had not taken the request.
    Nothing,
    /// The sample's `__getitem__`.
    Sample(u64),
    /// Collating the batch (the default collate or the spec's) and writing it.
    Collate,
}

/// Why a request did not give a batch.
pub(super) enum Failed {
    /// The user's code (or its samples) failed where `kind` says; `sample` the id when one is
    /// to blame.
    User {
        kind: ErrorKind,
        message: String,
        sample: Option<u64>,
    },
    /// The process is gone (killed, crashed), or broke the protocol, while `doing` that.
    Died { how: String, doing: Doing },
    /// It was still `doing` that at the deadline, at `stack`; it is gone now.
    Stuck { doing: Doing, stack: String },
}

/// A worker that is running and has built the dataset.
pub(super) struct Process {
    child: Child,
    conn: UnixStream,
    dir: PathBuf,
    next_file: u64,
    name: String,
    /// The job's seed, from which each sample's is computed.
    seed: u64,
    /// Where the worker writes its stack on [`STACK_SIGNAL`].
    stack_file: PathBuf,
    /// Its progress slot (`worker.py` describes it), mapped.
    progress: Slot,
    /// The shared memory it writes batches into.
    ring: Ring,
}

/// A worker's progress slot: 16 bytes of a shared-memory file that the worker writes before
/// each step of a request (a sample, the collate) and this process reads.
struct Slot {
    map: memmap2::Mmap,
    path: PathBuf,
}

/// The step value of a worker collating (and writing) a batch.
const COLLATING: u64 = u64::MAX;

impl Slot {
    /// A new zeroed slot at `path`, mapped.
    fn create(path: PathBuf) -> io::Result<Slot> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.set_len(16)?;
        // SAFETY: a file of this pool's own folder, which only its worker writes (two aligned
        // words, read volatile below); it is never truncated while mapped.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Slot { map, path })
    }

    /// The worker's step count, and its step.
    fn read(&self) -> (u64, Doing) {
        let words = self.map.as_ptr().cast::<u64>();
        // SAFETY: the map is 16 bytes and page-aligned; the worker stores the words with plain
        // writes, so a read races one only while the worker is making progress, when only the
        // change of the count matters (a stuck or dead worker writes nothing).
        let (steps, step) = unsafe {
            (
                u64::from_le(std::ptr::read_volatile(words)),
                u64::from_le(std::ptr::read_volatile(words.add(1))),
            )
        };
        let doing = match step {
            0 => Doing::Nothing,
            COLLATING => Doing::Collate,
            sample => Doing::Sample(sample - 1),
        };
        (steps, doing)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Process {
    /// Starts the worker `name` with `command`, sends it `setup` and waits until its dataset is
    /// built: `Ok((process, what it built))`, or the traceback of why it could not be. `waiting` is
    /// told how long it has waited, every [`TICK`]; when it says `false`, the worker is stopped
    /// and the start fails.
    pub(super) fn start(
        mut command: Command,
        dir: &Path,
        name: &str,
        setup: &Setup,
        waiting: &mut dyn FnMut(Duration) -> bool,
    ) -> Result<(Process, Built), String> {
        let begun = Instant::now();
        let socket = dir.join(format!("{name}.sock"));
        let stack_file = dir.join(format!("{name}.stack"));
        let progress = Slot::create(dir.join(format!("{name}.progress"))).map_err(|e| {
            format!(
                "cannot make the worker's progress file in {}: {e}",
                dir.display()
            )
        })?;
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
        let mut child = command
            .env("HETGEN_WORKER_SOCKET", &socket)
            .env("HETGEN_WORKER_STACK", &stack_file)
            .env("HETGEN_WORKER_STACK_SIGNAL", STACK_SIGNAL.to_string())
            .env("HETGEN_WORKER_PROGRESS", &progress.path)
            .env("HETGEN_WORKER_PARENT", std::process::id().to_string())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        let conn =
            accept(&listener, &mut child, &mut || waiting(begun.elapsed())).inspect_err(|_| {
                let _ = child.kill();
                let _ = child.wait();
            })?;
        let _ = std::fs::remove_file(&socket);
        conn.set_nonblocking(false)
            .map_err(|e| format!("the worker's socket: {e}"))?;
        let mut process = Process {
            child,
            conn,
            dir: dir.to_owned(),
            next_file: 0,
            name: name.to_owned(),
            seed: setup.seed,
            stack_file,
            progress,
            ring: Ring::new(),
        };
        let sent = process.send(&Request::Setup(setup));
        // Building the dataset may take minutes (downloads, indexes): the caller hears of it.
        while sent.is_ok() && !process.readable(TICK).unwrap_or(true) {
            if !waiting(begun.elapsed()) {
                return Err(STOPPED.to_owned());
            }
        }
        match sent.and_then(|()| process.receive()) {
            Ok(Reply::Ready(built)) => Ok((process, built)),
            Ok(Reply::Error(error)) => Err(error.message),
            Ok(reply) => Err(format!(
                "the Python worker answered its setup with {reply:?}"
            )),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(format!(
                "the Python worker broke the protocol building the dataset: {e}"
            )),
            Err(_) => Err(format!(
                "the Python worker died while building the dataset ({})",
                process.exit_status()
            )),
        }
    }

    /// The operating system's id of the process.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A handle on the worker's socket: shutting it down ends the conversation, which stops
    /// the worker (its owner sees the socket closed and kills it).
    pub(super) fn handle(&self) -> io::Result<UnixStream> {
        self.conn.try_clone()
    }

    /// Sample `ids` of `epoch`, made and collated by the worker; each sample, and the collate,
    /// within `deadline`.
    pub(super) fn batch(
        &mut self,
        epoch: u32,
        ids: &[u64],
        deadline: Duration,
    ) -> Result<Made, Failed> {
        self.next_file += 1;
        let file = format!("{}-{}", self.name, self.next_file);
        let segment = self.ring.lend();
        let request = Request::batch(self.seed, epoch, ids, &file, segment);
        let reply = self
            .ask(&request, deadline)
            .inspect_err(|_| self.ring.give_back(None))?;
        let Reply::Made(made) = reply else {
            self.ring.give_back(None);
            return Err(self.broke(
                format!("it answered a batch with {reply:?}"),
                Doing::Collate,
            ));
        };
        self.collect(&file, made).map_err(|how| Failed::Died {
            how,
            doing: Doing::Collate,
        })
    }

    /// The next `count` samples of `shard` of `epoch` from position `from`, read and collated
    /// by the worker (each sample, and the collate, within `deadline`): the batch (none when
    /// the shard had no sample left), how many samples it holds, and whether the shard ended.
    pub(super) fn next(
        &mut self,
        epoch: u32,
        (shard, from, count): (u32, u32, u32),
        deadline: Duration,
    ) -> Result<(Option<Made>, u32, bool), Failed> {
        self.next_file += 1;
        let file = format!("{}-{}", self.name, self.next_file);
        let segment = self.ring.lend();
        let request = Request::next(self.seed, epoch, (shard, from, count), &file, segment);
        let reply = self
            .ask(&request, deadline)
            .inspect_err(|_| self.ring.give_back(None))?;
        let streamed = match reply {
            Reply::Streamed(s) if s.samples <= count && s.made.is_some() == (s.samples > 0) => s,
            reply => {
                self.ring.give_back(None);
                return Err(self.broke(
                    format!("it answered a shard's next samples with {reply:?}"),
                    Doing::Collate,
                ));
            }
        };
        let Some(made) = streamed.made else {
            self.ring.give_back(None);
            return Ok((None, 0, streamed.end));
        };
        let made = self.collect(&file, made).map_err(|how| Failed::Died {
            how,
            doing: Doing::Collate,
        })?;
        Ok((Some(made), streamed.samples, streamed.end))
    }

    /// Samples `ids` of `epoch` made one after another and dropped, not collated: whether one
    /// of them alone kills the worker (then [`Failed::Died`] says which).
    pub(super) fn probe(
        &mut self,
        epoch: u32,
        ids: &[u64],
        deadline: Duration,
    ) -> Result<(), Failed> {
        match self.ask(&Request::probe(self.seed, epoch, ids), deadline)? {
            Reply::Probed(n) if n == ids.len() as u64 => Ok(()),
            reply => Err(self.broke(
                format!("it answered a probe with {reply:?}"),
                Doing::Nothing,
            )),
        }
    }

    /// Sends `request` and waits for the answer, following the worker's progress: each step
    /// (a sample, the collate) must come within `deadline`, else the worker's stack is taken
    /// and it is killed. Its slot is looked at every tenth of the deadline (at most a second),
    /// so a step is found stuck between `deadline` and that much more after it began.
    fn ask(&mut self, request: &Request, deadline: Duration) -> Result<Reply, Failed> {
        let every = (deadline / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let (asked_at, _) = self.progress.read();
        // What it is doing for this request: nothing yet while its count is the one it had.
        let doing = |process: &Process| match process.progress.read() {
            (steps, _) if steps == asked_at => Doing::Nothing,
            (_, doing) => doing,
        };
        if self.send(request).is_err() {
            return Err(self.died(doing(self)));
        }
        let (mut seen, mut since) = (asked_at, Instant::now());
        loop {
            match self.readable(every) {
                Ok(true) => break,
                Ok(false) => {
                    let (steps, _) = self.progress.read();
                    if steps != seen {
                        (seen, since) = (steps, Instant::now());
                    } else if since.elapsed() >= deadline {
                        let doing = doing(self);
                        let stack = self.stack();
                        return Err(Failed::Stuck { doing, stack });
                    }
                }
                Err(_) => return Err(self.died(doing(self))),
            }
        }
        match self.receive() {
            Ok(Reply::Error(error)) => Err(Failed::User {
                kind: error.kind,
                message: error.message,
                sample: error.sample,
            }),
            Ok(reply) => Ok(reply),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                let doing = doing(self);
                Err(self.broke(e.to_string(), doing))
            }
            Err(_) => Err(self.died(doing(self))),
        }
    }

    /// The worker said something the protocol does not: it is stopped, as if it had died.
    fn broke(&mut self, what: String, doing: Doing) -> Failed {
        let _ = self.child.kill();
        Failed::Died {
            how: format!(
                "it broke the worker protocol: {what}; {}",
                self.exit_status()
            ),
            doing,
        }
    }

    fn died(&mut self, doing: Doing) -> Failed {
        Failed::Died {
            how: self.exit_status(),
            doing,
        }
    }

    /// The stack of a worker that outlasted its deadline, from its user's frames; the worker
    /// is gone after.
    fn stack(&mut self) -> String {
        // SAFETY: a plain system call; the id is this process's child, not yet waited for, so
        // it names no other process.
        unsafe { libc::kill(self.child.id() as libc::pid_t, STACK_SIGNAL) };
        let begun = Instant::now();
        while begun.elapsed() < STACK_GRACE && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dump = std::fs::read_to_string(&self.stack_file).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stack_file);
        stack::user_frames(&dump, &self.dir.join(super::WORKER_FILE))
    }

    /// Whether a message (or the end of the connection) is there to read within `timeout`.
    fn readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut fd = libc::pollfd {
            fd: self.conn.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        loop {
            // SAFETY: one valid pollfd, for the duration of the call.
            let n = unsafe { libc::poll(&mut fd, 1, ms) };
            if n >= 0 {
                return Ok(n > 0);
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// The batch the worker wrote, where it says it put it (a segment of its ring, or the
    /// one-off `file`), as the bytes handed on from here to the socket.
    fn collect(&mut self, file: &str, made: MadeBatch) -> Result<Made, String> {
        let MadeBatch {
            placed,
            bytes,
            tensors,
            structure,
        } = made;
        let data = self.ring.take(placed, &self.dir, file, bytes as usize)?;
        Tensor::check_all(&tensors, data.len())?;
        Ok(Made {
            data,
            tensors,
            structure,
        })
    }

    fn send(&mut self, message: &Request) -> io::Result<()> {
        let body = serde_json::to_vec(message)?;
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.conn.write_all(&frame)
    }

    /// The next reply; one that is not a [`Reply`] is `InvalidData`.
    fn receive(&mut self) -> io::Result<Reply> {
        let mut head = [0u8; 4];
        self.conn.read_exact(&mut head)?;
        let len = u32::from_le_bytes(head) as usize;
        if len > MAX_MESSAGE {
            return Err(io::Error::other(format!("a {len}-byte message")));
        }
        let mut body = vec![0u8; len];
        self.conn.read_exact(&mut body)?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// How the process ended (it is killed first if it has not).
    fn exit_status(&mut self) -> String {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
        // A worker whose socket broke but that still runs is stuck: it goes.
        let status = match self.child.try_wait() {
            Ok(Some(status)) => Ok(status),
            _ => {
                std::thread::sleep(Duration::from_millis(50));
                match self.child.try_wait() {
                    Ok(Some(status)) => Ok(status),
                    _ => {
                        let _ = self.child.kill();
                        self.child.wait()
                    }
                }
            }
        };
        match status {
            Ok(status) => describe(status),
            Err(e) => format!("its status is unknown: {e}"),
        }
    }
}

/// The connection of the worker `child` once its interpreter is up; it may instead exit (no
/// numpy, a broken interpreter), which is then the reason, or be given up on (`waiting` says
/// `false`).
fn accept(
    listener: &UnixListener,
    child: &mut Child,
    waiting: &mut dyn FnMut() -> bool,
) -> Result<UnixStream, String> {
    loop {
        match listener.accept() {
            Ok((conn, _)) => return Ok(conn),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "the Python worker exited ({}) before it started; its output is above",
                        describe(status)
                    ));
                }
                if !waiting() {
                    return Err(STOPPED.to_owned());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(format!("cannot accept the Python worker: {e}")),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stack_file);
    }
}

/// `exit status 3`, or `killed by signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
        _ => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL: the OOM killer, or a kill -9",
        libc::SIGSEGV => "SIGSEGV: a crash in native code",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS: out of shared memory?",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "a signal",
    }
}
