//! `hetgen bench`'s arguments.

use std::path::PathBuf;

use clap::Args;

use super::Format;
use super::value;

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
