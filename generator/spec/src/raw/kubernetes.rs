//! `[kubernetes]`, as the TOML says it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[kubernetes]`: how the job runs on Kubernetes, as a Kubeflow Trainer (v2) `TrainJob`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetes {
    /// The image every pod runs: built from the rendered Dockerfile and pushed where the
    /// cluster can pull it, e.g. `registry.example.com/digits:1`.
    pub image: String,
    /// The namespace of the job's objects. Default `"default"`.
    pub namespace: Option<String>,
    /// The PersistentVolumeClaim each channel is read from, by channel name; a channel's claim
    /// is mounted read-only where SageMaker would put its files (`/opt/ml/input/data/<name>`) on
    /// the pods of the groups that receive it. Default: `<job name>-<channel name>`. For an S3
    /// bucket, bind the claim to a volume of the Mountpoint for Amazon S3 CSI driver.
    pub claims: Option<BTreeMap<String, String>>,
    /// Environment variables for every pod.
    pub environment: Option<BTreeMap<String, String>>,
    /// Tolerations of every pod, beside the one hetgen gives the pods that ask for GPUs
    /// (`nvidia.com/gpu`, `NoSchedule`, as EKS and GKE taint GPU node groups): for node groups
    /// tainted otherwise, e.g. `[{ key = "dedicated", value = "ml", effect = "NoSchedule" }]`.
    pub tolerations: Option<Vec<crate::kube::Toleration>>,
    /// What each node keeps from the job's pods for the kubelet, the system and daemonsets.
    /// Default: one vCPU, and no memory request.
    pub reserve: Option<RawReserve>,
    /// Annotations of every pod, e.g. a service mesh injector's opt-out.
    pub pod_annotations: Option<BTreeMap<String, String>>,
    /// Labels of every pod, beside JobSet's and hetgen's. Every pod carries
    /// `sidecar.istio.io/inject = "false"` unless this sets it: a mesh's sidecar would keep the
    /// pods from ever completing.
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// A PersistentVolumeClaim (ReadWriteMany, or ReadWriteOnce on one trainer node) that keeps
    /// the trainer pods' `/opt/ml/model` and `/opt/ml/checkpoints`, as `<job>/model` and
    /// `<job>/checkpoints` on it, so the model outlives the pods. Default: none, the pods' own
    /// disk.
    pub output_claim: Option<String>,
}

/// `[kubernetes] reserve`: what a node keeps; a pod requests its instance type's resources
/// less this.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawReserve {
    /// vCPUs each node keeps (default 1; fractions allowed, e.g. 1.5): a pod requests its
    /// instance type's vCPUs less this.
    pub cpu: Option<f64>,
    /// GiB of memory each node keeps: a pod then requests its instance type's memory less this.
    /// Default: no memory request.
    pub memory_gib: Option<f64>,
}
