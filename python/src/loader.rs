//! The loader behind `hetgen.Loader`: one rank's batches, from the job's data servers (remote)
//! or from the pipeline engine on this host's cores (local), in either case through the same
//! [`BatchStream`] the built-in trainer consumes.
//!
//! A forwarding thread pulls the stream into a bounded channel of `prefetch` batches, so the
//! next batches are ready while Python trains on this one, and so a Python-side wait can sleep in
//! slices and answer Ctrl-C. The position handed out by [`NativeLoader::position`] is that after
//! the last batch *Python received*, not after what the thread prefetched, so a checkpoint
//! resumes exactly after the last batch the training loop saw.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};

use hetgen_data::audit::AuditFile;
use hetgen_data::input::{self, Asked, Mode, Opened, Share};
use hetgen_env::Env;
use hetgen_pipeline::python::PythonSetup;
use hetgen_pipeline::{
    Batch, Batches, BoxError, EpochPlan, InputConfig, Position, StageRegistry, StreamPlan,
};
use hetgen_spec::model::{Job, Source, Stage};
use pyo3::prelude::*;

use crate::connect::{self, Servers};
use crate::errors::{self, ConfigurationError, DataError};
use crate::{job, wait};

/// A batch with the position after it, or why the stream ended early.
type Item = Result<(Batch, Position), BoxError>;

/// What changes while iterating.
struct State {
    /// After the last batch handed to Python.
    position: Position,
    /// The running stream; started on the first batch asked for, restarted by
    /// [`NativeLoader::restart`].
    stream: Option<Arc<Mutex<Receiver<Item>>>>,
    /// The stream ended (all epochs done, or an error was raised).
    ended: bool,
    /// A batch received but not handed out: it begins the epoch after the one asked for.
    held: Option<(Batch, Position)>,
    /// `HETGEN_AUDIT_FILE`: what Python received.
    audit: Option<AuditFile>,
}

/// One rank's batch stream (`hetgen.Loader` wraps it).
#[pyclass(module = "hetgen._native", frozen)]
pub struct NativeLoader {
    job: Job,
    input: Arc<Opened>,
    /// The instance's environment when the loader runs inside a job: its Shutdown then says
    /// "this host finished" and the servers wait for the job's other trainer hosts.
    env: Option<Env>,
    config: InputConfig,
    prefetch: usize,
    state: Mutex<State>,
}

#[pymethods]
impl NativeLoader {
    /// Build a loader. Remote when `hosts` are given, or when `mode` is `"remote"`, or, with no
    /// `mode`, when this process runs inside a job (`resourceconfig.json`, or a Kubernetes pod's
    /// `HETGEN_KUBE_*` variables) that has data hosts.
    /// The job comes from `spec` (a `hetgen.toml` or a `job.json`), else from the job's
    /// `job.json` (`HETGEN_JOB_FILE`).
    #[new]
    #[pyo3(signature = (
        *, spec=None, mode=None, hosts=None, token=None, channels=None, threads=None,
        rank=0, world_size=1, local_world_size=1, deterministic=None, epochs=None, prefetch=2,
        connect_timeout=None, stall_timeout=None, trainer_id=None, audit=true,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        spec: Option<PathBuf>,
        mode: Option<String>,
        hosts: Option<Vec<String>>,
        token: Option<String>,
        channels: Option<BTreeMap<String, PathBuf>>,
        threads: Option<usize>,
        rank: u32,
        world_size: u32,
        local_world_size: u32,
        deterministic: Option<bool>,
        epochs: Option<u32>,
        prefetch: usize,
        connect_timeout: Option<f64>,
        stall_timeout: Option<f64>,
        trainer_id: Option<String>,
        audit: bool,
    ) -> PyResult<Self> {
        // The batches this process receives are tens of MB: glibc's defaults would map and
        // unmap (and page-fault) every one of them, which halves the stream's rate. The tuning
        // (see `hetgen_pipeline::tune_allocator`) is what every hetgen process runs with.
        static TUNE: std::sync::Once = std::sync::Once::new();
        TUNE.call_once(hetgen_pipeline::tune_allocator);
        check_shares(rank, world_size, prefetch)?;
        let servers = Servers::new(hosts, token, trainer_id, connect_timeout, stall_timeout)?;
        let env = job::job_env()?;
        let job = job::find(spec.as_deref(), env.as_ref())?;
        let asked = Asked {
            mode: parse_mode(mode.as_deref())?,
            hosts_given: servers.hosts.is_some(),
            threads,
            local_ranks: local_world_size,
        };
        let decided = decide(&job, env.as_ref(), &asked)?;
        let input = input::open(
            decided,
            || Ok(connect::connect(py, &job, env.as_ref(), servers, rank)?),
            |threads| {
                let channels = job::channel_dirs(channels, env.as_ref(), spec.as_deref(), &job)?;
                let python = python_setup(py, &job, env.as_ref(), spec.as_deref())?;
                Ok(engine(py, &job, &python, &channels, threads)?)
            },
        )
        .map_err(errors::boxed)?;
        let share = Share {
            rank,
            world: world_size,
            epochs,
            deterministic: deterministic.unwrap_or(job.trainer.deterministic()),
        };
        let config = input
            .config(&job, share)
            .map_err(|e| ConfigurationError::new_err(e.to_string()))?;
        Ok(Self {
            job,
            input: Arc::new(input),
            env,
            config,
            prefetch,
            state: Mutex::new(State::new(open_audit(audit)?)),
        })
    }

    /// `"remote"` or `"local"`.
    #[getter]
    fn mode(&self) -> &'static str {
        match self.input.mode() {
            Mode::Local => "local",
            Mode::Remote => "remote",
        }
    }

    /// The data hosts streamed from (remote), as `host (address)`.
    #[getter]
    fn hosts(&self) -> Vec<String> {
        match &*self.input {
            Opened::Local(_) => Vec::new(),
            Opened::Remote(client) => client
                .servers()
                .iter()
                .map(|s| format!("{} ({})", s.host, s.address))
                .collect(),
        }
    }

    /// Worker threads of the in-process engine: all of the input (local), or beside the data
    /// servers (remote with hybrid input; 0 without).
    #[getter]
    fn threads(&self) -> usize {
        self.input.threads()
    }

    /// Batches yielded so far per source (remote): each data host, and `local` for this host's
    /// own pipeline with hybrid input.
    #[getter]
    fn batches_by_source(&self) -> BTreeMap<String, u64> {
        match &*self.input {
            Opened::Local(_) => BTreeMap::new(),
            Opened::Remote(client) => client.batches_by_source(),
        }
    }

    #[getter]
    fn job_name(&self) -> &str {
        &self.job.name
    }

    #[getter]
    fn batch_size(&self) -> u32 {
        self.config.batch_size
    }

    #[getter]
    fn shard_size(&self) -> u32 {
        self.config.shard_size
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.config.seed
    }

    #[getter]
    fn samples_per_epoch(&self) -> u64 {
        self.config.samples_per_epoch
    }

    /// A dataset of shards (`hetgen.Shards`): how many it has; `None` for samples by index.
    #[getter]
    fn shards(&self) -> Option<u32> {
        self.config.shards
    }

    #[getter]
    fn rank(&self) -> u32 {
        self.config.rank
    }

    #[getter]
    fn world_size(&self) -> u32 {
        self.config.world
    }

    #[getter]
    fn epochs(&self) -> Option<u32> {
        self.config.epochs
    }

    #[getter]
    fn deterministic(&self) -> bool {
        self.config.deterministic
    }

    /// `[height, width, channels]` of every sample.
    #[getter]
    fn output_shape(&self) -> [u32; 3] {
        self.job.pipeline.output_shape
    }

    /// The spec's `normalize` stages as `(mean, std)` pairs, in order: they run on the device.
    #[getter]
    fn normalization(&self) -> Vec<(Vec<f64>, Vec<f64>)> {
        self.job
            .pipeline
            .stages
            .iter()
            .filter_map(|stage| match stage {
                Stage::Normalize { mean, std } => Some((mean.clone(), std.clone())),
                _ => None,
            })
            .collect()
    }

    /// Batches of one epoch of this rank (the same for every rank and epoch); `None` for a
    /// dataset of shards, whose shards' lengths are learned as they are read.
    fn batches_per_epoch(&self) -> Option<u64> {
        self.plan(0)
            .map(|plan| plan.batches(self.config.batch_size))
    }

    /// `(epoch, batches left)` of the epoch the next batch belongs to; `batches left` is 0
    /// when the configured epochs are over.
    fn remaining_in_epoch(&self, py: Python<'_>) -> PyResult<(u32, u64)> {
        let position = self.lock().position.clone();
        let bs = self.config.batch_size;
        let Some(plan) = self.plan(position.epoch) else {
            // A dataset of shards: how many batches are left is not known (`u64::MAX`: until
            // the epoch's last), and which epoch is next is the next batch's (a shard with no
            // samples never says it is done), looked at and held back.
            let Some((batch, next)) = self.next_item(py)? else {
                return Ok((position.epoch + 1, 0));
            };
            let epoch = batch.epoch;
            self.lock().held = Some((batch, next));
            return Ok((epoch, u64::MAX));
        };
        let total = plan.batches(bs);
        let yielded: u64 = plan
            .shards
            .iter()
            .map(|shard| match position.skip(shard.id) {
                None => u64::from(shard.batches(bs)),
                Some(n) => u64::from(n),
            })
            .sum();
        let (epoch, left) = if yielded >= total {
            (position.epoch + 1, total)
        } else {
            (position.epoch, total - yielded)
        };
        Ok(match self.config.epochs {
            Some(n) if epoch >= n => (epoch, 0),
            _ => (epoch, left),
        })
    }

    /// The next batch, an `ImageBatch` or a `TensorBatch` ([`crate::batch`]), or `None` when
    /// the configured epochs are over, or (`epoch` given) when the next batch belongs to
    /// another epoch: it is kept for the next call. Blocks with the GIL released until it is
    /// ready.
    #[pyo3(signature = (epoch=None))]
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        epoch: Option<u32>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some((batch, position)) = self.next_item(py)? else {
            return Ok(None);
        };
        let mut state = self.lock();
        if epoch.is_some_and(|e| e != batch.epoch) {
            state.held = Some((batch, position));
            return Ok(None);
        }
        if let Some(audit) = &mut state.audit {
            audit
                .record(&batch)
                .map_err(|e| DataError::new_err(format!("cannot append to the audit file: {e}")))?;
        }
        state.position = position;
        drop(state);
        crate::batch::to_python(py, batch).map(Some)
    }

    /// The position after the last batch handed out, as JSON (`{"epoch", "done", "partial"}`).
    fn position(&self) -> String {
        serde_json::to_string(&self.lock().position).expect("a position serializes")
    }

    /// Continue from `position` (JSON, as [`position`](Self::position) gave it): the running
    /// stream is dropped and the next batch is the first one after `position`.
    fn restart(&self, position: &str) -> PyResult<()> {
        let position: Position = serde_json::from_str(position)
            .map_err(|e| ConfigurationError::new_err(format!("not a loader position: {e}")))?;
        let known = self.shard_ids(position.epoch);
        let stray = position
            .done
            .iter()
            .chain(position.partial.keys())
            .find(|id| !known.contains(id));
        if let Some(id) = stray {
            return Err(ConfigurationError::new_err(format!(
                "the state names shard {id}, which rank {} of {} does not have: it was saved by \
                 another rank, world size or job",
                self.config.rank, self.config.world
            )));
        }
        let mut state = self.lock();
        state.stream = None;
        state.held = None;
        state.ended = false;
        state.position = position;
        Ok(())
    }

    /// Stop streaming; the loader can be restarted with [`restart`](Self::restart).
    fn close(&self) {
        let mut state = self.lock();
        state.stream = None;
        // The stream starts again from the position, which the held batch is after.
        state.held = None;
    }

    /// Tell every data server of the job that training is over (remote; nothing to do when
    /// local). Inside a job this says "this trainer host finished" (`failed`: its training
    /// failed), and a server stops once every trainer host of the job has finished; outside a
    /// job the servers stop at once. Returns the hosts that could not be told, with why.
    #[pyo3(signature = (reason, failed=false))]
    fn shutdown(
        &self,
        py: Python<'_>,
        reason: String,
        failed: bool,
    ) -> PyResult<Vec<(String, String)>> {
        self.close();
        let (input, job, env) = (self.input.clone(), self.job.clone(), self.env.clone());
        wait::run(py, "hetgen-shutdown", move || {
            input.finished(&job, env.as_ref(), failed, &reason)
        })
    }
}

impl NativeLoader {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a position that is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This rank's plan of `epoch`; `None` for a dataset of shards ([`Self::shard_ids`]).
    fn plan(&self, epoch: u32) -> Option<EpochPlan> {
        let c = &self.config;
        c.shards.is_none().then(|| {
            EpochPlan::new(
                c.seed,
                epoch,
                c.samples_per_epoch,
                c.shard_size,
                c.rank,
                c.world,
            )
        })
    }

    /// The ids of this rank's shards of `epoch`: the plan's, or the dataset's own.
    fn shard_ids(&self, epoch: u32) -> Vec<u32> {
        let c = &self.config;
        match (c.shards, self.plan(epoch)) {
            (Some(shards), _) => StreamPlan::new(c.seed, epoch, shards, c.rank, c.world).shards,
            (None, Some(plan)) => plan.shards.iter().map(|s| s.id).collect(),
            (None, None) => unreachable!("a plan without shards of a dataset"),
        }
    }

    /// The next batch of the stream (the one held back first), starting the stream when it
    /// is not running; `None` when it ended.
    fn next_item(&self, py: Python<'_>) -> PyResult<Option<(Batch, Position)>> {
        let rx = {
            let mut state = self.lock();
            if let Some(held) = state.held.take() {
                return Ok(Some(held));
            }
            if state.ended {
                return Ok(None);
            }
            if state.stream.is_none() {
                let from = state.position.clone();
                state.stream = Some(Arc::new(Mutex::new(self.start(from)?)));
            }
            state.stream.clone().expect("started above")
        };
        let item = wait::recv(py, &rx)?;
        let mut state = self.lock();
        match item {
            Some(Ok(item)) => Ok(Some(item)),
            Some(Err(e)) => {
                state.ended = true;
                state.stream = None;
                Err(errors::boxed(e))
            }
            None => {
                state.ended = true;
                state.stream = None;
                Ok(None)
            }
        }
    }

    /// Start the stream after `from` on a forwarding thread.
    fn start(&self, from: Position) -> PyResult<Receiver<Item>> {
        let mut stream = self.input.stream(self.config.clone(), Some(from));
        let (tx, rx) = sync_channel(self.prefetch);
        std::thread::Builder::new()
            .name("hetgen-loader".to_owned())
            .spawn(move || {
                while let Some(next) = stream.next_batch() {
                    let failed = next.is_err();
                    let item = next.map(|batch| (batch, stream.position()));
                    // A closed channel means the loader was closed or restarted: stop pulling.
                    if tx.send(item).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|e| DataError::new_err(format!("cannot start the loader's thread: {e}")))?;
        Ok(rx)
    }
}

impl State {
    /// Before the first batch.
    fn new(audit: Option<AuditFile>) -> Self {
        Self {
            position: Position::default(),
            stream: None,
            ended: false,
            held: None,
            audit,
        }
    }
}

/// `rank` is one of `world_size`, and at least one batch is prefetched.
fn check_shares(rank: u32, world_size: u32, prefetch: usize) -> PyResult<()> {
    if world_size == 0 || rank >= world_size {
        return Err(ConfigurationError::new_err(format!(
            "rank {rank} is not one of {world_size} ranks: a rank is 0 to world_size - 1"
        )));
    }
    if prefetch == 0 {
        return Err(ConfigurationError::new_err(
            "prefetch must be at least 1 batch",
        ));
    }
    Ok(())
}

/// The `mode` asked for: `"remote"`, `"local"`, or none (decided from the job).
fn parse_mode(mode: Option<&str>) -> PyResult<Option<Mode>> {
    match mode {
        Some("remote") => Ok(Some(Mode::Remote)),
        Some("local") => Ok(Some(Mode::Local)),
        Some(other) => Err(ConfigurationError::new_err(format!(
            "mode `{other}` is neither `remote` nor `local`"
        ))),
        None => Ok(None),
    }
}

/// This host's input, by the one rule the launcher and `hetgen plan` follow too.
fn decide(job: &Job, env: Option<&Env>, asked: &Asked) -> PyResult<input::Input> {
    match input::decide(job, env, asked) {
        Ok(decided) => Ok(decided),
        // Outside a job the hosts are the caller's to give: say so in the Loader's words.
        Err(_) if env.is_none() => Err(ConfigurationError::new_err(connect::NEEDS_HOSTS)),
        Err(e) => Err(ConfigurationError::new_err(e.to_string())),
    }
}

/// How this host runs a Python dataset's workers: as a job's hosts do, with this process's own
/// interpreter unless `HETGEN_PYTHON` names another. Outside a job, with a spec and no
/// `HETGEN_CODE_DIR`, the dataset's file is where `hetgen deploy --local` finds it: in the
/// spec's `source_dir`, not the image's `/opt/ml/code`. A code folder that does not exist is
/// said to be one (the workers would otherwise fail to start, blaming the interpreter).
fn python_setup(
    py: Python<'_>,
    job: &Job,
    env: Option<&Env>,
    spec: Option<&std::path::Path>,
) -> PyResult<PythonSetup> {
    let mut python = input::python_setup(env);
    if std::env::var_os(hetgen_env::PYTHON_VAR).is_none() {
        python.python = py.import("sys")?.getattr("executable")?.extract()?;
    }
    let Source::Python { dataset, .. } = &job.pipeline.source else {
        return Ok(python);
    };
    if env.is_none()
        && std::env::var_os(hetgen_env::CODE_DIR_VAR).is_none()
        && let Some(spec) = spec
    {
        let base = spec.parent().unwrap_or(std::path::Path::new("."));
        let source_dir = job.trainer.script().map_or(".", |s| s.source_dir.as_str());
        python.code_dir =
            std::path::absolute(base.join(source_dir)).unwrap_or_else(|_| base.join(source_dir));
    }
    if !python.code_dir.is_dir() {
        return Err(ConfigurationError::new_err(format!(
            "the code folder `{}`, where the dataset `{dataset}` is read from, does not exist: \
             set HETGEN_CODE_DIR to the folder that holds `{}`, or pass the spec (its \
             `source_dir` is the folder outside a job)",
            python.code_dir.display(),
            dataset.file
        )));
    }
    Ok(python)
}

/// The job's pipeline on this host, with `threads` threads (or Python dataset workers).
fn engine(
    py: Python<'_>,
    job: &Job,
    python: &PythonSetup,
    channels: &BTreeMap<String, PathBuf>,
    threads: usize,
) -> PyResult<Arc<dyn Batches>> {
    // Building a Python dataset starts processes and waits for them: the GIL is not needed.
    py.detach(|| input::engine(job, &StageRegistry::builtin(), channels, threads, python))
        .map_err(errors::boxed)
}

/// `HETGEN_AUDIT_FILE`, unless `audit` is off.
fn open_audit(audit: bool) -> PyResult<Option<AuditFile>> {
    if !audit {
        return Ok(None);
    }
    AuditFile::from_env().map_err(|e| {
        ConfigurationError::new_err(format!(
            "{}: cannot open the audit file: {e}",
            hetgen_data::audit::AUDIT_FILE_VAR
        ))
    })
}
