//! `hetgen bench`: one job run locally three ways with the same length, to measure where its
//! pipeline is best run.
//!
//! - homogeneous: the trainer hosts alone, preprocessing on their own cores (the job with its
//!   data groups removed and every channel delivered to the trainer group);
//! - remote-only: the same trainer hosts streaming from the data hosts on the machine's other
//!   cores, their own pipeline off;
//! - hybrid: both, each trainer host's pipeline with as many threads as it had alone, taking
//!   shards beside the data hosts (the pipeline's channel delivered to the trainer group too).
//!
//! Every run uses the real runtime as a local run does (the rendered launcher, or on AWS's
//! PyTorch image the toolkit and the configuration's own source bundle, which the caller
//! writes), so what differs is only where the pipeline runs. The trainer hosts get the same
//! cores in all three; the data hosts share the rest, so the sides never share a core. Pricing
//! the results is the caller's (`hetgen-plan`'s arithmetic); this module runs and measures.
//!
//! # The two trainers
//!
//! The built-in trainer is cut at the same step count in every run, and its summary gives the
//! figures. A script cannot be cut from outside without cutting what it does around training,
//! so it runs its own length, as the job would (its `args` and the job's hyperparameters bound
//! it: `--epochs 2` for the examples), and the figures come from the `hetgen-step` lines that
//! `hetgen.Loader` prints on rank 0 every `progress_every` batches ([`Windows`]): the first
//! line's window holds the start-up (connecting, the dataset's workers starting, the first
//! fill), so it is left out; stall is the wait over the step time of the rest, and samples/s
//! the job's (rank 0's batches times the trainer processes, which step together under DDP).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use hetgen_env::JobFile;
use hetgen_spec::Job;
use hetgen_spec::model::{Length, Role, Trainer, TrainerCpus};
use hetgen_spec::step::StepLine;

use crate::{CpuPolicy, JobRecord, Limits, LocalError, LocalJob, Observer, RunOptions, Status};
use crate::{Exit, FrameworkRun, Host, StopRequests, Stream, cpus};

/// Steps per run when the caller gives none and the spec counts epochs.
const DEFAULT_STEPS: u64 = 100;
/// The most steps a run takes from the spec's step count; the caller may ask for more.
const MAX_SPEC_STEPS: u64 = 200;

/// The three configurations of one job, and the cores each side gets.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Optimizer steps per run; `None` for a script, which runs its own length.
    pub steps: Option<u64>,
    /// The trainer runs without its model (the launcher's `--input-only`).
    pub input_only: bool,
    /// The trainer hosts' cores, in every configuration.
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
    /// Training processes of the job: trainer hosts × processes per host (the built-in
    /// trainer runs one).
    pub trainer_processes: u32,
    pub mean_step_ms: f64,
    /// Wait for data over step time: the share of the trainer's time the input stalled it.
    pub stall_fraction: f64,
    /// Of the whole job.
    pub samples_per_s: f64,
    /// Steps the figures cover: the built-in trainer's run (its summary leaves out its
    /// warm-up), or a script's steps after the Loader's first `hetgen-step` window.
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
    #[error("`--steps` cuts the built-in trainer; a script runs its own length")]
    #[diagnostic(
        code("hetgen::bench::job"),
        help(
            "bound the script with its own arguments: the job's hyperparameters (`[sagemaker] hyperparameters = {{ epochs = 2 }}`, passed to it as `--epochs 2`) or `[trainer] args`"
        )
    )]
    ScriptSteps,
    #[error(
        "`--input-only` runs the built-in trainer without its model; a script's model is its own"
    )]
    #[diagnostic(
        code("hetgen::bench::job"),
        help("bench a script without it: the script trains as it would in the job")
    )]
    ScriptInputOnly,
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
    /// A script whose run gave too few step lines to measure.
    #[error(
        "the `{configuration}` run printed {lines} `hetgen-step` line(s); bench measures from the second on"
    )]
    #[diagnostic(
        code("hetgen::bench::job"),
        help(
            "train for longer (more epochs), or have the Loader print more often: `hetgen.Loader(progress_every=N)` prints a line every N batches on rank 0 (default 50)"
        )
    )]
    FewStepLines {
        configuration: &'static str,
        lines: usize,
    },
    /// A run that could not be set up.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Local(#[from] LocalError),
    /// A run that ended Failed or Stopped.
    #[error("local job `{}` {:?}", .0.job_name, .0.status)]
    Incomplete(Box<JobRecord>),
}

impl Setup {
    /// The three configurations of `job` on this machine's cores, the trainer hosts on
    /// `trainer_cores` of them (default: half): with the built-in trainer `steps` each
    /// (default: the spec's step count, at most 200); a script runs its own length, so it
    /// takes neither `steps` nor `input_only`.
    pub fn new(
        job: &Job,
        steps: Option<u64>,
        trainer_cores: Option<usize>,
        input_only: bool,
    ) -> Result<Setup, BenchError> {
        if !job.groups.iter().any(|g| g.role == Role::Data) {
            return Err(BenchError::NoDataGroup);
        }
        let mut base = job.clone();
        let steps = match &mut base.trainer {
            Trainer::Builtin(trainer) => {
                let steps = steps.unwrap_or(match trainer.length {
                    Length::Steps(n) => n.min(MAX_SPEC_STEPS),
                    Length::Epochs(_) => DEFAULT_STEPS,
                });
                trainer.length = Length::Steps(steps.max(1));
                trainer.checkpoint_every = None;
                Some(steps)
            }
            Trainer::Script(_) if steps.is_some() => return Err(BenchError::ScriptSteps),
            Trainer::Script(_) if input_only => return Err(BenchError::ScriptInputOnly),
            Trainer::Script(_) => None,
        };
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
        // It makes samples itself now, so it needs the channel the pipeline reads, which the
        // spec may deliver only to data groups (without it the trainer would have no share).
        let mut hybrid = base;
        let alone = homogeneous.trainer_threads(u32::try_from(k).unwrap_or(u32::MAX));
        hybrid.pipeline.trainer_cpus = TrainerCpus::Threads(alone);
        let source = hybrid.pipeline.source.channel().map(str::to_owned);
        for channel in &mut hybrid.channels {
            if source.as_deref() == Some(channel.name.as_str()) {
                channel.instance_groups.clear();
            }
        }
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
    /// to its side's cores. `framework`: on AWS's PyTorch image, the configuration's own
    /// source bundle, whose `hetgen-job.json` is `configuration.job`.
    pub fn prepare(
        &self,
        configuration: &Configuration,
        runs: &Runs,
        framework: Option<FrameworkRun>,
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
            framework,
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

    /// Runs `local` (prepared for `configuration`) to its end and measures it: from the
    /// built-in trainer's summary, or from a script's step lines.
    pub fn measure(
        &self,
        configuration: &Configuration,
        local: &LocalJob,
        stop: &StopRequests,
        observer: &mut dyn Observer,
    ) -> Result<Measurement, BenchError> {
        let job = &configuration.job;
        let mut collected = StepLines {
            inner: observer,
            lines: Vec::new(),
        };
        let record = local.run(stop, &mut collected)?;
        if record.status != Status::Completed {
            return Err(BenchError::Incomplete(Box::new(record)));
        }
        let processes = trainer_processes(job);
        let (mean_step_ms, stall_fraction, samples_per_s, steps) = match self.steps {
            Some(steps) => {
                let s = record.summary.as_ref().ok_or(BenchError::NoSummary)?;
                (s.mean_step_ms, s.stall_fraction, s.samples_per_s, steps)
            }
            None => {
                let few = || BenchError::FewStepLines {
                    configuration: configuration.name,
                    lines: collected.lines.len(),
                };
                let w = Windows::of(&collected.lines).ok_or_else(few)?;
                let seconds = w.step_ms / 1000.0;
                (
                    w.step_ms / w.steps as f64,
                    (w.wait_ms / w.step_ms).clamp(0.0, 1.0),
                    w.samples * f64::from(processes) / seconds,
                    w.steps,
                )
            }
        };
        Ok(Measurement {
            configuration: configuration.name,
            instances: job.groups.iter().map(|g| g.count).sum(),
            trainer_processes: processes,
            mean_step_ms,
            stall_fraction,
            samples_per_s,
            steps,
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

/// Training processes of `job`: one per trainer host for the built-in trainer, a script's
/// `processes_per_host` on each.
pub fn trainer_processes(job: &Job) -> u32 {
    let hosts = job.trainer_group().count;
    match &job.trainer {
        Trainer::Builtin(_) => hosts,
        Trainer::Script(script) => hosts * script.processes_per_host.max(1),
    }
}

/// A script's `hetgen-step` lines added up, the first left out. Each line covers the batches
/// since the line before it (`step` counts the batches rank 0 took), so a line's window is
/// weighed by its batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Windows {
    /// Batches (steps) the windows hold.
    pub steps: u64,
    /// Their wall time, ms.
    pub step_ms: f64,
    /// The part of it spent waiting for a batch, ms.
    pub wait_ms: f64,
    /// Samples rank 0 took in them.
    pub samples: f64,
}

impl Windows {
    /// The windows after the first line's; `None` without any (fewer than two lines).
    pub fn of(lines: &[StepLine]) -> Option<Windows> {
        let mut w = Windows {
            steps: 0,
            step_ms: 0.0,
            wait_ms: 0.0,
            samples: 0.0,
        };
        for pair in lines.windows(2) {
            let batches = pair[1].step.saturating_sub(pair[0].step);
            let line = &pair[1];
            let ms = line.step_ms * batches as f64;
            w.steps += batches;
            w.step_ms += ms;
            w.wait_ms += line.wait_ms * batches as f64;
            w.samples += line.samples_per_s * ms / 1000.0;
        }
        (w.steps > 0 && w.step_ms > 0.0).then_some(w)
    }
}

/// Passes every event on, keeping the trainer hosts' step lines.
struct StepLines<'a> {
    inner: &'a mut dyn Observer,
    lines: Vec<StepLine>,
}

impl Observer for StepLines<'_> {
    fn started(&mut self, host: &Host, pid: u32) {
        self.inner.started(host, pid);
    }

    fn output(&mut self, host: &Host, stream: Stream, line: &str) {
        self.inner.output(host, stream, line);
    }

    fn step(&mut self, host: &Host, step: &StepLine) {
        if host.role == Role::Trainer {
            self.lines.push(*step);
        }
        self.inner.step(host, step);
    }

    fn exited(&mut self, host: &Host, exit: &Exit) {
        self.inner.exited(host, exit);
    }

    fn stopping(&mut self, reason: &str) {
        self.inner.stopping(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: u64, step_ms: f64, wait_ms: f64, samples_per_s: f64) -> StepLine {
        StepLine {
            step,
            loss: None,
            step_ms,
            wait_ms,
            samples_per_s,
        }
    }

    #[test]
    fn the_first_window_is_left_out_and_each_is_weighed_by_its_batches() {
        // Batch size 10: 10 batches of 100 ms (25 waiting), then 5 of 200 ms (150 waiting).
        let lines = [
            line(11, 900.0, 800.0, 11.1),
            line(21, 100.0, 25.0, 100.0),
            line(26, 200.0, 150.0, 50.0),
        ];
        let w = Windows::of(&lines).unwrap();
        assert_eq!(w.steps, 15);
        assert!((w.step_ms - 2000.0).abs() < 1e-9);
        assert!((w.wait_ms - 1000.0).abs() < 1e-9);
        assert!((w.samples - 150.0).abs() < 1e-9);
        assert_eq!(Windows::of(&lines[..1]), None);
        assert_eq!(Windows::of(&[]), None);
    }
}
