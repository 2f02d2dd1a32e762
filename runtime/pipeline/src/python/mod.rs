//! A user's Python dataset as a source of batches: one worker process per pipeline thread.
//!
//! Each worker (`worker.py`, embedded here and written beside the shared memory it uses) has
//! its own interpreter, imports the user's file from the job's code folder, and builds the
//! dataset once. A shard's batches are handed out to the workers as sample-id lists, a few
//! batches ahead of the one being emitted, so every worker stays busy while batches still come
//! out in order. A worker writes a collated batch into a file of a shared-memory folder; this
//! process maps it and the mapping *is* the batch's bytes, sent from there without a copy.
//!
//! Faults: the user's code raising is an error naming the sample (and the traceback), which
//! no retry would fix; a worker process that dies (a crash in native code, the OOM killer) is
//! replaced and its batch made again, up to [`MAX_DEATHS`] times for one batch.

mod process;
pub mod usage;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use hetgen_spec::model::{Pipeline, PythonRef};
use serde_json::{Value, json};

use crate::engine::{BACKGROUND_NICE, lower_priority};
use crate::{Batch, Batches, PipelineError, ShardWork};
use process::{Failed, Made, Process};

/// The worker's source, written into the shared-memory folder and run by the job's Python.
const WORKER_PY: &str = include_str!("worker.py");

/// Times one batch may kill its worker before the host gives up: the batch (a sample of it)
/// crashes whatever process makes it.
pub const MAX_DEATHS: u32 = 3;

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

/// A batch request queued for the workers.
struct Job {
    epoch: u32,
    ids: Vec<u64>,
    cancelled: Arc<AtomicBool>,
    reply: SyncSender<Result<Made, PipelineError>>,
}

/// What the worker threads share.
struct Pool {
    command: Box<dyn Fn() -> Command + Send + Sync>,
    setup: Value,
    /// `file.py:factory`, for errors.
    dataset: String,
    /// Where the workers write batches (and their sockets are); removed with the pool.
    folder: tempfile::TempDir,
    busy: AtomicUsize,
    closing: AtomicBool,
    background: AtomicBool,
    pids: Mutex<Vec<u32>>,
    samples: u64,
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
        let folder = shared_memory_dir()?;
        let dir = folder.path().to_owned();
        let script = dir.join("worker.py");
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
        let refer = |r: &PythonRef| json!({ "file": r.file, "name": r.name });
        let wire_setup = json!({
            "code_dir": setup.code_dir,
            "dataset": refer(dataset),
            "collate": collate.map(refer),
            "path": path,
            "hyperparameters": setup.hyperparameters,
            "seed": seed,
            "shm_dir": dir,
        });
        let failed = |message: String| PipelineError::PythonSetup {
            dataset: dataset.to_string(),
            message,
        };
        // Every worker builds its own dataset; they start together (importing torch takes
        // seconds), and every one must agree on the dataset's length.
        let started: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|slot| {
                    let (command, wire_setup, dir) = (&command, &wire_setup, &dir);
                    scope.spawn(move || {
                        Process::start(command(), dir, &format!("w{slot}"), wire_setup)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a worker's start panicked".into()))
                })
                .collect()
        });
        let mut processes = Vec::new();
        for result in started {
            processes.push(result.map_err(failed)?);
        }
        let samples = processes[0].1;
        if let Some((_, other)) = processes.iter().find(|(_, n)| *n != samples) {
            return Err(failed(format!(
                "two workers built datasets of {samples} and {other} samples: `len()` must not \
                 depend on anything but the path and the hyperparameters"
            )));
        }
        if samples == 0 {
            return Err(failed("the dataset is empty (`len()` is 0)".into()));
        }
        // One sample's size, for the memory budget and the message-size check of a batch.
        let probe = processes[0].0.batch(0, &[0]).map_err(|f| match f {
            Failed::User {
                kind,
                message,
                sample,
            } => user_error(&kind, message, sample),
            Failed::Died(how) => failed(format!("the worker died making sample 0 ({how})")),
        })?;
        let sample_bytes = probe.data.len();
        drop(probe);

        let pool = Arc::new(Pool {
            command: Box::new(command),
            setup: wire_setup,
            dataset: dataset.to_string(),
            folder,
            busy: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            background: AtomicBool::new(false),
            pids: Mutex::new(processes.iter().map(|(p, _)| p.pid()).collect()),
            samples,
        });
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
        tracing::info!(
            workers = threads.len(),
            samples,
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
        let pids = self
            .pool
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        usage::of(&pids)
    }

    fn submit(
        &self,
        epoch: u32,
        ids: &[u64],
        cancelled: &Arc<AtomicBool>,
    ) -> Receiver<Result<Made, PipelineError>> {
        let (reply, rx) = sync_channel(1);
        let job = Job {
            epoch,
            ids: ids.to_vec(),
            cancelled: cancelled.clone(),
            reply,
        };
        if let Some(jobs) = &self.jobs {
            // A closed queue drops `reply`, which the caller sees as the pool stopping.
            let _ = jobs.send(job);
        }
        rx
    }
}

/// A worker thread: takes batch requests off the queue and has its process make them,
/// replacing the process when it dies.
fn serve(pool: &Pool, slot: usize, mut process: Option<Process>, jobs: &Mutex<Receiver<Job>>) {
    let name = format!("w{slot}");
    loop {
        let job = {
            let queue = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        if job.cancelled.load(Ordering::Relaxed) {
            continue;
        }
        pool.busy.fetch_add(1, Ordering::Relaxed);
        let result = make(pool, &name, &mut process, &job);
        pool.busy.fetch_sub(1, Ordering::Relaxed);
        let _ = job.reply.send(result);
    }
}

/// One batch on this thread's process, starting a new one as long as the old one dies.
fn make(
    pool: &Pool,
    name: &str,
    process: &mut Option<Process>,
    job: &Job,
) -> Result<Made, PipelineError> {
    let mut deaths = 0;
    loop {
        if pool.closing.load(Ordering::Relaxed) {
            return Err(PipelineError::Pool(
                "the Python workers are stopping".into(),
            ));
        }
        let worker = match process {
            Some(worker) => worker,
            None => {
                let (started, _) =
                    Process::start((pool.command)(), pool.folder.path(), name, &pool.setup)
                        .map_err(|message| PipelineError::PythonSetup {
                            dataset: pool.dataset.clone(),
                            message,
                        })?;
                pool.adopt(started.pid());
                process.insert(started)
            }
        };
        match worker.batch(job.epoch, &job.ids) {
            Ok(made) => return Ok(made),
            Err(Failed::User {
                kind,
                message,
                sample,
            }) => return Err(user_error(&kind, message, sample)),
            Err(Failed::Died(how)) => {
                *process = None;
                deaths += 1;
                let (first, last) = (job.ids[0], job.ids[job.ids.len() - 1]);
                if deaths >= MAX_DEATHS {
                    return Err(PipelineError::WorkerDied {
                        deaths,
                        how,
                        first,
                        last,
                    });
                }
                tracing::warn!(
                    worker = name,
                    %how,
                    epoch = job.epoch,
                    samples = %format!("{first}..={last}"),
                    "a Python worker died; starting another to make its batch again"
                );
            }
        }
    }
}

/// The user's code failed on a batch: an error the trainer sees with the traceback.
fn user_error(kind: &str, message: String, sample: Option<u64>) -> PipelineError {
    let stage = match kind {
        "getitem" => "__getitem__",
        "collate" => "collate",
        "stack" => "default collate",
        _ => "batch",
    };
    match sample {
        Some(sample) => PipelineError::Sample {
            sample,
            stage: stage.to_owned(),
            why: message,
        },
        None => PipelineError::Python {
            stage: stage.to_owned(),
            message,
        },
    }
}

impl Pool {
    /// A new worker process: nicer too when the pipeline runs in the background.
    fn adopt(&self, pid: u32) {
        if self.background.load(Ordering::Relaxed) {
            let _ = lower_priority(pid, BACKGROUND_NICE);
        }
        self.pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(pid);
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
        self.pool.samples
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
        if let Some(&bad) = work.ids.iter().find(|id| **id >= self.pool.samples) {
            return Err(PipelineError::UnknownSample {
                sample: bad,
                samples: self.pool.samples,
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
                    labels: Vec::new(),
                    data: made.data,
                    shape: Pipeline::UNKNOWN_SHAPE,
                    tensors: made.tensors,
                    structure: made.structure,
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

    fn run_in_background(&self) -> std::io::Result<()> {
        self.pool.background.store(true, Ordering::Relaxed);
        let pids = self
            .pool
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pids.iter()
            .try_for_each(|pid| lower_priority(*pid, BACKGROUND_NICE))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.pool.closing.store(true, Ordering::Relaxed);
        // Closing the queue ends idle threads; a busy one ends when its process is killed.
        self.jobs = None;
        for pid in self
            .pool
            .pids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            // SAFETY: a plain system call; the ids are this process's children (an id already
            // reaped is at worst a stale id, which `Process::drop` also kills).
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        // The folder goes with the last reference to the pool.
    }
}
