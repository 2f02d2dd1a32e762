//! `hetgen logs`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::value;
use super::{AwsArgs, Engine, Format, KubeArgs};

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
    /// Where the job runs (a local run's folder is found whatever this says)
    #[arg(long, value_enum, default_value_t = Engine::Sagemaker)]
    pub engine: Engine,
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
    #[command(flatten)]
    pub kube: KubeArgs,
}
