//! `--engine`: which of the spec's targets a command acts on.

use clap::ValueEnum;

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Amazon SageMaker (`[sagemaker]`)
    Sagemaker,
    /// Kubeflow Trainer on Kubernetes (`[kubernetes]`)
    Kubeflow,
}
