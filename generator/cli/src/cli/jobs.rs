//! The arguments of `hetgen status`, `stop` and `list`: jobs by name, SageMaker's or (with
//! `--engine kubeflow`) TrainJobs.

use clap::Args;

use super::value;
use super::{AwsArgs, Engine, Format, KubeArgs};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The training job's name (with --engine kubeflow, the TrainJob's)
    pub job: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Where the job runs
    #[arg(long, value_enum, default_value_t = Engine::Sagemaker)]
    pub engine: Engine,
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// The training job's name (with --engine kubeflow, the TrainJob's)
    pub job: String,
    /// Where the job runs
    #[arg(long, value_enum, default_value_t = Engine::Sagemaker)]
    pub engine: Engine,
    #[command(flatten)]
    pub aws: AwsArgs,
    #[command(flatten)]
    pub kube: KubeArgs,
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
