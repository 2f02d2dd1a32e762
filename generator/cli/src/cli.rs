//! The command line.

use std::path::PathBuf;
use std::time::Duration;

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
    /// Write the source bundle of a job on AWS's PyTorch image (`deploy` does it too)
    Bundle(BundleArgs),
    /// Show a training job's status
    Status(StatusArgs),
    /// Stop a training job (SageMaker sends SIGTERM to every instance)
    Stop(StopArgs),
    /// List recent training jobs that hetgen started
    List(ListArgs),
    /// Print a job's logs, every host's lines labelled (a SageMaker job or a local run)
    Logs(LogsArgs),
    /// Size the cluster: vCPU:GPU ratio, GPU cap, and every way to lift it (a bigger trainer with
    /// the same GPUs, data groups, or both) by $ per busy GPU-hour
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
pub struct BundleArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to; the bundle goes to OUT/<job>/sourcedir(.tar.gz)
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    #[command(flatten)]
    pub wheel: WheelArgs,
}

/// Which hetgen wheel a source bundle ships.
#[derive(Debug, Args)]
pub struct WheelArgs {
    /// The hetgen wheel to ship (default: `HETGEN_WHEEL`, else the one `make wheel` built
    /// beside this hetgen)
    #[arg(long, value_name = "PATH")]
    pub wheel: Option<PathBuf>,
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
    /// Your own PyTorch DDP script (train.py) on 2 GPU hosts fed by 2 CPU hosts, digits data
    /// included; runs locally
    Pytorch,
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
pub struct LogsArgs {
    /// A SageMaker training job's name, or a local run's job folder (or its name, under OUT)
    pub job: String,
    /// Keep printing new lines until the job ends (Ctrl-C stops following, not the job)
    #[arg(long, short)]
    pub follow: bool,
    /// Only this host's lines (repeatable)
    #[arg(long, value_name = "HOST")]
    pub host: Vec<String>,
    /// Only this instance group's lines (repeatable)
    #[arg(long, value_name = "GROUP")]
    pub group: Vec<String>,
    /// Only lines from this long ago (`10m`, `2h`) or since this time (RFC 3339, UTC)
    #[arg(long, value_name = "AGE|TIME", value_parser = value::since)]
    pub since: Option<std::time::SystemTime>,
    /// Output format: `json` is one object per line
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Folder `hetgen render` wrote to, where local runs are looked for by name
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Seconds between polls with --follow
    #[arg(long, value_name = "SECONDS", default_value = "5",
          value_parser = value::seconds(0.01, 3600.0))]
    pub poll_interval: Duration,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// How many recent jobs to look at
    #[arg(long, value_name = "N", default_value = "50", value_parser = value::whole::<i32>(1, 100))]
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
    #[arg(long, value_name = "VCPUS", conflicts_with = "profile",
          value_parser = value::real(0.0, 10_000.0, "a number of vCPUs"))]
    pub cpu_per_gpu: Option<f64>,
    /// A profile written by `hetgen profile --gpu-samples-per-s`, for the vCPUs per GPU
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// How many data groups to try beside the trainer as written (one, the cheapest, beside
    /// each bigger trainer type)
    #[arg(long, value_name = "N", default_value = "5", value_parser = value::whole::<usize>(0, 100))]
    pub options: usize,
    /// Where prices come from: hetgen's committed catalog, or the AWS Price List API (needs
    /// AWS credentials; read at most once a day per region, then cached)
    #[arg(long, value_enum, default_value_t = Prices::Catalog)]
    pub prices: Prices,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// With `--prices aws`: a named profile from the AWS config files (`--profile` names a
    /// `hetgen profile` file here)
    #[arg(long)]
    pub aws_profile: Option<String>,
    /// With `--prices aws`: the region to price (default: the spec's `[sagemaker] region`, else
    /// `AWS_REGION`, else the catalog's)
    #[arg(long)]
    pub region: Option<String>,
    /// With `--prices aws`: send Price List requests here instead of AWS's endpoint
    #[arg(long)]
    pub endpoint_url: Option<String>,
}

impl PlanArgs {
    pub fn connection(&self) -> hetgen_deploy::Connection {
        hetgen_deploy::Connection {
            profile: self.aws_profile.clone(),
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
        }
    }
}

/// Where `hetgen plan` takes prices from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Prices {
    /// hetgen's catalog as committed: each price with its source and month
    Catalog,
    /// Current on-demand prices from the AWS Price List API, for the spec's region
    Aws,
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The spec file
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// How long to run the pipeline, in seconds
    #[arg(long, value_name = "SECONDS", default_value = "10",
          value_parser = value::seconds(0.1, 86_400.0))]
    pub seconds: Duration,
    /// Worker threads (default: the cores this process may use)
    #[arg(long, value_name = "N", value_parser = value::whole::<usize>(1, value::MAX_CORES))]
    pub threads: Option<usize>,
    /// Samples per second one GPU trains at; gives the vCPUs needed per GPU
    #[arg(long, value_name = "RATE",
          value_parser = value::real(0.001, 1e9, "samples per second"))]
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
    #[arg(long, value_name = "N", value_parser = value::whole::<u64>(1, 10_000_000))]
    pub steps: Option<u64>,
    /// Cores of the trainer host in both runs (default: half of this machine's)
    #[arg(long, value_name = "N", value_parser = value::whole::<usize>(1, value::MAX_CORES))]
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
    /// Run no model: the trainer takes its batches and drops them, so each configuration
    /// measures what its input alone delivers (as on a GPU host, whose CPU the model barely uses)
    #[arg(long)]
    pub input_only: bool,
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
    #[arg(long, value_name = "MS", value_parser = step_ms())]
    pub baseline_step_ms: f64,
    /// The candidate spec (usually the heterogeneous one)
    #[arg(long)]
    pub candidate: PathBuf,
    /// The candidate's measured mean step time, ms
    #[arg(long, value_name = "MS", value_parser = step_ms())]
    pub candidate_step_ms: f64,
    /// The baseline cluster's $/h, overriding the catalog
    #[arg(long, value_name = "USD", value_parser = price())]
    pub baseline_price: Option<f64>,
    /// The candidate cluster's $/h, overriding the catalog
    #[arg(long, value_name = "USD", value_parser = price())]
    pub candidate_price: Option<f64>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

/// A measured mean step time: at least a microsecond, at most a day.
fn step_ms() -> impl value::Parser<f64> {
    value::real(0.001, 86_400_000.0, "milliseconds")
}

/// A cluster's price: at least a hundredth of a cent an hour, at most a million dollars.
fn price() -> impl value::Parser<f64> {
    value::real(0.0001, 1_000_000.0, "US dollars per hour")
}

/// Typed parsers for the numeric flags. Each refuses anything but a finite number in its range
/// (`inf`, `nan`, `1e400`, `2^64`, negatives, garbage), so a bad value is a usage error (exit 2)
/// that names the flag and the range, raised before any work starts or any request is sent.
pub mod value {
    use std::time::Duration;

    /// The largest `--max-runtime`: SageMaker's own limit on a training job (28 days).
    pub const MAX_RUNTIME_S: f64 = 28.0 * 86_400.0;
    /// The most cores a CPU set can name (Linux's `CPU_SETSIZE`).
    pub const MAX_CORES: u64 = 1024;

    /// A parser of one flag's values, as clap's `value_parser` takes it.
    pub trait Parser<T>: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {}
    impl<T, F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static> Parser<T> for F {}

    /// A real number in `min ..= high`, described as `what` in the error. Each flag's `min` is
    /// the smallest value that means something for it, not merely "more than 0".
    pub fn real(min: f64, high: f64, what: &'static str) -> impl Parser<f64> {
        move |text: &str| {
            let expected = || format!("expected {what} from {min} to {high}");
            // `f64::from_str` takes `inf`, `nan` and `1e400` (as infinity): refuse them by range;
            // and `1e-320`, a subnormal that passes "≥ 0" and then divides into nonsense.
            let x: f64 = text.trim().parse().map_err(|_| expected())?;
            if x != 0.0 && !x.is_normal() {
                return Err(expected());
            }
            if x.is_finite() && x >= min && x <= high {
                Ok(x)
            } else {
                Err(expected())
            }
        }
    }

    /// A number of seconds (decimals allowed) in `min ..= high`.
    pub fn seconds(min: f64, high: f64) -> impl Parser<Duration> {
        let parse = real(min, high, "a number of seconds");
        move |text: &str| parse(text).map(Duration::from_secs_f64)
    }

    /// `--since`: an age (`90s`, `10m`, `2h`, `1day`) before now, or an RFC 3339 time.
    pub fn since(text: &str) -> Result<std::time::SystemTime, String> {
        let text = text.trim();
        if let Ok(time) = humantime::parse_rfc3339_weak(text) {
            return Ok(time);
        }
        let age = humantime::parse_duration(text).map_err(|_| {
            "expected an age such as `10m` or `2h`, or a time such as `2026-12-04T14:00:00Z`"
                .to_owned()
        })?;
        std::time::SystemTime::now()
            .checked_sub(age)
            .filter(|t| *t >= std::time::UNIX_EPOCH)
            .ok_or_else(|| format!("`{text}` ago is before 1970"))
    }

    /// A whole number in `low ..= high`.
    pub fn whole<T>(low: u64, high: u64) -> impl Parser<T>
    where
        T: TryFrom<u64>,
    {
        move |text: &str| {
            let expected = || format!("expected a whole number from {low} to {high}");
            let n: u64 = text.trim().parse().map_err(|_| expected())?;
            if (low..=high).contains(&n) {
                T::try_from(n).map_err(|_| expected())
            } else {
                Err(expected())
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn reals_in_range_pass_and_everything_else_is_refused() {
            let p = real(0.01, 10.0, "a price");
            assert_eq!(p("2.5"), Ok(2.5));
            assert_eq!(p("10"), Ok(10.0));
            for bad in [
                "0", "-5", "10.5", "inf", "-inf", "nan", "NaN", "1e400", "1e-320", "x", "",
            ] {
                let err = p(bad).unwrap_err();
                assert_eq!(err, "expected a price from 0.01 to 10", "{bad}");
            }
            let s = seconds(0.0, 3600.0);
            assert_eq!(s("0"), Ok(Duration::ZERO));
            assert_eq!(s("1.5"), Ok(Duration::from_millis(1500)));
            // Zero is a value; a subnormal is not a meaningful one.
            assert!(s("5e-324").is_err());
            assert!(s("3600.001").is_err());
        }

        #[test]
        fn whole_numbers_in_range_pass_and_everything_else_is_refused() {
            let p = whole::<usize>(1, MAX_CORES);
            assert_eq!(p("1"), Ok(1));
            assert_eq!(p("1024"), Ok(1024));
            for bad in [
                "0",
                "1025",
                "-1",
                "1.5",
                "18446744073709551616",
                "2^64",
                "inf",
                "",
            ] {
                assert_eq!(
                    p(bad).unwrap_err(),
                    "expected a whole number from 1 to 1024",
                    "{bad}"
                );
            }
            let i = whole::<i32>(1, 100);
            assert_eq!(i("100"), Ok(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::Duration;

    use clap::error::ErrorKind;
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// The value names numeric flags use; `tests/cli` finds them in `--help` by these.
    const NUMERIC_VALUE_NAMES: [&str; 6] = ["SECONDS", "N", "VCPUS", "RATE", "MS", "USD"];

    /// Values no numeric flag may take.
    const BAD: [&str; 10] = [
        "inf",
        "-inf",
        "nan",
        "-5",
        "1e400",
        "18446744073709551616",
        "2^64",
        "99999999999999999999999",
        "garbage",
        "",
    ];

    /// `(subcommand, long flag, value name)` of every flag whose values are numbers, found by
    /// walking the command tree, so a flag added later is covered without being listed.
    fn numeric_flags() -> Vec<(String, String, String)> {
        let numeric = [
            TypeId::of::<f64>(),
            TypeId::of::<u64>(),
            TypeId::of::<u32>(),
            TypeId::of::<usize>(),
            TypeId::of::<i32>(),
            TypeId::of::<i64>(),
            TypeId::of::<u16>(),
            TypeId::of::<Duration>(),
        ];
        let mut out = Vec::new();
        for sub in Cli::command().get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_value_parser().type_id();
                if !numeric.iter().any(|t| id == *t) {
                    continue;
                }
                let long = arg.get_long().expect("numeric arguments are flags");
                let name = arg
                    .get_value_names()
                    .and_then(|n| n.first())
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                out.push((sub.get_name().to_owned(), long.to_owned(), name));
            }
        }
        out
    }

    #[test]
    fn every_numeric_flag_refuses_values_out_of_its_range_as_a_usage_error() {
        let flags = numeric_flags();
        // The flags issue reports named; the walk must find at least these.
        for (sub, long) in [
            ("deploy", "poll-interval"),
            ("deploy", "max-runtime"),
            ("deploy", "grace"),
            ("deploy", "cpus-per-host"),
            ("deploy", "seed"),
            ("list", "max"),
            ("plan", "cpu-per-gpu"),
            ("plan", "options"),
            ("compare", "baseline-step-ms"),
            ("compare", "candidate-price"),
            ("profile", "seconds"),
            ("profile", "threads"),
            ("profile", "gpu-samples-per-s"),
            ("bench", "steps"),
            ("bench", "trainer-cores"),
        ] {
            assert!(
                flags.iter().any(|(s, l, _)| s == sub && l == long),
                "{sub} --{long} not found among {flags:?}"
            );
        }
        for (sub, long, value_name) in &flags {
            assert!(
                NUMERIC_VALUE_NAMES.contains(&value_name.as_str()),
                "{sub} --{long} <{value_name}>: give it one of {NUMERIC_VALUE_NAMES:?}"
            );
            for bad in BAD {
                let argv = ["hetgen", sub, &format!("--{long}={bad}")];
                let parsed = catch_unwind(AssertUnwindSafe(|| Cli::try_parse_from(argv)))
                    .unwrap_or_else(|_| panic!("{sub} --{long}={bad} panicked"));
                let err = parsed.expect_err(&format!("{sub} --{long}={bad} was accepted"));
                let text = err.render().to_string();
                assert_eq!(err.kind(), ErrorKind::ValueValidation, "{text}");
                assert_eq!(err.exit_code(), 2, "{text}");
                assert!(text.contains(&format!("--{long}")), "{text}");
                assert!(
                    text.contains("expected ")
                        && (text.contains(" to ") || text.contains(", at most ")),
                    "the range is named: {text}"
                );
            }
        }
    }

    #[test]
    fn numeric_flags_take_values_in_range() {
        let cli = Cli::try_parse_from([
            "hetgen",
            "deploy",
            "--local",
            "--max-runtime",
            "1.5",
            "--grace=0",
            "--cpus-per-host=2",
            "--seed=18446744073709551615",
            "--poll-interval=0.05",
        ])
        .unwrap();
        let super::Command::Deploy(args) = cli.command else {
            panic!("not deploy")
        };
        assert_eq!(args.local.max_runtime, Some(Duration::from_millis(1500)));
        assert_eq!(args.local.grace, Duration::ZERO);
        assert_eq!(args.local.cpus_per_host, Some(2));
        assert_eq!(args.local.seed, Some(u64::MAX));
        assert_eq!(args.poll_interval, Duration::from_millis(50));
    }
}
