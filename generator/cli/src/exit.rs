//! Why a command failed, and the exit code that says so.

use std::path::PathBuf;
use std::process::ExitCode;

use hetgen_local::RunDir;
use hetgen_spec::Report;

/// Exit codes (sysexits where one fits).
pub mod code {
    /// The command failed.
    pub const FAILURE: u8 = 1;
    /// The command line is wrong.
    pub const USAGE: u8 = 2;
    /// The spec is invalid (EX_DATAERR).
    pub const INVALID_SPEC: u8 = 65;
    /// AWS or environment configuration is missing or wrong (EX_CONFIG).
    pub const CONFIG: u8 = 78;
}

/// A failed command.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum Failure {
    /// The spec has errors; they were printed already.
    #[error("{0}")]
    InvalidSpec(Box<Report>),
    /// A file could not be read.
    #[error("cannot read `{}`", path.display())]
    #[diagnostic(code("hetgen::io::read"), help("{hint}"))]
    Read {
        path: PathBuf,
        hint: String,
        #[source]
        source: std::io::Error,
    },
    /// Rendering hit a template bug.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Template(#[from] hetgen_render::TemplateError),
    /// The source bundle could not be written.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Bundle(#[from] hetgen_render::bundle::BundleError),
    /// Writing output failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Write(#[from] hetgen_render::WriteError),
    /// `render --check` found stale files; the diff was printed already.
    #[error("{count} rendered file(s) under `{}` are stale", dir.display())]
    #[diagnostic(
        code("hetgen::render::stale"),
        help("run `hetgen render` to bring them up to date")
    )]
    Stale { dir: PathBuf, count: usize },
    /// A local run ended Failed or Stopped.
    #[error("local job `{name}` {status}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    #[diagnostic(
        code("hetgen::local::job-failed"),
        help(
            "every host's output is in {}; the job record is {}",
            RunDir::at(dir).host_log("<host>").display(),
            RunDir::at(dir).record().display()
        )
    )]
    LocalJobFailed {
        name: String,
        status: String,
        reason: Option<String>,
        dir: PathBuf,
    },
    /// The pipeline could not be built or run.
    #[error("the pipeline of `{}` failed: {source}", spec.display())]
    #[diagnostic(code("hetgen::profile::pipeline"), help("{hint}"))]
    Pipeline {
        spec: PathBuf,
        hint: String,
        #[source]
        source: hetgen_pipeline::PipelineError,
    },
    /// A profile file is unreadable or lacks what was asked of it.
    #[error("profile `{}`: {why}", path.display())]
    #[diagnostic(code("hetgen::profile::file"), help("{hint}"))]
    Profile {
        path: PathBuf,
        why: String,
        hint: String,
    },
    /// `hetgen bench` needs a job of another shape.
    #[error("cannot bench `{}`: {why}", spec.display())]
    #[diagnostic(code("hetgen::bench::job"), help("{hint}"))]
    Bench {
        spec: PathBuf,
        why: String,
        hint: String,
    },
    /// The rendered Kubernetes objects cannot be used.
    #[error(transparent)]
    #[diagnostic(transparent)]
    KubeFiles(#[from] hetgen_kube::LoadError),
    /// A local run could not be set up.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Local(#[from] hetgen_local::LocalError),
    /// `hetgen profile --trainer` could not time the script.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Trainer(#[from] hetgen_local::trainer_rate::TrainerError),
    /// Sizing arithmetic is missing a fact.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Plan(#[from] hetgen_plan::PlanError),
    /// An AWS call failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Deploy(#[from] hetgen_deploy::DeployError),
    /// A call to a Kubernetes cluster failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kube(#[from] hetgen_kube_deploy::KubeError),
    /// A TrainJob ended Failed.
    #[error("TrainJob `{name}` failed{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    #[diagnostic(
        code("hetgen::kube::job-failed"),
        help(
            "every pod's output: `hetgen logs --engine kubeflow {name}`; its events: `kubectl describe trainjob {name}`"
        )
    )]
    TrainJobFailed {
        name: String,
        reason: Option<String>,
    },
    /// A flag that `--engine kubeflow` has no meaning for.
    #[error("`{flag}` does not apply to `--engine kubeflow`")]
    #[diagnostic(code("hetgen::kube::flag"), help("{hint}"))]
    NotForKubeflow {
        flag: &'static str,
        hint: &'static str,
    },
    /// The spec cannot be deployed to SageMaker.
    #[error("`{}` has no `[sagemaker]` section", spec.display())]
    #[diagnostic(
        code("hetgen::deploy::no-sagemaker"),
        help(
            "add `[sagemaker]` with `region`, `role_arn` and `output_path` (and `image_uri` for your own image)"
        )
    )]
    NoSageMaker { spec: PathBuf },
    /// The spec cannot run as a Kubeflow Trainer job.
    #[error("`{}` has no `[kubernetes]` section", spec.display())]
    #[diagnostic(
        code("hetgen::deploy::no-kubernetes"),
        help(
            "add `[kubernetes]` with the `image` built from the rendered Dockerfile, and run `hetgen render`"
        )
    )]
    NoKubernetes { spec: PathBuf },
    /// The operating system gave no randomness for the job token.
    #[error("cannot make a job token")]
    #[diagnostic(
        code("hetgen::deploy::token"),
        help("the operating system's random number generator is unavailable")
    )]
    Token {
        #[source]
        source: std::io::Error,
    },
    /// `--name` is not a job name.
    #[error("`{name}` is not a valid training job name")]
    #[diagnostic(
        code("hetgen::deploy::name"),
        help(
            "use 1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
        )
    )]
    BadJobName { name: String },
    /// `--resume-from` names a job whose checkpoints cannot be found.
    #[error("cannot continue `{job}`: {why}")]
    #[diagnostic(
        code("hetgen::deploy::resume-from"),
        help(
            "name a job that kept checkpoints: one deployed from a spec with `[sagemaker] checkpoint_uri` (`hetgen list` shows recent jobs), or with --local an earlier run's folder under build/<job>/local/"
        )
    )]
    NothingToResume { job: String, why: String },
    /// The job ended without completing.
    #[error("training job `{name}` ended {status}{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    #[diagnostic(
        code("hetgen::deploy::job-failed"),
        help("see the job's logs in CloudWatch (/aws/sagemaker/TrainingJobs)")
    )]
    JobFailed {
        name: String,
        status: String,
        reason: Option<String>,
    },
    /// `hetgen new` would overwrite something.
    #[error("`{}` already exists", path.display())]
    #[diagnostic(
        code("hetgen::new::exists"),
        help("choose another name, or remove it first")
    )]
    Exists { path: PathBuf },
    /// `hetgen new` got a name that is not a valid job name.
    #[error("`{name}` is not a valid job name")]
    #[diagnostic(
        code("hetgen::new::name"),
        help(
            "use letters, digits and hyphens (at most 42), starting and ending with a letter or digit"
        )
    )]
    BadName { name: String },
    /// Creating the new project failed.
    #[error("cannot create `{}`", path.display())]
    #[diagnostic(code("hetgen::new::write"), help("check that the folder is writable"))]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Failure {
    /// A local run that ended Failed or Stopped, as its record says.
    pub fn local_job_failed(record: hetgen_local::JobRecord) -> Failure {
        Failure::LocalJobFailed {
            name: record.job_name,
            status: format!("{:?}", record.status),
            reason: record.failure_reason,
            dir: record.job_dir,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Failure::InvalidSpec(_) | Failure::NoSageMaker { .. } => code::INVALID_SPEC,
            Failure::Deploy(e) if e.is_configuration() => code::CONFIG,
            Failure::Kube(e) if e.is_configuration() => code::CONFIG,
            Failure::NotForKubeflow { .. } => code::USAGE,
            // What this machine lacks (cargo, torchrun, AWS's training toolkit), not the job.
            Failure::Local(e) if e.is_environment() => code::CONFIG,
            Failure::Trainer(
                hetgen_local::trainer_rate::TrainerError::NoTorch { .. }
                | hetgen_local::trainer_rate::TrainerError::Start { .. },
            ) => code::CONFIG,
            _ => code::FAILURE,
        })
    }
}
