//! # hetgen-deploy
//!
//! Talks to Amazon SageMaker (and the AWS Price List API for its prices): submits the rendered `create-training-job.json`, describes,
//! stops and lists jobs, and follows a job and its logs to its end. The only crate that builds the AWS SDK.
//!
//! - [`Aws`]: clients from the default credential chain, a profile, a region and an optional
//!   endpoint (emulators, VPC endpoints).
//! - [`request`]: the rendered JSON request turned into the SDK's call.
//! - [`jobs`]: submit, describe, stop, list, and a job's tags.
//! - [`upload`]: a job's source bundle to S3 (jobs on AWS's PyTorch image).
//! - [`logs`]: a job's CloudWatch logs, every host's stream, followed exactly once.
//! - [`pricing`]: current on-demand training prices from the AWS Price List API, their cache,
//!   and what stands in when the API cannot be read.
//! - [`DeployError`]: what went wrong, in words a user can act on.

mod connect;
mod error;
pub mod jobs;
pub mod logs;
pub mod pricing;
pub mod request;
mod suffix;
pub mod upload;

pub use aws_sdk_sagemaker::Client as SageMakerClient;
pub use connect::{Aws, Connection};
pub use error::DeployError;
pub use hetgen_spec::model::{JOB_TAG, VERSION_TAG};
pub use jobs::JobStatus;
pub use suffix::unique_name;
