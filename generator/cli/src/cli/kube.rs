//! `--engine` and how the commands that talk to Kubernetes reach the cluster.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// Where a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Engine {
    /// Amazon SageMaker
    #[default]
    Sagemaker,
    /// Kubeflow Trainer (v2) on Kubernetes: the objects `hetgen render` writes for a spec with a
    /// `[kubernetes]` section
    Kubeflow,
}

/// How to reach the cluster. Unset options fall back to what `kubectl` uses: `KUBECONFIG`, else
/// `~/.kube/config`, else the pod's service account inside a cluster.
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// With --engine kubeflow: this kubeconfig file
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// With --engine kubeflow: this kubeconfig context instead of the current one
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// With --engine kubeflow: this namespace (default: the rendered objects' for deploy, the
    /// context's for the others)
    #[arg(long, short = 'n', value_name = "NAME")]
    pub namespace: Option<String>,
}

impl KubeArgs {
    pub fn connection(&self) -> hetgen_kube_deploy::Connection {
        hetgen_kube_deploy::Connection {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: self.namespace.clone(),
        }
    }
}
