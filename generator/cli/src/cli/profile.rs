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
    #[arg(long, value_name = "RATE", conflicts_with = "trainer",
          value_parser = value::real(0.001, 1e9, "samples per second"))]
    pub gpu_samples_per_s: Option<f64>,
    /// Also time the job's own training script (one process under `torchrun`, on this
    /// machine's GPU, else its CPU) with `hetgen.Loader()` replaying batches from memory: the
    /// rate one GPU trains at when input costs nothing, and so the vCPUs it needs
    #[arg(long)]
    pub trainer: bool,
    /// With `--trainer`: steps to time after a warm-up of 20
    #[arg(long, value_name = "N", default_value = "100", requires = "trainer",
          value_parser = value::whole::<u64>(10, 1_000_000))]
    pub trainer_steps: u64,
    /// With `--trainer`: the most the script may run, in seconds
    #[arg(long, value_name = "SECONDS", default_value = "600", requires = "trainer",
          value_parser = value::seconds(1.0, 86_400.0))]
    pub trainer_timeout: Duration,
    /// The Python that runs a Python dataset's workers and the script (default: `HETGEN_PYTHON`,
    /// else the `python3` beside this `hetgen`, as pip installs them, else `python3` on `PATH`)
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Where to write the profile that `hetgen plan --profile` reads
    #[arg(long, default_value = "profile.json")]
    pub out: PathBuf,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}
