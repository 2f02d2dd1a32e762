//! `hetgen deploy`'s arguments, `--local`'s among them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::value;
use super::{AwsArgs, Engine, KubeArgs, WheelArgs};

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Where the job runs: on SageMaker (the spec's `[sagemaker]`) or as a Kubeflow Trainer
    /// job on Kubernetes (`[kubernetes]`, rendered under OUT/<job>/kubeflow/); with --local,
    /// which rendering runs here
    #[arg(long, value_enum, default_value_t = Engine::Sagemaker)]
    pub engine: Engine,
    /// Use this TrainingJobName as it is, without a unique suffix
    #[arg(long)]
    pub name: Option<String>,
    /// Continue this earlier job of the same `[job] name`: start from its checkpoints (on
    /// SageMaker, the CheckpointConfig location of a job that has ended; with --local, an
    /// earlier run's folder or name). Without it every job starts from none: each keeps its
    /// checkpoints under `<checkpoint_uri>/<job name>/`
    #[arg(long, value_name = "JOB")]
    pub resume_from: Option<String>,
    /// Follow the job and every host's log until it ends; exit 0 only if it completes
    #[arg(long)]
    pub wait: bool,
    /// With --wait: show status changes only, not the hosts' log lines
    #[arg(long, requires = "wait")]
    pub no_logs: bool,
    /// Seconds between polls of the job's status and logs with --wait
    #[arg(long, value_name = "SECONDS", default_value = "10",
          value_parser = value::seconds(0.01, 3600.0))]
    pub poll_interval: Duration,
    /// Print the request instead of sending it (a job on AWS's PyTorch image is bundled, not
    /// uploaded)
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub wheel: WheelArgs,
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub local: LocalArgs,
}

/// `deploy --local`: the same job as a simulated cluster on this machine.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Run the job on this machine, one process per host, instead of on SageMaker
    #[arg(long)]
    pub local: bool,
    /// Job folder for the run (default: OUT/<job>/local/<job>-<time>)
    #[arg(long, requires = "local")]
    pub job_dir: Option<PathBuf>,
    /// KEY=VALUE for every host's environment (repeatable)
    #[arg(long = "env", value_name = "KEY=VALUE", requires = "local")]
    pub env: Vec<String>,
    /// Give every host this many cores of its own
    #[arg(long, value_name = "N", requires = "local", conflicts_with = "cpus_from_catalog",
          value_parser = value::whole::<usize>(1, value::MAX_CORES))]
    pub cpus_per_host: Option<usize>,
    /// Share this machine's cores out in proportion to the instance types' vCPUs
    #[arg(long, requires = "local")]
    pub cpus_from_catalog: bool,
    /// Stop the job after this many seconds (default: the spec's max runtime, if any)
    #[arg(long, value_name = "SECONDS", requires = "local",
          value_parser = value::seconds(1.0, value::MAX_RUNTIME_S))]
    pub max_runtime: Option<Duration>,
    /// Seconds between SIGTERM and SIGKILL when hosts are stopped
    #[arg(long, value_name = "SECONDS", default_value = "10", requires = "local",
          value_parser = value::seconds(0.0, 3600.0))]
    pub grace: Duration,
    /// Run this launcher binary instead of building the rendered launcher crate
    #[arg(long, requires = "local")]
    pub launcher: Option<PathBuf>,
    /// Build the launcher with optimizations (slower build, faster pipeline)
    #[arg(long, requires = "local")]
    pub release: bool,
    /// Seed for the host-name shuffle (default: fresh per run)
    #[arg(long, value_name = "N", requires = "local",
          value_parser = value::whole::<u64>(0, u64::MAX))]
    pub seed: Option<u64>,
}
