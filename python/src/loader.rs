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
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hetgen_data::audit::AuditFile;
use hetgen_data::client::{Client, ClientConfig, connect_to_job, trainer_id};
use hetgen_data::input::{self, Asked, Mode};
use hetgen_env::Env;
use hetgen_pipeline::{
    Batch, BatchStream, BoxError, Engine, EpochPlan, InputConfig, LocalInput, Position,
    StageRegistry,
};
use hetgen_spec::model::{Job, Stage};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{self, ConfigurationError, DataError, SpecError};
use crate::wait;

/// A batch with the position after it, or why the stream ended early.
type Item = Result<(Batch, Position), BoxError>;

/// Where batches come from.
enum Input {
    /// The engine in this process.
    Local(Arc<Engine>),
    /// The job's data servers.
    Remote(Arc<Client>),
}

/// What changes while iterating.
struct State {
    /// After the last batch handed to Python.
    position: Position,
    /// The running stream; started on the first batch asked for, restarted by
    /// [`NativeLoader::restart`].
    stream: Option<Arc<Mutex<Receiver<Item>>>>,
    /// The stream ended (all epochs done, or an error was raised).
    ended: bool,
    /// `HETGEN_AUDIT_FILE`: what Python received.
    audit: Option<AuditFile>,
}

/// One rank's batch stream (`hetgen.Loader` wraps it).
#[pyclass(module = "hetgen._native", frozen)]
pub struct NativeLoader {
    job: Job,
    input: Input,
    /// This trainer host, when the loader runs inside a job: its Shutdown then says "this host
    /// finished" and the servers wait for the job's other trainer hosts.
    host: Option<String>,
    config: InputConfig,
    prefetch: usize,
    state: Mutex<State>,
}

#[pymethods]
impl NativeLoader {
    /// Build a loader. Remote when `hosts` are given, or when `mode` is `"remote"`, or, with no
    /// `mode`, when this process runs inside a job (`resourceconfig.json`) that has data hosts.
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
        let connect_timeout = seconds("connect_timeout", connect_timeout)?;
        let stall_timeout = seconds("stall_timeout", stall_timeout)?;
        let env = job_env()?;
        let job = match &spec {
            Some(path) => load_spec(path)?,
            None if env.is_some() => load_job_file(None)?,
            None => {
                return Err(ConfigurationError::new_err(
                    "no job: pass `spec` (a hetgen.toml or job.json), or run inside a hetgen job \
                     (where resourceconfig.json and HETGEN_JOB_FILE describe it)",
                ));
            }
        };
        let mode = match mode.as_deref() {
            Some("remote") => Some(Mode::Remote),
            Some("local") => Some(Mode::Local),
            Some(other) => {
                return Err(ConfigurationError::new_err(format!(
                    "mode `{other}` is neither `remote` nor `local`"
                )));
            }
            None => None,
        };
        let asked = Asked {
            mode,
            hosts_given: hosts.is_some(),
            threads,
            local_ranks: local_world_size,
        };
        let decided = match input::decide(&job, env.as_ref(), &asked) {
            Ok(decided) => decided,
            // Outside a job the hosts are the caller's to give: say so in the Loader's words.
            Err(_) if env.is_none() => {
                return Err(ConfigurationError::new_err(
                    "mode `remote` outside a job needs `hosts` (\"host:port\" of every data server)",
                ));
            }
            Err(e) => return Err(ConfigurationError::new_err(e.to_string())),
        };
        let tune = move |config: &mut ClientConfig| {
            if let Some(t) = connect_timeout {
                config.connect_timeout = t;
            }
            if let Some(t) = stall_timeout {
                config.stall_timeout = t;
            }
        };
        let host = env.as_ref().map(|env| env.host().to_owned());
        let given = channels;
        let channels = || match (given, &env, &spec) {
            (Some(channels), _, _) => Ok(channels),
            (None, Some(env), None) => Ok(env.channel_dirs.clone()),
            (None, _, Some(spec)) => spec_channels(&job, spec),
            (None, None, None) => Ok(BTreeMap::new()),
        };
        let input = match decided.mode {
            Mode::Remote => {
                let dirs = match decided.threads {
                    0 => None,
                    _ => Some(channels()?),
                };
                let client = connect(py, &job, env.as_ref(), hosts, token, rank, trainer_id, tune)?;
                let client = match dirs {
                    Some(channels) => {
                        let engine = Engine::new(
                            &job,
                            &StageRegistry::builtin(),
                            &channels,
                            Some(decided.threads),
                        )
                        .map_err(|e| errors::to_py(&e))?;
                        client
                            .with_local(Arc::new(engine))
                            .map_err(|e| errors::to_py(&e))?
                    }
                    None => client,
                };
                Input::Remote(Arc::new(client))
            }
            Mode::Local => {
                let engine = Engine::new(
                    &job,
                    &StageRegistry::builtin(),
                    &channels()?,
                    Some(decided.threads),
                )
                .map_err(|e| errors::to_py(&e))?;
                Input::Local(Arc::new(engine))
            }
        };
        let samples_per_epoch = match &input {
            Input::Local(engine) => engine.samples_per_epoch(),
            Input::Remote(client) => client.samples_per_epoch(),
        };
        if samples_per_epoch < u64::from(world_size) {
            return Err(ConfigurationError::new_err(format!(
                "the source has {samples_per_epoch} samples per epoch, fewer than the \
                 {world_size} ranks that share them"
            )));
        }
        let config = InputConfig {
            seed: job.seed,
            samples_per_epoch,
            shard_size: job.pipeline.shard_size,
            batch_size: job.pipeline.batch_size,
            epochs,
            rank,
            world: world_size,
            deterministic: deterministic.unwrap_or(job.trainer.deterministic()),
        };
        let audit = if audit {
            AuditFile::from_env()
        } else {
            Ok(None)
        };
        let audit = audit.map_err(|e| {
            ConfigurationError::new_err(format!(
                "{}: cannot open the audit file: {e}",
                hetgen_data::audit::AUDIT_FILE_VAR
            ))
        })?;
        Ok(Self {
            job,
            input,
            host,
            config,
            prefetch,
            state: Mutex::new(State {
                position: Position::default(),
                stream: None,
                ended: false,
                audit,
            }),
        })
    }

    /// `"remote"` or `"local"`.
    #[getter]
    fn mode(&self) -> &'static str {
        match self.input {
            Input::Local(_) => "local",
            Input::Remote(_) => "remote",
        }
    }

    /// The data hosts streamed from (remote), as `host (address)`.
    #[getter]
    fn hosts(&self) -> Vec<String> {
        match &self.input {
            Input::Local(_) => Vec::new(),
            Input::Remote(client) => client
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
        match &self.input {
            Input::Local(engine) => engine.threads(),
            Input::Remote(client) => client.local_threads(),
        }
    }

    /// Batches yielded so far per source (remote): each data host, and `local` for this host's
    /// own pipeline with hybrid input.
    #[getter]
    fn batches_by_source(&self) -> BTreeMap<String, u64> {
        match &self.input {
            Input::Local(_) => BTreeMap::new(),
            Input::Remote(client) => client.batches_by_source(),
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

    /// Batches of one epoch of this rank (the same for every rank and epoch).
    fn batches_per_epoch(&self) -> u64 {
        self.plan(0).batches(self.config.batch_size)
    }

    /// `(epoch, batches left)` of the epoch the next batch belongs to; `batches left` is 0
    /// when the configured epochs are over.
    fn remaining_in_epoch(&self) -> (u32, u64) {
        let position = self.lock().position.clone();
        let bs = self.config.batch_size;
        let plan = self.plan(position.epoch);
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
        match self.config.epochs {
            Some(n) if epoch >= n => (epoch, 0),
            _ => (epoch, left),
        }
    }

    /// The next batch as `(images, labels, sample_ids, epoch, shard, index)`, or `None` when the
    /// configured epochs are over. Blocks with the GIL released until it is ready.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let rx = {
            let mut state = self.lock();
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
        let (batch, position) = match item {
            Some(Ok(item)) => item,
            Some(Err(e)) => {
                state.ended = true;
                state.stream = None;
                return Err(errors::boxed(e));
            }
            None => {
                state.ended = true;
                state.stream = None;
                return Ok(None);
            }
        };
        if let Some(audit) = &mut state.audit {
            audit
                .record(&batch)
                .map_err(|e| DataError::new_err(format!("cannot append to the audit file: {e}")))?;
        }
        state.position = position;
        drop(state);
        let (epoch, shard, index) = (batch.epoch, batch.shard, batch.index);
        let (images, labels, ids) = crate::batch::to_arrays(py, batch)?;
        let items: [Bound<'py, PyAny>; 6] = [
            images.into_any(),
            labels.into_any(),
            ids.into_any(),
            epoch.into_pyobject(py)?.into_any(),
            shard.into_pyobject(py)?.into_any(),
            index.into_pyobject(py)?.into_any(),
        ];
        Ok(Some(PyTuple::new(py, items)?))
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
        let plan = self.plan(position.epoch);
        let known: Vec<u32> = plan.shards.iter().map(|s| s.id).collect();
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
        state.ended = false;
        state.position = position;
        Ok(())
    }

    /// Stop streaming; the loader can be restarted with [`restart`](Self::restart).
    fn close(&self) {
        let mut state = self.lock();
        state.stream = None;
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
        match &self.input {
            Input::Local(_) => Ok(Vec::new()),
            Input::Remote(client) => {
                let client = client.clone();
                let host = self.host.clone();
                wait::run(py, "hetgen-shutdown", move || match host {
                    Some(host) => client.finished(&host, failed, &reason),
                    None => client.shutdown(&reason),
                })
            }
        }
    }
}

impl NativeLoader {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a position that is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn plan(&self, epoch: u32) -> EpochPlan {
        let c = &self.config;
        EpochPlan::new(
            c.seed,
            epoch,
            c.samples_per_epoch,
            c.shard_size,
            c.rank,
            c.world,
        )
    }

    /// Start the stream after `from` on a forwarding thread.
    fn start(&self, from: Position) -> PyResult<Receiver<Item>> {
        let mut stream: Box<dyn BatchStream> = match &self.input {
            Input::Local(engine) => Box::new(LocalInput::new(
                engine.clone(),
                self.config.clone(),
                Some(from),
            )),
            Input::Remote(client) => Box::new(client.stream(self.config.clone(), Some(from))),
        };
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

/// A positive, finite number of seconds.
fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(s) if s > 0.0 && s.is_finite() && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(ConfigurationError::new_err(format!(
            "{name} must be a positive number of seconds below 1e9, not {s}"
        ))),
    }
}

/// The job's environment when this process runs inside a job (SageMaker, `deploy --local`).
fn job_env() -> PyResult<Option<Env>> {
    Env::load_if_present().map_err(|e| errors::to_py(&e))
}

/// A spec (`hetgen.toml`, validated as `hetgen validate` does) or a rendered `job.json`.
fn load_spec(path: &Path) -> PyResult<Job> {
    if path.extension().is_some_and(|e| e == "json") {
        return load_job_file(Some(path));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| SpecError::new_err(format!("cannot read the spec {}: {e}", path.display())))?;
    let checked = hetgen_spec::check_file(path, &bytes);
    checked.job.ok_or_else(|| {
        SpecError::new_err(describe_problems(
            &path.display().to_string(),
            &checked.report,
        ))
    })
}

fn load_job_file(path: Option<&Path>) -> PyResult<Job> {
    hetgen_env::load_job(path)
        .map(|(_, file)| file.job)
        .map_err(|e| errors::to_py(&e))
}

/// Every error of a spec, one `file:line:column: message` block each, as `hetgen validate`
/// reports them (without colour).
fn describe_problems(name: &str, report: &hetgen_spec::Report) -> String {
    /// Beyond this, a count: a message is read by a person.
    const SHOWN: usize = 20;
    let errors: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.severity == hetgen_spec::Severity::Error)
        .collect();
    let count = match errors.len() {
        1 => "1 error".to_owned(),
        n => format!("{n} errors"),
    };
    let mut out = format!("{name}: invalid spec ({count})");
    for p in errors.iter().take(SHOWN) {
        let at = match p.line_col() {
            Some((line, column)) => format!("{name}:{line}:{column}"),
            None => name.to_owned(),
        };
        out.push_str(&format!("\n{at}: {} [{}]", p.message, p.code));
        if let Some(help) = &p.help {
            out.push_str(&format!("\n  help: {help}"));
        }
    }
    if errors.len() > SHOWN {
        out.push_str(&format!("\n… and {} more", errors.len() - SHOWN));
    }
    out
}

/// Channel name → folder for a local run of a spec: each channel's `local_path` (or a `uri`
/// that is a path), relative to the spec's folder.
fn spec_channels(job: &Job, spec: &Path) -> PyResult<BTreeMap<String, PathBuf>> {
    let base = spec.parent().unwrap_or(Path::new("."));
    let mut out = BTreeMap::new();
    for channel in &job.channels {
        if let Some(path) = &channel.local_path {
            out.insert(channel.name.clone(), base.join(path));
        } else if job.pipeline.source.channel() == Some(channel.name.as_str()) {
            return Err(ConfigurationError::new_err(format!(
                "the source reads channel `{}`, which is only in `{}`: pass its local folder as \
                 `channels={{\"{}\": \"path/to/folder\"}}` or give it a `local_path` in the spec",
                channel.name, channel.uri, channel.name
            )));
        }
    }
    Ok(out)
}

/// Connect to the data servers: the job's (from its environment) or the `hosts` given.
#[allow(clippy::too_many_arguments)]
fn connect(
    py: Python<'_>,
    job: &Job,
    env: Option<&Env>,
    hosts: Option<Vec<String>>,
    token: Option<String>,
    rank: u32,
    id: Option<String>,
    tune: impl FnOnce(&mut ClientConfig) + Send + 'static,
) -> PyResult<Client> {
    let job = job.clone();
    if let Some(token) = &token {
        hetgen_data::auth::check_token(token).map_err(|e| errors::to_py(&e))?;
    }
    let result = match (hosts, env) {
        (None, Some(env)) => {
            let env = env.clone();
            let id = id.unwrap_or_else(|| trainer_id(&env, rank));
            wait::run(py, "hetgen-connect", move || {
                connect_to_job(&job, &env, id, token, tune)
            })?
        }
        (None, None) => {
            return Err(ConfigurationError::new_err(
                "mode `remote` outside a job needs `hosts` (\"host:port\" of every data server)",
            ));
        }
        (Some(hosts), env) => {
            let targets = hosts
                .iter()
                .map(|h| parse_host(h))
                .collect::<PyResult<Vec<_>>>()?;
            let token = match token {
                Some(token) => token,
                None => hetgen_data::auth::token_from_env().map_err(|e| errors::to_py(&e))?,
            };
            // Inside a job its servers take only ids of its trainer hosts; outside, any.
            let id = id.unwrap_or_else(|| match env {
                Some(env) => trainer_id(env, rank),
                None => format!("python-{}/rank-{rank}", std::process::id()),
            });
            let mut config = ClientConfig::new(id, token);
            tune(&mut config);
            let shape = job.pipeline.output_shape;
            wait::run(py, "hetgen-connect", move || {
                Client::connect(&targets, shape, config).map_err(BoxError::from)
            })?
        }
    };
    result.map_err(errors::boxed)
}

/// `host:port` (IPv6 as `[addr]:port`).
fn parse_host(text: &str) -> PyResult<(String, u16)> {
    let bad = || {
        ConfigurationError::new_err(format!(
            "data host `{text}` is not `host:port` (e.g. `algo-1:16000` or `127.0.0.1:16000`)"
        ))
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}
