//! The contract between a job rendered for Kubeflow Trainer and the runtime in its pods.
//!
//! `hetgen render --engine kubeflow` writes a `TrainingRuntime` whose template is a JobSet with
//! one replicatedJob per instance group, and a `TrainJob` that runs it. Kubeflow Trainer (v2)
//! turns the two into a JobSet; JobSet names every pod `<jobset>-<replicatedJob>-<job
//! index>-<pod index>` and, with DNS hostnames on, gives it the stable name
//! `<that>.<subdomain>` (the subdomain is the JobSet's name, which is the TrainJob's). Those
//! names are the job's hosts, as `algo-N` are on SageMaker.
//!
//! A pod learns which job and which host it is from the variables named here, which the
//! rendered objects set (the JobSet's name and the pod's index through the downward API, the
//! job token from a Secret); `hetgen_env` turns them into the same `ResourceConfig` SageMaker
//! writes, so everything downstream runs unchanged. The renderer, the local twin
//! (`hetgen deploy --local --engine kubeflow`) and the runtime all take the names from here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Kubeflow Trainer's API group and version, as the pinned release (v2.3.0) serves them.
pub const TRAINER_API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";

/// The replicatedJob Kubeflow Trainer fills from the TrainJob's `spec.trainer`: its name and
/// the name of its container must both be `node` (Trainer's `constants.Node`), and its
/// template carries [`ANCESTOR_LABEL`]`: trainer`.
pub const TRAINER_JOB: &str = "node";
/// Marks the replicatedJob a TrainJob's `spec.trainer` applies to.
pub const ANCESTOR_LABEL: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
/// [`ANCESTOR_LABEL`]'s value on the trainer's replicatedJob.
pub const ANCESTOR_TRAINER: &str = "trainer";
/// JobSet's label on every pod: the JobSet's name (the TrainJob's).
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// JobSet's label on every pod: its replicatedJob.
pub const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// The Job controller's annotation on every pod of an Indexed Job: the pod's index.
pub const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// The label Kubernetes puts on every node: its cloud instance type (`c5.xlarge` on EKS).
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// `torchrun`'s rendezvous port as Trainer's torch plugin sets it (`PET_MASTER_PORT`).
pub const TRAINER_PORT: u16 = 29500;
/// What Trainer's torch plugin injects into the `node` container; `torchrun` reads each as the
/// default of its flag (`--nnodes`, `--nproc-per-node`, `--node-rank`, `--master-addr`,
/// `--master-port`).
pub const PET_NNODES: &str = "PET_NNODES";
/// See [`PET_NNODES`].
pub const PET_NPROC_PER_NODE: &str = "PET_NPROC_PER_NODE";
/// See [`PET_NNODES`].
pub const PET_NODE_RANK: &str = "PET_NODE_RANK";
/// See [`PET_NNODES`].
pub const PET_MASTER_ADDR: &str = "PET_MASTER_ADDR";
/// See [`PET_NNODES`].
pub const PET_MASTER_PORT: &str = "PET_MASTER_PORT";

/// Every group of the job, as JSON ([`KubeGroup`] list); the same value in every pod.
pub const GROUPS_VAR: &str = "HETGEN_KUBE_GROUPS";
/// The pod's own group (spec name).
pub const GROUP_VAR: &str = "HETGEN_KUBE_GROUP";
/// The JobSet's name, from the pod's [`JOBSET_NAME_LABEL`] label (downward API).
pub const JOBSET_VAR: &str = "HETGEN_KUBE_JOBSET";
/// The pod's index in its group, from [`COMPLETION_INDEX_ANNOTATION`] (downward API).
pub const INDEX_VAR: &str = "HETGEN_KUBE_INDEX";
/// The launcher in hetgen's images (the rendered Dockerfile's `ENTRYPOINT`): every pod's
/// command, with [`LAUNCHER_ARGS`].
pub const IMAGE_LAUNCHER: &str = "/usr/local/bin/launcher";
/// The launcher's arguments, as SageMaker starts a container (`docker run IMAGE train`).
pub const LAUNCHER_ARGS: [&str; 1] = ["train"];
/// Where a channel's volume is mounted: SageMaker's layout, which the runtime reads.
pub fn channel_mount(channel: &str) -> String {
    format!("/opt/ml/input/data/{channel}")
}

/// The key of the job token in the job's Secret ([`token_secret`]).
pub const TOKEN_KEY: &str = "token";

/// One instance group as the pods see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeGroup {
    /// The spec's group name.
    pub name: String,
    /// Its replicatedJob ([`replicated_job`]).
    pub replicated_job: String,
    /// Pods (hosts) in it.
    pub count: u32,
    /// The spec's `ml.*` instance type.
    pub instance_type: String,
    /// Channels mounted in its pods.
    #[serde(default)]
    pub channels: Vec<String>,
}

/// The replicatedJob of a group: [`TRAINER_JOB`] for the trainer group, else the group's name
/// as a DNS label (lower case, `_` as `-`).
pub fn replicated_job(group: &str, trainer: bool) -> String {
    if trainer {
        TRAINER_JOB.to_owned()
    } else {
        group.to_ascii_lowercase().replace('_', "-")
    }
}

/// The stable DNS name of pod `index` of `replicated_job` in JobSet `jobset` (JobSet's
/// `<jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>`; one Job per replicatedJob,
/// subdomain the JobSet's name).
pub fn pod_host(jobset: &str, replicated_job: &str, index: u32) -> String {
    format!("{jobset}-{replicated_job}-0-{index}.{jobset}")
}

/// The Secret that holds a job's token under [`TOKEN_KEY`].
pub fn token_secret(job: &str) -> String {
    format!("{job}-hetgen-token")
}

/// The node label value of an `ml.*` instance type: `ml.c5.xlarge` runs on `c5.xlarge` nodes.
pub fn node_instance_type(ml_type: &str) -> &str {
    ml_type.strip_prefix("ml.").unwrap_or(ml_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_jobset_and_trainer() {
        assert_eq!(replicated_job("data_group", false), "data-group");
        assert_eq!(replicated_job("dnn_group", true), "node");
        assert_eq!(
            pod_host("digits", "data-group", 1),
            "digits-data-group-0-1.digits"
        );
        assert_eq!(node_instance_type("ml.c5.xlarge"), "c5.xlarge");
    }
}

/// A toleration of every pod of the job (`[kubernetes] tolerations`), written as a pod spec
/// writes it, so that it reads the same in the spec and in the rendered objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    /// The taint's key. None, with `operator = "Exists"`, tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `"Equal"` (the default: the taint's value is `value`) or `"Exists"` (any value).
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The taint's value, with `operator = "Equal"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The taint's effect: `"NoSchedule"`, `"PreferNoSchedule"` or `"NoExecute"`. None
    /// tolerates every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// How a [`Toleration`] matches a taint's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TolerationOperator {
    /// The taint's value must be the toleration's.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// What a taint keeps off a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// New pods are not scheduled there.
    NoSchedule,
    /// New pods are scheduled there only when nothing else fits.
    PreferNoSchedule,
    /// Pods already there are evicted too.
    NoExecute,
}

/// The folders a trainer pod keeps on `[kubernetes] output_claim`, each mounted where the
/// script finds it (`/opt/ml/<folder>`) from the claim's `<job>/<folder>`.
pub const OUTPUT_FOLDERS: [&str; 2] = ["model", "checkpoints"];

/// Label and annotation prefixes the objects' controllers own: a spec must not set keys under
/// them on the pods.
pub const CONTROLLER_PREFIXES: [&str; 4] = [
    "hetgen.io/",
    "jobset.sigs.k8s.io/",
    "batch.kubernetes.io/",
    "trainer.kubeflow.org/",
];
