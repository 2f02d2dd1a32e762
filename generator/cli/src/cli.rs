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
    /// Print the JSON Schema of hetgen.toml
    Schema,
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
