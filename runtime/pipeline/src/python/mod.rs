//! A user's Python dataset as a source of batches: one worker process per pipeline thread.
//!
//! Each worker (`worker.py`, embedded here and written beside the shared memory it uses) has
//! its own interpreter, imports the user's file from the job's code folder, and builds the
//! dataset once. A shard's batches are handed out to the workers as sample-id lists, a few
//! batches ahead of the one being emitted, so every worker stays busy while batches still come
//! out in order. A worker writes a collated batch into a file of a shared-memory folder; this
//! process maps it and the mapping *is* the batch's bytes, sent from there without a copy.
//!
//! Faults (`make.rs`): the user's code raising is an error naming the sample (and the
//! traceback), which no retry would fix; so is a sample whose `__getitem__` outlasts the
//! per-sample deadline ([`SAMPLE_TIMEOUT_VAR`]), with the stack where it was stuck. A worker
//! process that dies (a crash in native code, the OOM killer) is replaced; the sample it died on
//! (else each of the batch's) is made again alone, to tell a sample that kills any worker, which
//! fails naming it, from a death that does not come again, after which the batch is made again;
//! at most [`MAX_DEATHS`] deaths for one batch.

mod make;
mod process;
mod protocol;
mod segments;
mod slot;
mod stack;
mod stream;
pub mod usage;

use std::collections::{BTreeMap, VecDeque};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hetgen_spec::model::{Pipeline, PythonRef};

use crate::engine::{BACKGROUND_NICE, lower_priority};
use crate::{Batch, Batches, Contents, PipelineError, ShardWork, StreamWork};
use make::serve;
use process::{Failed, Made, Process};
use protocol::{Built, Setup};
pub use segments::SEGMENTS;
use slot::user_error;

/// The worker's source, written into the shared-memory folder and run by the job's Python.
const WORKER_PY: &str = include_str!("worker.py");
/// Its name there.
const WORKER_FILE: &str = "worker.py";

/// Times one batch may kill its worker before the host gives up: the batch (a sample of it)
/// crashes whatever process makes it.
pub const MAX_DEATHS: u32 = 3;

/// Sets the seconds one sample's `__getitem__` (and a batch's collate) may take on a worker
/// before it is stopped and the batch fails naming the sample, with the stack where it was.
pub const SAMPLE_TIMEOUT_VAR: &str = "HETGEN_SAMPLE_TIMEOUT_S";

/// The per-sample deadline by default. A trainer gives up on a data server that sends no batch
/// for 60 s (its stall timeout), and a server sends nothing on a stream while a batch is being
/// made, so a deadline past 60 s would never be seen: the trainer would blame the server
/// instead. 45 s leaves the rest of the batch's samples and the error's way back 15 s inside
/// that, and is still thousands of times what a sample of a dataset that trains takes (a batch
/// of 32 such samples would take 24 minutes).
pub const DEFAULT_SAMPLE_TIMEOUT: Duration = Duration::from_secs(45);

/// The most [`SAMPLE_TIMEOUT_VAR`] may say: a week.
const MAX_SAMPLE_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;

/// How often a dataset still being built is logged.
const BUILD_LOG_EVERY: Duration = Duration::from_secs(10);

/// Where and how a host runs Python: the interpreter, the job's code folder (where the
/// dataset's file is), and the hyperparameters the dataset's factory gets.
#[derive(Debug, Clone)]
pub struct PythonSetup {
    /// The interpreter (`python3` on `PATH` unless the launcher knows better).
    pub python: PathBuf,
    /// The folder the spec's `dataset = "file.py:…"` is relative to.
    pub code_dir: PathBuf,
    /// The job's hyperparameters as SageMaker delivers them (strings; JSON ones are decoded
    /// for the factory).
    pub hyperparameters: BTreeMap<String, String>,
}

/// A request queued for the workers: a batch of samples by id, which any worker makes, or a
/// shard of a dataset of shards, which one worker reads to its end.
enum Job {
    Batch(BatchJob),
    Stream(stream::StreamJob),
}

/// A batch of a map-style dataset, by sample id.
struct BatchJob {
    epoch: u32,
    ids: Vec<u64>,
    cancelled: Arc<AtomicBool>,
    reply: SyncSender<Result<Made, PipelineError>>,
}

/// What the worker threads share.
struct Pool {
    command: Box<dyn Fn() -> Command + Send + Sync>,
    setup: Setup,
    /// `file.py:factory`, for errors.
    dataset: String,
    /// Where the workers write batches (and their sockets are); removed first thing when the
    /// workers stop, and with the pool.
    folder: tempfile::TempDir,
    busy: AtomicUsize,
    /// The pool is being dropped: what fails now is its own doing, not the dataset's.
    closing: AtomicBool,
    background: AtomicBool,
    /// Each thread's live worker, by slot.
    live: Mutex<Vec<Option<Live>>>,
    /// What the dataset is: its length, or its number of shards.
    built: Built,
    /// The per-sample deadline, in milliseconds.
    sample_timeout_ms: AtomicU64,
}

/// A live worker as the pool sees it from outside its thread: its process id (for `usage` and
/// priorities) and its socket, which the pool shuts down to stop it. The thread that owns the
/// process kills and reaps it, and forgets it here first, so no id here names another process.
struct Live {
    pid: u32,
    conn: UnixStream,
}

/// The user's dataset, made by Python worker processes.
pub struct Workers {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    pool: Arc<Pool>,
    sample_bytes: usize,
}

/// A new folder of its own for batch files, in `/dev/shm` when the host has it (memory, not
/// disk), else in the temporary folder; removed when dropped. Its name is random, not the
/// process id: processes in PID namespaces of their own (hosts of a local run, containers
/// sharing a host's `/dev/shm`) can have the same id.
fn shared_memory_dir() -> Result<tempfile::TempDir, PipelineError> {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_owned()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("hetgen-")
        .tempdir_in(&base)
        .map_err(|source| PipelineError::Io { path: base, source })
}

impl Workers {
    /// Starts `threads` workers (default: the cores this process may use), each building the
    /// dataset `dataset(path, hyperparameters)`; returns once all are ready, or with the first
    /// one's traceback when the dataset cannot be built.
    pub fn start(
        setup: &PythonSetup,
        dataset: &PythonRef,
        collate: Option<&PythonRef>,
        path: &Path,
        seed: u64,
        threads: Option<usize>,
    ) -> Result<Workers, PipelineError> {
        let threads = threads.unwrap_or_else(crate::available_cores).max(1);
        let sample_timeout = sample_timeout_from_env()?;
        let folder = shared_memory_dir()?;
        let dir = folder.path().to_owned();
        let script = dir.join(WORKER_FILE);
        std::fs::write(&script, WORKER_PY).map_err(|source| PipelineError::Io {
            path: script.clone(),
            source,
        })?;
        let python = setup.python.clone();
        let code_dir = setup.code_dir.clone();
        let command = move || {
            let mut command = Command::new(&python);
            command
                .arg(&script)
                .current_dir(&code_dir)
                .env("PYTHONUNBUFFERED", "1")
                .stdin(std::process::Stdio::null());
            command
        };
        let wire_setup = Setup {
            code_dir: setup.code_dir.clone(),
            dataset: dataset.clone(),
            collate: collate.cloned(),
            path: path.to_owned(),
            hyperparameters: setup.hyperparameters.clone(),
            shm_dir: dir.clone(),
            dtypes: Setup::dtypes(),
            seed,
        };
        let failed = |message: String| PipelineError::PythonSetup {
            dataset: dataset.to_string(),
            message,
        };
        let mut processes = start_all(&command, &dir, &wire_setup, threads, &dataset.to_string())
            .map_err(failed)?;
        let (built, sample_bytes) = first_sample(&mut processes, sample_timeout, &failed)?;

        let live = processes
            .iter()
            .map(|(p, _)| Some(Live::of(p)).transpose())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| PipelineError::Pool(format!("a worker's socket: {e}")))?;
        let pool = Arc::new(Pool {
            command: Box::new(command),
            setup: wire_setup,
            dataset: dataset.to_string(),
            folder,
            busy: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            background: AtomicBool::new(false),
            live: Mutex::new(live),
            built,
            sample_timeout_ms: AtomicU64::new(sample_timeout.as_millis() as u64),
        });
        let (tx, threads) = serve_all(&pool, processes)?;
        tracing::info!(
            workers = threads.len(),
            dataset_is = ?built,
            sample_bytes,
            dataset = %dataset,
            "Python dataset ready"
        );
        Ok(Workers {
            jobs: Some(tx),
            threads,
            pool,
            sample_bytes,
        })
    }

    /// CPU time and memory of the worker processes alive now (`hetgen profile`'s measure).
    pub fn usage(&self) -> usage::Usage {
        usage::of(&self.pool.pids())
    }

    /// The operating system's ids of the worker processes alive now.
    pub fn pids(&self) -> Vec<u32> {
        self.pool.pids()
    }

    /// Sets the per-sample deadline from now on (it is [`SAMPLE_TIMEOUT_VAR`] at the start,
    /// else [`DEFAULT_SAMPLE_TIMEOUT`]).
    pub fn set_sample_timeout(&self, timeout: Duration) {
        self.pool
            .sample_timeout_ms
            .store(timeout.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    fn submit(
        &self,
        epoch: u32,
        ids: &[u64],
        cancelled: &Arc<AtomicBool>,
    ) -> Receiver<Result<Made, PipelineError>> {
        let (reply, rx) = sync_channel(1);
        self.queue(Job::Batch(BatchJob {
            epoch,
            ids: ids.to_vec(),
            cancelled: cancelled.clone(),
            reply,
        }));
        rx
    }

    fn queue(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            // A closed queue drops the job's reply channel, which its caller sees as the pool
            // stopping.
            let _ = jobs.send(job);
        }
    }
}

/// What the workers built (its length or its shards, which every worker must agree on), and
/// the bytes of one sample (for the memory budget and the message-size check of a batch): the
/// dataset's first, or the first of its first shard that has one, made by the first worker.
fn first_sample(
    processes: &mut [(Process, Built)],
    deadline: Duration,
    failed: &dyn Fn(String) -> PipelineError,
) -> Result<(Built, usize), PipelineError> {
    let built = processes[0].1;
    if let Some((_, other)) = processes.iter().find(|(_, b)| *b != built) {
        return Err(failed(format!(
            "two workers built different datasets ({built:?} and {other:?}): what the factory \
             returns must not depend on anything but the path and the hyperparameters"
        )));
    }
    let blame = |f: Failed, what: &str| match f {
        Failed::User {
            kind,
            message,
            sample,
        } => user_error(kind, message, sample),
        Failed::Died { how, .. } => failed(format!("the worker died making {what} ({how})")),
        Failed::Stuck { doing, stack } => slot::timeout(doing, deadline, stack),
    };
    let process = &mut processes[0].0;
    let made = match built {
        Built::Len(0) => return Err(failed("the dataset is empty (`len()` is 0)".into())),
        Built::Len(_) => process
            .batch(0, &[0], deadline)
            .map_err(|f| blame(f, "sample 0"))?,
        Built::Shards(shards) => (0..shards)
            .find_map(|shard| match process.next(0, (shard, 0, 1), deadline) {
                Ok((Some(made), _, _)) => Some(Ok(made)),
                Ok((None, _, _)) => None,
                Err(f) => Some(Err(blame(f, &format!("the first sample of shard {shard}")))),
            })
            .unwrap_or_else(|| Err(failed("every shard of the dataset is empty".into())))?,
    };
    Ok((built, made.data.len()))
}

fn serve_all(
    pool: &Arc<Pool>,
    processes: Vec<(Process, Built)>,
) -> Result<(Sender<Job>, Vec<JoinHandle<()>>), PipelineError> {
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let threads = processes
        .into_iter()
        .enumerate()
        .map(|(slot, (process, _))| {
            let (pool, rx) = (pool.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("hetgen-python-{slot}"))
                .spawn(move || serve(&pool, slot, Some(process), &rx))
                .map_err(|e| PipelineError::Pool(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((tx, threads))
}

/// [`SAMPLE_TIMEOUT_VAR`], else the default.
fn sample_timeout_from_env() -> Result<Duration, PipelineError> {
    let Ok(value) = std::env::var(SAMPLE_TIMEOUT_VAR) else {
        return Ok(DEFAULT_SAMPLE_TIMEOUT);
    };
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.001 && *s <= MAX_SAMPLE_TIMEOUT_S)
        .map(Duration::from_secs_f64)
        .ok_or(PipelineError::Setting {
            var: SAMPLE_TIMEOUT_VAR,
            value,
            expected: "a number of seconds from 0.001 to 604800 (a week)",
        })
}

/// Starts `threads` workers together (importing torch alone takes seconds), in slot order.
/// While they build the dataset, says so every [`BUILD_LOG_EVERY`]. Once one fails, the others
/// are stopped (each would fail the same way, maybe minutes later), and its reason is the
/// error.
fn start_all(
    command: &(dyn Fn() -> Command + Sync),
    dir: &Path,
    setup: &Setup,
    threads: usize,
    dataset: &str,
) -> Result<Vec<(Process, Built)>, String> {
    let failed = AtomicBool::new(false);
    let mut started: Vec<Option<(Process, Built)>> = (0..threads).map(|_| None).collect();
    let mut first_error = None;
    std::thread::scope(|scope| {
        let (done, finished) = channel();
        for slot in 0..threads {
            let (done, failed) = (done.clone(), &failed);
            scope.spawn(move || {
                let mut waiting = |_: Duration| !failed.load(Ordering::Relaxed);
                let result =
                    Process::start(command(), dir, &format!("w{slot}"), setup, &mut waiting);
                // Before the others hear of it: theirs are stopped, and not the reason.
                let _ = done.send((slot, result));
            });
        }
        drop(done);
        let begun = Instant::now();
        loop {
            match finished.recv_timeout(BUILD_LOG_EVERY) {
                Ok((slot, Ok(process))) => started[slot] = Some(process),
                Ok((_, Err(error))) => {
                    failed.store(true, Ordering::Relaxed);
                    first_error.get_or_insert(error);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let seconds = begun.elapsed().as_secs();
                    tracing::info!(
                        dataset,
                        seconds,
                        ready = started.iter().flatten().count(),
                        workers = threads,
                        "building the dataset `{dataset}`: {seconds} s"
                    );
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    });
    if let Some(error) = first_error {
        return Err(error);
    }
    started
        .into_iter()
        .map(|p| p.ok_or_else(|| "a worker's start panicked".to_owned()))
        .collect()
}

impl Live {
    fn of(process: &Process) -> std::io::Result<Live> {
        Ok(Live {
            pid: process.pid(),
            conn: process.handle()?,
        })
    }
}

impl Pool {
    fn sample_timeout(&self) -> Duration {
        Duration::from_millis(self.sample_timeout_ms.load(Ordering::Relaxed))
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// The ids of the live workers.
    fn pids(&self) -> Vec<u32> {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.iter().flatten().map(|l| l.pid).collect()
    }

    /// Slot `slot`'s new worker: nicer too when the pipeline runs in the background, and
    /// stopped with the others when the pool is dropped.
    fn adopt(&self, slot: usize, process: &Process) {
        if self.background.load(Ordering::Relaxed) {
            let _ = lower_priority(process.pid(), BACKGROUND_NICE);
        }
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        // Without a handle on its socket the pool could not stop it: then it is not started.
        live[slot] = Live::of(process).ok();
    }

    /// Slot `slot`'s worker is about to go (be killed and reaped).
    fn forget(&self, slot: usize) {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)[slot] = None;
    }
}

impl Batches for Workers {
    fn output_shape(&self) -> [u32; 3] {
        Pipeline::UNKNOWN_SHAPE
    }

    fn sample_bytes(&self) -> usize {
        self.sample_bytes
    }

    fn samples_per_epoch(&self) -> u64 {
        match self.pool.built {
            Built::Len(samples) => samples,
            Built::Shards(_) => 0,
        }
    }

    fn shards(&self) -> Option<u32> {
        match self.pool.built {
            Built::Len(_) => None,
            Built::Shards(shards) => Some(shards),
        }
    }

    fn threads(&self) -> usize {
        self.threads.len()
    }

    fn busy_threads(&self) -> usize {
        self.pool.busy.load(Ordering::Relaxed)
    }

    fn run_shard(
        &self,
        work: ShardWork<'_>,
        emit: &mut dyn FnMut(Batch) -> bool,
    ) -> Result<(), PipelineError> {
        let Built::Len(samples) = self.pool.built else {
            return Err(PipelineError::NotSamples);
        };
        if let Some(&bad) = work.ids.iter().find(|id| **id >= samples) {
            return Err(PipelineError::UnknownSample {
                sample: bad,
                samples,
            });
        }
        let chunks: Vec<&[u64]> = work.ids.chunks(work.batch_size.max(1) as usize).collect();
        // Enough batches ahead that every worker has one while this shard's next is awaited.
        let ahead = self.threads.len() + 1;
        let cancelled = Arc::new(AtomicBool::new(false));
        let mut pending: VecDeque<_> = chunks
            .iter()
            .take(ahead)
            .map(|ids| self.submit(work.epoch, ids, &cancelled))
            .collect();
        let result = (|| {
            for (index, ids) in chunks.iter().enumerate() {
                let next = pending.pop_front().expect("one request per batch");
                if let Some(later) = chunks.get(index + ahead) {
                    pending.push_back(self.submit(work.epoch, later, &cancelled));
                }
                let made = next.recv().unwrap_or_else(|_| {
                    Err(PipelineError::Pool("the Python workers stopped".into()))
                })?;
                let batch = Batch {
                    epoch: work.epoch,
                    shard: work.shard,
                    index: index as u32,
                    sample_ids: ids.to_vec(),
                    data: made.data,
                    contents: Contents::Tensors {
                        tensors: made.tensors,
                        structure: made.structure,
                    },
                };
                if !emit(batch) {
                    break;
                }
            }
            Ok(())
        })();
        // Requests still queued are skipped; batches being made are dropped when they arrive.
        cancelled.store(true, Ordering::Relaxed);
        result
    }

    fn run_stream(
        &self,
        work: StreamWork,
        emit: &mut dyn FnMut(Batch, bool) -> bool,
    ) -> Result<(), PipelineError> {
        self.stream(work, emit)
    }

    fn run_in_background(&self) -> std::io::Result<()> {
        self.pool.background.store(true, Ordering::Relaxed);
        let live = self
            .pool
            .live
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        live.iter()
            .flatten()
            .try_for_each(|l| lower_priority(l.pid, BACKGROUND_NICE))
    }
}

impl Drop for Workers {
    /// Stops the workers: an idle thread ends with the queue; a busy one sees its worker's
    /// socket shut down, and kills and reaps its process; one starting a worker stops it.
    /// Nothing of this is logged as a worker's death.
    fn drop(&mut self) {
        self.pool.closing.store(true, Ordering::SeqCst);
        // The folder goes first: a process killed while it stops its workers (a data server
        // killed as its job ends) would leave it behind with them dead, while until now a live
        // worker removes it when this process ends. Batches handed out are unlinked already.
        let _ = std::fs::remove_dir_all(self.pool.folder.path());
        self.jobs = None;
        {
            let live = self
                .pool
                .live
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for worker in live.iter().flatten() {
                let _ = worker.conn.shutdown(std::net::Shutdown::Both);
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
