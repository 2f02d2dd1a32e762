//! A local run: what it needs besides the job ([`RunOptions`]), the run set up on disk
//! ([`LocalJob`]), and running it to its record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hetgen_env::Summary;
use hetgen_spec::Job;
use hetgen_spec::model::Role;

use crate::{
    CpuPolicy, FrameworkRun, HostCommand, JobRecord, Layout, Limits, LocalError, Observer, RunDir,
    StopRequests,
};
use crate::{HostRecord, joblog, record, supervise};

/// Everything a run needs besides the job.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The job folder to create (it must not exist).
    pub job_dir: PathBuf,
    /// The program every host runs as `PROGRAM train`.
    pub launcher: PathBuf,
    /// The rendered job.json.
    pub job_file: PathBuf,
    /// The spec's folder: relative channel paths start there.
    pub spec_dir: PathBuf,
    /// The caller's environment (filtered by [`layout::inherited_environment`]).
    pub caller_env: BTreeMap<String, String>,
    /// `--env` flags, after the spec's environment.
    pub env: Vec<(String, String)>,
    /// CPU sets.
    pub cpus: CpuPolicy,
    /// Max runtime and grace period.
    pub limits: Limits,
    /// Seeds the host shuffle; `None` for a fresh one per run. The loopback block is always
    /// fresh, so that runs at the same time never share addresses, seeded or not.
    pub seed: Option<u64>,
    /// A job on AWS's PyTorch image: every host starts through AWS's training toolkit, from
    /// the source bundle, instead of running `launcher` ([`framework`]).
    pub framework: Option<FrameworkRun>,
    /// An earlier run of the job to continue: every host starts with the checkpoints all of
    /// its hosts left, as SageMaker restores a job's whole checkpoint location into every
    /// host's `/opt/ml/checkpoints`. `None` starts from none.
    pub resume_from: Option<PathBuf>,
}

/// A run set up on disk, ready to start.
#[derive(Debug, Clone)]
pub struct LocalJob {
    /// The job's name.
    pub name: String,
    /// The files of the run.
    pub layout: Layout,
    /// One per host, `algo-1` first.
    pub commands: Vec<HostCommand>,
    /// The program every host runs.
    pub launcher: PathBuf,
    /// Max runtime and grace period.
    pub limits: Limits,
    /// What the caller should know about how the run differs from SageMaker.
    pub notes: Vec<String>,
}

/// The spec's max runtime, when it has a `[sagemaker]` section.
pub fn spec_max_runtime(job: &Job) -> Option<Duration> {
    job.sagemaker
        .as_ref()
        .map(|sm| Duration::from_secs(sm.max_runtime_s))
}

/// `<job_root>/local/<job>-<timestamp>`, with `-2`, `-3`, … when runs start within a second.
pub fn default_job_dir(job_root: &Path, name: &str, now: SystemTime) -> PathBuf {
    let stem = format!("{name}-{}", hetgen_spec::model::name_timestamp(now));
    let local = RunDir::runs_of(job_root);
    let mut dir = local.join(&stem);
    let mut n = 2;
    while dir.exists() {
        dir = local.join(format!("{stem}-{n}"));
        n += 1;
    }
    dir
}

impl LocalJob {
    /// Runs the hosts to the end, then writes and returns the job record.
    pub fn run(
        &self,
        stop: &StopRequests,
        observer: &mut dyn Observer,
    ) -> Result<JobRecord, LocalError> {
        let mut recorder = joblog::Recorder::create(&self.layout.job_dir, observer)?;
        let outcome = supervise::supervise(&self.commands, self.limits, stop, &mut recorder)?;
        let trainers: Vec<&HostCommand> = self
            .commands
            .iter()
            .filter(|c| c.host.role == Role::Trainer)
            .collect();
        // The first trainer (in host order) that wrote a summary speaks for the job; with several
        // trainer replicas the runtime has only rank 0 write one.
        let paths = |c: &HostCommand| hetgen_env::Paths {
            base: c.base_dir.clone(),
        };
        let summary = trainers
            .iter()
            .find_map(|c| Summary::read(&paths(c).output_data_dir()).ok().flatten());
        let model_dir = trainers
            .iter()
            .map(|c| paths(c).model_dir())
            .find(|dir| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()));
        if let Some(model) = &model_dir {
            // "The trained model beside the record": a link, so nothing is copied.
            let link = self.layout.job_dir.join("model");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(model, &link).map_err(|source| LocalError::Write {
                path: link.clone(),
                source,
            })?;
        }
        let hosts = self
            .commands
            .iter()
            .zip(&outcome.exits)
            .map(|(c, exit)| HostRecord {
                host: c.host.clone(),
                pid: exit.pid,
                cpus: c.cpus.clone(),
                exit_code: exit.exit_code,
                signal: exit.signal,
                duration_s: round_ms(exit.duration),
                base_dir: c.base_dir.clone(),
                log: c.log_file(),
            })
            .collect();
        let record = JobRecord {
            job_name: self.name.clone(),
            status: outcome.status,
            secondary_status: outcome.secondary_status,
            failure_reason: outcome.failure_reason,
            start: record::rfc3339(outcome.start),
            end: record::rfc3339(outcome.end),
            duration_s: round_ms(
                outcome
                    .end
                    .duration_since(outcome.start)
                    .unwrap_or_default(),
            ),
            job_dir: self.layout.job_dir.clone(),
            launcher: self.launcher.clone(),
            hosts,
            summary,
            model_dir,
        };
        record.write()?;
        Ok(record)
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}
