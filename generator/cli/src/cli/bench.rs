//! `hetgen bench`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::value;
use super::{Format, WheelArgs};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The spec file (a job with data and trainer groups)
    #[arg(default_value = "hetgen.toml")]
    pub spec: PathBuf,
    /// Folder `hetgen render` wrote to
    #[arg(long, default_value = "build")]
    pub out: PathBuf,
    /// Optimizer steps per run of the built-in trainer (default: the spec's step count, at most
    /// 200); a script runs its own length (its arguments and the job's hyperparameters)
    #[arg(long, value_name = "N", value_parser = value::whole::<u64>(1, 10_000_000))]
    pub steps: Option<u64>,
    /// Cores of the trainer hosts in every run (default: half of this machine's)
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
    /// A profile from `hetgen profile`: print and record beside each configuration's measured
    /// samples/s and stall the ones its rates predict for it
    #[arg(long, value_name = "PATH")]
    pub profile: Option<PathBuf>,
    #[command(flatten)]
    pub wheel: WheelArgs,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}
