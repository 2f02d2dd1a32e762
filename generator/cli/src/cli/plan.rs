//! The arguments of `hetgen plan` and `hetgen compare`, and where plan's prices come from.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::Format;
use super::value;

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
