//! `hetgen profile`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::Format;
use super::value;

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
