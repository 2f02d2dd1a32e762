//! The command line: `Cli` and its `Command`s, each command's arguments in a module named for
//! the command (`status`, `stop` and `list` share `jobs`, `plan` and `compare` share `plan`), the
//! flags several commands share in `aws` and `bundle` (`--wheel`), and the numeric flags'
//! parsers in `value`.

use clap::{Parser, Subcommand, ValueEnum};

mod aws;
mod bench;
mod bundle;
mod completions;
mod deploy;
mod jobs;
mod kube;
mod logs;
mod new;
mod plan;
mod profile;
mod render;
mod validate;
pub mod value;

pub use aws::AwsArgs;
pub use bench::BenchArgs;
pub use bundle::{BundleArgs, WheelArgs};
pub use completions::CompletionsArgs;
pub use deploy::DeployArgs;
pub use jobs::{ListArgs, StatusArgs, StopArgs};
pub use kube::{Engine, KubeArgs};
pub use logs::LogsArgs;
pub use new::{Example, NewArgs};
pub use plan::{CompareArgs, PlanArgs, Prices};
pub use profile::ProfileArgs;
pub use render::RenderArgs;
pub use validate::ValidateArgs;

/// Heterogeneous training clusters on Amazon SageMaker or Kubernetes (Kubeflow Trainer): GPU
/// instances train, CPU instances preprocess, in one job.
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
    /// Render the SageMaker request, SDK estimator, launcher crate, proto and Dockerfile, and
    /// with `[kubernetes]` the Kubeflow Trainer objects
    Render(RenderArgs),
    /// Create a new project with a commented hetgen.toml
    New(NewArgs),
    /// Submit the rendered job to SageMaker, or to Kubernetes with --engine kubeflow, or run it
    /// here with --local (run `hetgen render` first)
    Deploy(DeployArgs),
    /// Write the source bundle of a job on AWS's PyTorch image (`deploy` does it too)
    Bundle(BundleArgs),
    /// Show a training job's status (a TrainJob's, its pods and warnings, with --engine
    /// kubeflow)
    Status(StatusArgs),
    /// Stop a training job (every instance or pod gets SIGTERM)
    Stop(StopArgs),
    /// List recent training jobs that hetgen started
    List(ListArgs),
    /// Print a job's logs, every host's lines labelled (a SageMaker job, a TrainJob or a local
    /// run)
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

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    Human,
    /// For machines, on stdout.
    Json,
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
