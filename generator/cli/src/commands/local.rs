//! `hetgen deploy --local`: run what `hetgen render` wrote as a simulated cluster here.
//!
//! The order of work is the one SageMaker follows: the rendered files must match the spec, the
//! launcher is built (once; cargo caches it), every host gets its `/opt/ml` tree, the hosts run,
//! and the job ends Completed, Failed or Stopped with a job record in its folder.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use hetgen_local::supervise::Status;
use hetgen_local::{
    CpuPolicy, Exit, FrameworkRun, Host, JobRecord, Limits, LocalJob, Observer, RunDir, RunOptions,
    Step, StopRequests, Stream,
};
use hetgen_spec::Job;
use indicatif::ProgressBar;

use super::{build_launcher, ensure_fresh, render_spec, spinner, write_bundle};
use crate::cli::{DeployArgs, Engine};
use crate::exit::Failure;
use crate::view::{label_width, labelled, progress, summary_lines};

pub fn run(args: &DeployArgs) -> Result<ExitCode, Failure> {
    let (job, rendered) = render_spec(&args.spec)?;
    // The run uses exactly the rendered job.json and launcher, so they must match the spec.
    ensure_fresh(&rendered, &args.out)?;
    let job_root = args.out.join(&rendered.dir);
    let options = run_options(args, &job, &job_root)?;
    let prepared = match args.engine {
        Engine::Sagemaker => hetgen_local::prepare(&job, options)?,
        Engine::Kubeflow => {
            if job.kubernetes.is_none() {
                return Err(Failure::NoKubernetes {
                    spec: args.spec.clone(),
                });
            }
            // The files as written, checked as the API server would check them.
            let objects = hetgen_kube::load(&job_root)?;
            hetgen_local::kube::prepare(&job, &objects.runtime, &objects.trainjob, options)?
        }
    };
    print_prepared(&prepared);

    let stop = StopRequests::from_signals();
    let mut console = Console::new(label_width(
        prepared.commands.len(),
        prepared.commands.iter().map(|c| c.host.group.as_str()),
    ));
    let record = prepared.run(&stop, &mut console)?;
    console.bar.finish_and_clear();
    print_record(&record);
    match record.status {
        Status::Completed => Ok(ExitCode::SUCCESS),
        _ => Err(Failure::local_job_failed(record)),
    }
}

/// The run the flags ask for, of the job rendered under `job_root`.
fn run_options(args: &DeployArgs, job: &Job, job_root: &Path) -> Result<RunOptions, Failure> {
    let local = &args.local;
    let framework = match args.engine {
        Engine::Sagemaker => framework_run(args, job)?,
        // Pods run hetgen's image: the launcher, never AWS's toolkit.
        Engine::Kubeflow => None,
    };
    let launcher = match (&local.launcher, &framework) {
        (Some(path), _) => hetgen_local::launcher::check_executable(path)?,
        (None, Some(_)) => PathBuf::new(),
        (None, None) => build_launcher(job_root, local.release)?,
    };
    let env = local
        .env
        .iter()
        .map(|flag| hetgen_local::layout::parse_env_flag(flag))
        .collect::<Result<Vec<_>, _>>()?;
    let cpus = match (local.cpus_per_host, local.cpus_from_catalog) {
        (Some(n), _) => CpuPolicy::PerHost(n),
        (None, true) => CpuPolicy::FromCatalog,
        (None, false) => CpuPolicy::Shared,
    };
    let max_runtime = local
        .max_runtime
        .or_else(|| hetgen_local::spec_max_runtime(job));
    let job_dir = local
        .job_dir
        .clone()
        .unwrap_or_else(|| hetgen_local::default_job_dir(job_root, &job.name, SystemTime::now()));
    Ok(RunOptions {
        job_dir,
        launcher,
        job_file: job_root.join(hetgen_env::JOB_FILE_NAME),
        spec_dir: super::spec_dir(&args.spec).to_owned(),
        caller_env: std::env::vars().collect(),
        env,
        cpus,
        limits: Limits {
            max_runtime,
            grace: local.grace,
        },
        seed: local.seed,
        framework,
        // A run's folder, or its name among the job's runs.
        resume_from: args
            .resume_from
            .as_ref()
            .map(|run| RunDir::of_job(job_root, run).dir().to_owned()),
    })
}

/// On AWS's PyTorch image the hosts start through AWS's training toolkit, from the source
/// bundle (written here); on hetgen's own image (`None`), with the launcher built from the
/// rendered crate.
fn framework_run(args: &DeployArgs, job: &Job) -> Result<Option<FrameworkRun>, Failure> {
    let Some(sm) = job.sagemaker.as_ref().filter(|sm| sm.framework.is_some()) else {
        return Ok(None);
    };
    let bundle = write_bundle(job, &args.spec, &args.out, &args.wheel)?;
    Ok(Some(FrameworkRun {
        bundle: std::path::absolute(&bundle.archive).unwrap_or(bundle.archive),
        hyperparameters: hetgen_render::request::hyperparameters(job, sm),
    }))
}

/// The run's notes, its folder and one line per host, before any host starts.
fn print_prepared(prepared: &LocalJob) {
    for note in &prepared.notes {
        eprintln!("note: {note}");
    }
    eprintln!(
        "local job `{}` in {}",
        prepared.name,
        prepared.layout.job_dir.display()
    );
    for command in &prepared.commands {
        let cpus = command
            .cpus
            .as_ref()
            .map_or_else(|| "all cores".to_owned(), |c| format!("cores {c:?}"));
        eprintln!(
            "  {:<8} {:<14} {:<16} {:?} {} ({cpus})",
            command.host.name,
            command.host.group,
            command.host.instance_type,
            command.host.role,
            command.host.address
        );
    }
}

/// Prefixed host output above a live progress line.
struct Console {
    bar: ProgressBar,
    width: usize,
    /// No terminal: no progress line, every line straight to stderr.
    plain: bool,
}

impl Console {
    fn new(width: usize) -> Self {
        let plain = !std::io::stderr().is_terminal();
        let bar = if plain {
            ProgressBar::hidden()
        } else {
            spinner()
        };
        bar.set_prefix("starting");
        Console { bar, width, plain }
    }

    /// A line above the progress line; plain stderr when there is no terminal to draw on
    /// (indicatif drops `println` on a hidden bar, and CI logs want every line).
    fn say(&self, line: String) {
        if self.plain {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Observer for Console {
    fn started(&mut self, host: &Host, pid: u32) {
        let text = format!("started, pid {pid}");
        self.say(labelled(&host.name, Some(&host.group), self.width, &text));
    }

    fn output(&mut self, host: &Host, _stream: Stream, line: &str) {
        self.say(labelled(&host.name, Some(&host.group), self.width, line));
    }

    fn step(&mut self, _host: &Host, step: &Step) {
        self.bar.set_prefix("training");
        self.bar.set_message(progress(step));
    }

    fn exited(&mut self, host: &Host, exit: &Exit) {
        let text = exit.describe();
        self.say(labelled(&host.name, Some(&host.group), self.width, &text));
    }

    fn stopping(&mut self, reason: &str) {
        self.bar.set_prefix("stopping");
        self.say(format!("stopping the job: {reason}"));
    }
}

fn print_record(record: &JobRecord) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "\nlocal job `{}`: {:?} after {:.1} s",
        record.job_name, record.status, record.duration_s
    );
    for host in &record.hosts {
        let exit = match (host.exit_code, host.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => {
                format!("killed by {}", hetgen_env::process::signal_name(signal))
            }
            (None, None) => "no exit status".to_owned(),
        };
        let _ = writeln!(
            err,
            "  {:<8} {:<14} {:>8.1} s  {exit}",
            host.host.name, host.host.group, host.duration_s
        );
    }
    for line in record.summary.iter().flat_map(summary_lines) {
        let _ = writeln!(err, "  {line}");
    }
    if let Some(model) = &record.model_dir {
        let _ = writeln!(err, "  model: {}", model.display());
    }
    let _ = writeln!(
        err,
        "  record: {}",
        record.job_dir.join("job-record.json").display()
    );
    let _ = writeln!(err, "  logs: hetgen logs {}", record.job_dir.display());
}
