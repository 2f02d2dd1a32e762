//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Heterogeneous training clusters for Amazon SageMaker: GPU instances train, CPU instances
/// preprocess, in one job.
#[derive(Debug, Parser)]
#[command(name = "hetgen", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a spec against every rule SageMaker and hetgen enforce
    Validate(ValidateArgs),
    /// Render the SageMaker request, SDK estimator, launcher crate, proto and Dockerfile
    Render(RenderArgs),
    /// Create a new project with a commented hetgen.toml
    New(NewArgs),
    /// Submit the rendered job to SageMaker (run `hetgen render` first)
    Deploy(DeployArgs),
    /// Show a training job's status
    Status(StatusArgs),
    /// Stop a training job (SageMaker sends SIGTERM to every instance)
    Stop(StopArgs),
    /// List recent training jobs that hetgen started
    List(ListArgs),
    /// Size the cluster: vCPU:GPU ratio, GPU cap, the cheapest data groups that remove it
    Plan(PlanArgs),
    /// Compare two clusters' cost per step from measured step times
    Compare(CompareArgs),
    /// Measure the spec's pipeline on this machine: samples/s and CPU-seconds per sample
    Profile(ProfileArgs),
    /// Run the job locally homogeneous and heterogeneous, and compare cost per step
    Bench(BenchArgs),
    /// Print the JSON Schema of hetgen.toml
    Schema,
    /// Print a shell completion script: `source <(hetgen completions bash)`
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    Human,
    /// For machines, on stdout.
    Json,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Output folder; the job's files go to OUT/<job name>/
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Write nothing; fail with a diff when the files on disk are stale
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// Name of the project folder and of the job
    pub name: String,
    /// Start from this example instead of the tiny local job
    #[arg(long, value_enum, default_value_t = Example::TinyLocal)]
    pub example: Example,
}

/// The examples `hetgen new` can start from (the specs in the repository's `examples/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Example {
    /// CPU-only, synthetic data, runs locally in seconds
    TinyLocal,
    /// ml.p3.2xlarge trainer + ml.c5.9xlarge data instance, MNIST CNN
    MnistHetero,
    /// The homogeneous twin of mnist-hetero
    MnistHomogeneous,
    /// ml.p4d.24xlarge + 2 × ml.c5.18xlarge, ResNet-50
    Resnet50P4d,
}

/// How to reach AWS. Unset options fall back to the standard AWS environment and config files.
#[derive(Debug, Args)]
pub struct AwsArgs {
    /// A named profile from the AWS config files
    #[arg(long)]
    pub profile: Option<String>,
    /// The AWS region (default: the spec's `[sagemaker] region`, else `AWS_REGION`)
    #[arg(long)]
    pub region: Option<String>,
    /// Send requests here instead of SageMaker (emulators, VPC endpoints); `AWS_ENDPOINT_URL`
    /// works too
    #[arg(long)]
    pub endpoint_url: Option<String>,
}

impl AwsArgs {
    pub fn connection(&self) -> hetgen_deploy::Connection {
        hetgen_deploy::Connection {
            profile: self.profile.clone(),
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Use this TrainingJobName as it is, without a unique suffix
    #[arg(long)]
    pub name: Option<String>,
    /// Follow the job until it ends; exit 0 only if it completes
    #[arg(long)]
    pub wait: bool,
    /// Seconds between status polls with --wait
    #[arg(long, default_value_t = 30.0)]
    pub poll_interval: f64,
    /// Print the request instead of sending it
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub aws: AwsArgs,
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
    #[arg(long, requires = "local", conflicts_with = "cpus_from_catalog")]
    pub cpus_per_host: Option<usize>,
    /// Share this machine's cores out in proportion to the instance types' vCPUs
    #[arg(long, requires = "local")]
    pub cpus_from_catalog: bool,
    /// Stop the job after this many seconds (default: the spec's max runtime, if any)
    #[arg(long, requires = "local")]
    pub max_runtime: Option<f64>,
    /// Seconds between SIGTERM and SIGKILL when hosts are stopped
    #[arg(long, default_value_t = 10.0, requires = "local")]
    pub grace: f64,
    /// Run this launcher binary instead of building the rendered launcher crate
    #[arg(long, requires = "local")]
    pub launcher: Option<PathBuf>,
    /// Build the launcher with optimizations (slower build, faster pipeline)
    #[arg(long, requires = "local")]
    pub release: bool,
    /// Seed for the host-name shuffle and addresses (default: fresh per run)
    #[arg(long, requires = "local")]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The training job's name
    pub job: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// The training job's name
    pub job: String,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// How many recent jobs to look at
    #[arg(long, default_value_t = 50)]
    pub max: i32,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// vCPUs the pipeline needs to keep one GPU busy (from `hetgen profile` or a measurement)
    #[arg(long, conflicts_with = "profile")]
    pub cpu_per_gpu: Option<f64>,
    /// A profile written by `hetgen profile --gpu-samples-per-s`, for the vCPUs per GPU
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// vCPUs of the trainer host kept for its own work (the training loop, the runtime)
    #[arg(long, default_value_t = 0)]
    pub reserve_vcpus: u32,
    /// How many data-group options to show
    #[arg(long, default_value_t = 5)]
    pub options: usize,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// How long to run the pipeline
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Worker threads (default: the cores this process may use)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Samples per second one GPU trains at; gives the vCPUs needed per GPU
    #[arg(long)]
    pub gpu_samples_per_s: Option<f64>,
    /// Where to write the profile that `hetgen plan --profile` reads
    #[arg(long, default_value = "profile.json")]
    pub out: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The spec file (a job with data and trainer groups)
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Optimizer steps per run (default: the spec's step count, at most 200)
    #[arg(long)]
    pub steps: Option<u64>,
    /// Cores of the trainer host in both runs (default: half of this machine's)
    #[arg(long)]
    pub trainer_cores: Option<usize>,
    /// Where bench.json and bench.svg go (default: OUT/<job>/bench)
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Run this launcher binary instead of building the rendered launcher crate
    #[arg(long)]
    pub launcher: Option<PathBuf>,
    /// Build the launcher with optimizations
    #[arg(long)]
    pub release: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline spec (usually the homogeneous one)
    #[arg(long)]
    pub baseline: PathBuf,
    /// The baseline's measured mean step time, ms
    #[arg(long)]
    pub baseline_step_ms: f64,
    /// The candidate spec (usually the heterogeneous one)
    #[arg(long)]
    pub candidate: PathBuf,
    /// The candidate's measured mean step time, ms
    #[arg(long)]
    pub candidate_step_ms: f64,
    /// The baseline cluster's $/h, overriding the catalog
    #[arg(long)]
    pub baseline_price: Option<f64>,
    /// The candidate cluster's $/h, overriding the catalog
    #[arg(long)]
    pub candidate_price: Option<f64>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}
