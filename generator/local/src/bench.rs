//! `hetgen bench`: one job run locally three ways with the same step count, to measure where its
//! pipeline is best run.
//!
//! - homogeneous: the trainer host alone, preprocessing on its own cores;
//! - remote-only: the same trainer host streaming from the data hosts on the machine's other
//!   cores, its own pipeline off;
//! - hybrid: both, the trainer host's pipeline with as many threads as it had alone, taking
//!   shards beside the data hosts.
//!
//! Every run uses the rendered launcher and the real runtime, so what differs is only where the
//! pipeline runs. The trainer host gets the same cores in all three; the data hosts share the
//! rest, so the sides never share a core. Pricing the results is the caller's (`hetgen-plan`'s
//! arithmetic); this module runs and measures.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hetgen_env::JobFile;
use hetgen_spec::Job;
use hetgen_spec::model::{Length, Role, Trainer, TrainerCpus};

use crate::{CpuPolicy, JobRecord, Limits, LocalError, LocalJob, Observer, RunOptions, Status};
use crate::{StopRequests, cpus};

/// Steps per run when the caller gives none and the spec counts epochs.
const DEFAULT_STEPS: u64 = 100;
/// The most steps a run takes from the spec's step count; the caller may ask for more.
const MAX_SPEC_STEPS: u64 = 200;

/// The three configurations of one job, and the cores each side gets.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Optimizer steps per run.
    pub steps: u64,
    /// The trainer runs without its model (the launcher's `--input-only`).
    pub input_only: bool,
    /// The trainer host's cores, in every configuration.
    pub trainer_cores: Vec<usize>,
    /// The cores the data hosts share.
    pub data_cores: Vec<usize>,
    /// Homogeneous, remote-only and hybrid, in that order.
    pub configurations: [Configuration; 3],
}

/// One way of running the job.
#[derive(Debug, Clone)]
pub struct Configuration {
    /// `homogeneous`, `remote-only` or `hybrid`: the results folder and the report use it.
    pub name: &'static str,
    /// The job as this configuration runs it.
    pub job: Job,
}

/// What every run shares.
#[derive(Debug, Clone)]
pub struct Runs {
    /// The program every host runs.
    pub launcher: PathBuf,
    /// Each configuration gets a folder of its own here.
    pub results: PathBuf,
    /// The spec file, as `job.json` names it.
    pub spec: PathBuf,
    /// The spec's folder: relative channel paths start there.
    pub spec_dir: PathBuf,
    /// The caller's environment (filtered as for any local run).
    pub caller_env: BTreeMap<String, String>,
}

/// One configuration's run, as measured (`bench.json` has it with its price).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Measurement {
    /// [`Configuration::name`].
    pub configuration: &'static str,
    /// Hosts in the cluster.
    pub instances: u32,
    pub mean_step_ms: f64,
    pub stall_fraction: f64,
    pub samples_per_s: f64,
    pub steps: u64,
    pub trainer_cores: Vec<usize>,
    /// Empty when the configuration has no data hosts.
    pub data_cores: Vec<usize>,
    /// The run's job folder.
    pub job_dir: PathBuf,
}

/// Why a bench could not be run or measured.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum BenchError {
    #[error("the job has no data group")]
    #[diagnostic(
        code("hetgen::bench::job"),
        help("bench compares a job with data hosts against its trainer alone")
    )]
    NoDataGroup,
    #[error("the job's trainer is a script")]
    #[diagnostic(
        code("hetgen::bench::job"),
        help(
            "bench times the built-in trainer; time a script-mode job with `hetgen deploy --local`"
        )
    )]
    Script,
    #[error("this machine lets hetgen use one core")]
    #[diagnostic(
        code("hetgen::bench::job"),
        help("bench needs at least two: one for the trainer, one for data")
    )]
    OneCore,
    /// A results folder or a file in it that cannot be written.
    #[error("cannot {what} {}: {source}", path.display())]
    #[diagnostic(
        code("hetgen::bench::job"),
        help("choose a writable `--results` folder")
    )]
    Results {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the trainer wrote no summary")]
    #[diagnostic(
        code("hetgen::bench::job"),
        help("see the trainer's log in the run folder")
    )]
    NoSummary,
    /// A run that could not be set up.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Local(#[from] LocalError),
    /// A run that ended Failed or Stopped.
    #[error("local job `{}` {:?}", .0.job_name, .0.status)]
    Incomplete(Box<JobRecord>),
}

impl Setup {
    /// The three configurations of `job` on this machine's cores: `steps` each (default: the
    /// spec's step count, at most 200), the trainer host on `trainer_cores` of them (default:
    /// half).
    pub fn new(
        job: &Job,
        steps: Option<u64>,
        trainer_cores: Option<usize>,
        input_only: bool,
    ) -> Result<Setup, BenchError> {
        if !job.groups.iter().any(|g| g.role == Role::Data) {
            return Err(BenchError::NoDataGroup);
        }
        let Some(trainer) = job.trainer.builtin() else {
            return Err(BenchError::Script);
        };
        let steps = steps.unwrap_or(match trainer.length {
            Length::Steps(n) => n.min(MAX_SPEC_STEPS),
            Length::Epochs(_) => DEFAULT_STEPS,
        });
        let mut base = job.clone();
        if let Trainer::Builtin(trainer) = &mut base.trainer {
            trainer.length = Length::Steps(steps.max(1));
            trainer.checkpoint_every = None;
        }
        // Remote-only: the trainer's own pipeline off, whatever the spec says.
        let mut remote_only = base.clone();
        remote_only.pipeline.trainer_cpus = TrainerCpus::Threads(0);
        // Homogeneous: the trainer alone, its pipeline sized as the spec sizes it there.
        let mut homogeneous = base.clone();
        homogeneous.groups.retain(|g| g.role == Role::Trainer);
        // The trainer host preprocesses alone now, so it needs every channel, including those
        // the spec delivers only to data groups.
        for channel in &mut homogeneous.channels {
            channel.instance_groups.clear();
        }

        let cores = cpus::available();
        if cores.len() < 2 {
            return Err(BenchError::OneCore);
        }
        let k = trainer_cores
            .unwrap_or(cores.len() / 2)
            .clamp(1, cores.len() - 1);
        // Hybrid: the trainer host's pipeline with the threads it has alone on the same cores.
        let mut hybrid = base;
        let alone = homogeneous.trainer_threads(u32::try_from(k).unwrap_or(u32::MAX));
        hybrid.pipeline.trainer_cpus = TrainerCpus::Threads(alone);
        Ok(Setup {
            steps,
            input_only,
            trainer_cores: cores[..k].to_vec(),
            data_cores: cores[k..].to_vec(),
            configurations: [
                Configuration {
                    name: "homogeneous",
                    job: homogeneous,
                },
                Configuration {
                    name: "remote-only",
                    job: remote_only,
                },
                Configuration {
                    name: "hybrid",
                    job: hybrid,
                },
            ],
        })
    }

    /// Lays out `configuration`'s run in a fresh folder under `runs.results`, each host pinned
    /// to its side's cores.
    pub fn prepare(
        &self,
        configuration: &Configuration,
        runs: &Runs,
    ) -> Result<LocalJob, BenchError> {
        let job = &configuration.job;
        let dir = runs.results.join(configuration.name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Results {
            what: "create",
            path: dir.clone(),
            source,
        })?;
        let job_file = dir.join(hetgen_env::JOB_FILE_NAME);
        let file = JobFile {
            generated_by: format!("hetgen {} bench", env!("CARGO_PKG_VERSION")),
            spec: runs.spec.display().to_string(),
            spec_sha256: String::new(),
            job: job.clone(),
        };
        std::fs::write(&job_file, file.to_json()).map_err(|source| BenchError::Results {
            what: "write",
            path: job_file.clone(),
            source,
        })?;
        let options = RunOptions {
            job_dir: dir.join("run"),
            launcher: runs.launcher.clone(),
            job_file,
            spec_dir: runs.spec_dir.clone(),
            caller_env: runs.caller_env.clone(),
            env: vec![],
            cpus: CpuPolicy::Shared,
            limits: Limits {
                max_runtime: crate::spec_max_runtime(job),
                grace: Duration::from_secs(10),
            },
            seed: Some(1),
            framework: None,
            resume_from: None,
        };
        let mut local = crate::prepare(job, options)?;
        for command in &mut local.commands {
            if command.host.role == Role::Trainer {
                command.cpus = Some(self.trainer_cores.clone());
                if self.input_only {
                    command.args.push("--input-only".to_owned());
                }
            } else {
                command.cpus = Some(self.data_cores.clone());
            }
        }
        Ok(local)
    }

    /// Runs `local` (prepared for `configuration`) to its end and reads the trainer's summary.
    pub fn measure(
        &self,
        configuration: &Configuration,
        local: &LocalJob,
        stop: &StopRequests,
        observer: &mut dyn Observer,
    ) -> Result<Measurement, BenchError> {
        let job = &configuration.job;
        let record = local.run(stop, observer)?;
        if record.status != Status::Completed {
            return Err(BenchError::Incomplete(Box::new(record)));
        }
        let summary = record.summary.as_ref().ok_or(BenchError::NoSummary)?;
        Ok(Measurement {
            configuration: configuration.name,
            instances: job.groups.iter().map(|g| g.count).sum(),
            mean_step_ms: summary.mean_step_ms,
            stall_fraction: summary.stall_fraction,
            samples_per_s: summary.samples_per_s,
            steps: self.steps,
            trainer_cores: self.trainer_cores.clone(),
            data_cores: if job.groups.len() > 1 {
                self.data_cores.clone()
            } else {
                vec![]
            },
            job_dir: record.job_dir.clone(),
        })
    }
}
