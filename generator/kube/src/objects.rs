//! The job as Kubeflow Trainer objects: a `TrainingRuntime` (its template a JobSet with one
//! replicatedJob per instance group) and the `TrainJob` that runs it.
//!
//! - Each data group is a replicatedJob of its own: an Indexed Job of `count` pods on nodes of
//!   its instance type, each serving the data port with a gRPC readiness probe on it.
//! - The trainer group is the `node` replicatedJob Trainer fills from the TrainJob; it
//!   `dependsOn` every data group being `Ready`, so no trainer starts before every data server
//!   answers. The JobSet succeeds when `node` does (`successPolicy`); the data servers end on
//!   their own once the trainers tell them training is over, as on SageMaker.
//! - Any pod's failure fails the job (`failurePolicy.maxRestarts: 0`, `backoffLimit: 0`), as
//!   one host's failure fails a SageMaker job.
//! - Every pod runs hetgen's launcher, which picks its role from its group; the variables that
//!   tell it which job, group and pod it is, and the token (from the job's Secret), are
//!   `hetgen_spec::kube`'s.

use std::collections::BTreeMap;

use hetgen_env::TOKEN_VAR;
use hetgen_spec::Job;
use hetgen_spec::catalog::Catalog;
use hetgen_spec::data_port::data_port_in;
use hetgen_spec::kube::{
    self, ANCESTOR_LABEL, ANCESTOR_TRAINER, COMPLETION_INDEX_ANNOTATION, INSTANCE_TYPE_LABEL,
    JOBSET_NAME_LABEL, KubeGroup, TRAINER_API_VERSION, TRAINER_JOB,
};
use hetgen_spec::model::{Group, Kubernetes, Role, Trainer};
use serde_json::{Value, json};

/// Istio's label that opts a pod in or out of sidecar injection.
pub const ISTIO_INJECT: &str = "sidecar.istio.io/inject";

/// NVIDIA's device plugin's resource, and the taint key of GPU node groups.
const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The folder the objects are written to, inside the job's render folder.
pub const DIR: &str = "kubeflow";
/// The `TrainingRuntime`'s file.
pub const RUNTIME_FILE: &str = "kubeflow/trainingruntime.yaml";
/// The `TrainJob`'s file.
pub const TRAINJOB_FILE: &str = "kubeflow/trainjob.yaml";
/// The label on the replicatedJob templates (and so on their pods) naming the spec's group.
pub const GROUP_LABEL: &str = "hetgen.io/group";
/// The label hetgen puts on what it makes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "hetgen");

/// The two objects of a job with a `[kubernetes]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct Objects {
    /// The `TrainingRuntime`.
    pub runtime: Value,
    /// The `TrainJob`.
    pub trainjob: Value,
}

impl Objects {
    /// The files `hetgen render` writes: `(path in the render folder, YAML)`.
    pub fn files(&self) -> [(&'static str, String); 2] {
        [
            (RUNTIME_FILE, crate::emit::to_yaml(&self.runtime)),
            (TRAINJOB_FILE, crate::emit::to_yaml(&self.trainjob)),
        ]
    }
}

/// The objects of `job`, when it has a `[kubernetes]` section.
pub fn objects(job: &Job) -> Option<Objects> {
    let k = job.kubernetes.as_ref()?;
    let groups = kube_groups(job);
    let groups_json = serde_json::to_string(&groups).expect("groups serialize");
    let trainer = job.trainer_group();
    let data: Vec<&Group> = job.data_groups().collect();

    let mut replicated_jobs: Vec<Value> = data
        .iter()
        .map(|g| data_job(job, k, g, &groups_json))
        .collect();
    replicated_jobs.push(trainer_job(job, k, trainer, &data, &groups_json));

    let labels = json!({ MANAGED_BY.0: MANAGED_BY.1, "trainer.kubeflow.org/framework": "torch" });
    let runtime = json!({
        "apiVersion": TRAINER_API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": { "name": job.name, "namespace": k.namespace, "labels": labels },
        "spec": {
            "mlPolicy": { "numNodes": trainer.count, "torch": {} },
            "template": { "spec": {
                "network": { "enableDNSHostnames": true },
                "successPolicy": { "operator": "All", "targetReplicatedJobs": [TRAINER_JOB] },
                "failurePolicy": { "maxRestarts": 0 },
                "replicatedJobs": replicated_jobs,
            }},
        },
    });

    let mut spec_trainer = json!({
        "image": k.image,
        "command": [kube::IMAGE_LAUNCHER],
        "args": kube::LAUNCHER_ARGS,
        "numNodes": trainer.count,
        "resourcesPerNode": resources(k, trainer),
    });
    if let Trainer::Script(script) = &job.trainer {
        spec_trainer["numProcPerNode"] = json!(script.processes_per_host);
    }
    if !k.environment.is_empty() {
        spec_trainer["env"] = Value::Array(user_env(k));
    }
    let trainjob = json!({
        "apiVersion": TRAINER_API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": job.name,
            "namespace": k.namespace,
            "labels": { MANAGED_BY.0: MANAGED_BY.1 },
        },
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
                "name": job.name,
            },
            "trainer": spec_trainer,
        },
    });
    Some(Objects { runtime, trainjob })
}

/// Every group as the pods see it ([`kube::GROUPS_VAR`]).
pub fn kube_groups(job: &Job) -> Vec<KubeGroup> {
    job.groups
        .iter()
        .map(|g| KubeGroup {
            name: g.name.clone(),
            replicated_job: kube::replicated_job(&g.name, g.role == Role::Trainer),
            count: g.count,
            instance_type: g.instance_type.clone(),
            channels: channels_of(job, g).into_iter().cloned().collect(),
        })
        .collect()
}

fn data_job(job: &Job, k: &Kubernetes, group: &Group, groups_json: &str) -> Value {
    let name = kube::replicated_job(&group.name, false);
    let mut container = container(job, k, group, &name, groups_json);
    // The port the server listens on, which `[kubernetes] environment` may set: the same rule
    // as the server's and the trainers' own.
    let port = data_port_in(k.environment.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    container["ports"] = json!([{ "name": "hetgen-data", "containerPort": port }]);
    // kubelet's gRPC probe calls grpc.health.v1.Health/Check, which the data server answers
    // without the job token: `Ready` means this server accepts trainers.
    container["readinessProbe"] = json!({
        "grpc": { "port": port },
        "periodSeconds": 2,
        "failureThreshold": 3,
    });
    container["env"]
        .as_array_mut()
        .expect("env is a list")
        .extend(user_env(k));
    json!({
        "name": name,
        "replicas": 1,
        "template": {
            "metadata": { "labels": { GROUP_LABEL: group.name } },
            "spec": indexed_job(k, group.count, pod_spec(job, k, group, container)),
        },
    })
}

fn trainer_job(
    job: &Job,
    k: &Kubernetes,
    group: &Group,
    data: &[&Group],
    groups_json: &str,
) -> Value {
    let container = container(job, k, group, TRAINER_JOB, groups_json);
    let mut spec = json!({
        "name": TRAINER_JOB,
        "template": {
            "metadata": { "labels": {
                GROUP_LABEL: group.name,
                ANCESTOR_LABEL: ANCESTOR_TRAINER,
            }},
            // Trainer sets parallelism and completions from the TrainJob's numNodes.
            "spec": indexed_job(k, group.count, pod_spec(job, k, group, container)),
        },
    });
    if !data.is_empty() {
        spec["dependsOn"] = data
            .iter()
            .map(|g| json!({ "name": kube::replicated_job(&g.name, false), "status": "Ready" }))
            .collect();
    }
    spec
}

fn indexed_job(k: &Kubernetes, count: u32, pod: Value) -> Value {
    // A service mesh's sidecar that is not a native one (Istio's, injected on a Kubeflow
    // platform install) outlives the pod's container, and the pod, its Job and the TrainJob
    // never complete; the pods talk to each other and to no mesh service. So no sidecar, unless
    // the spec's labels say otherwise.
    let mut labels = BTreeMap::from([(ISTIO_INJECT.to_owned(), "false".to_owned())]);
    labels.extend(k.pod_labels.clone());
    let mut template = json!({ "spec": pod, "metadata": { "labels": labels } });
    if !k.pod_annotations.is_empty() {
        template["metadata"]["annotations"] = json!(k.pod_annotations);
    }
    json!({
        "parallelism": count,
        "completions": count,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": template,
    })
}

fn pod_spec(job: &Job, k: &Kubernetes, group: &Group, container: Value) -> Value {
    let channels = channels_of(job, group);
    let mut pod = json!({
        "restartPolicy": "Never",
        "nodeSelector": { INSTANCE_TYPE_LABEL: kube::node_instance_type(&group.instance_type) },
        "containers": [container],
    });
    // GPU node groups are tainted so that only pods that want GPUs land there (EKS and GKE GPU
    // pools: `nvidia.com/gpu`, `NoSchedule`, any value); without the toleration a trainer pod
    // that asks for GPUs stays Pending. It allows those nodes, it does not pick them: the
    // node selector and the GPU limit do.
    let mut tolerations = Vec::new();
    if group.gpus.is_some_and(|g| g > 0) {
        tolerations
            .push(json!({ "key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule" }));
    }
    tolerations.extend(k.tolerations.iter().map(|t| json!(t)));
    if !tolerations.is_empty() {
        pod["tolerations"] = Value::Array(tolerations);
    }
    let mut volumes: Vec<Value> = channels
        .iter()
        .map(|c| {
            json!({
                "name": volume_name(c),
                "persistentVolumeClaim": { "claimName": k.claims[*c], "readOnly": true },
            })
        })
        .collect();
    if let Some(claim) = outputs(k, group) {
        volumes.push(
            json!({ "name": OUTPUT_VOLUME, "persistentVolumeClaim": { "claimName": claim } }),
        );
    }
    if !volumes.is_empty() {
        pod["volumes"] = Value::Array(volumes);
    }
    pod
}

/// The volume of `[kubernetes] output_claim` on the trainer pods.
const OUTPUT_VOLUME: &str = "outputs";

/// The claim that keeps `group`'s outputs: the trainer group's, when the spec names one.
fn outputs<'a>(k: &'a Kubernetes, group: &Group) -> Option<&'a str> {
    k.output_claim
        .as_deref()
        .filter(|_| group.role == Role::Trainer)
}

fn container(job: &Job, k: &Kubernetes, group: &Group, name: &str, groups_json: &str) -> Value {
    let field = |path: String| json!({ "fieldRef": { "fieldPath": path } });
    let env = json!([
        { "name": kube::GROUPS_VAR, "value": groups_json },
        { "name": kube::GROUP_VAR, "value": group.name },
        { "name": kube::JOBSET_VAR,
          "valueFrom": field(format!("metadata.labels['{JOBSET_NAME_LABEL}']")) },
        { "name": kube::INDEX_VAR,
          "valueFrom": field(format!("metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']")) },
        { "name": TOKEN_VAR, "valueFrom": { "secretKeyRef": {
            "name": kube::token_secret(&job.name), "key": kube::TOKEN_KEY } } },
    ]);
    let mut container = json!({
        "name": name,
        "image": k.image,
        "command": [kube::IMAGE_LAUNCHER],
        "args": kube::LAUNCHER_ARGS,
        "env": env,
        "resources": resources(k, group),
    });
    let mut mounts: Vec<Value> = channels_of(job, group)
        .iter()
        .map(|c| json!({ "name": volume_name(c), "mountPath": kube::channel_mount(c), "readOnly": true }))
        .collect();
    // The job's folders on the claim, one run after another in the same place: the model of
    // the job's last run is at `<job>/model`.
    if outputs(k, group).is_some() {
        mounts.extend(kube::OUTPUT_FOLDERS.iter().map(|folder| {
            json!({
                "name": OUTPUT_VOLUME,
                "mountPath": format!("/opt/ml/{folder}"),
                "subPath": format!("{}/{folder}", job.name),
            })
        }));
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = Value::Array(mounts);
    }
    container
}

/// A pod requests its instance type's vCPUs (and, with a memory reserve, its memory) less what
/// the node keeps for the kubelet, the system and daemonsets (`[kubernetes] reserve`, one vCPU
/// by default: a node's allocatable CPU is less than its vCPUs, so a request for all of them
/// would never be scheduled); a trainer asks for its instance type's GPUs.
fn resources(k: &Kubernetes, group: &Group) -> Value {
    let mut resources = json!({});
    if let Some(vcpus) = group.vcpus {
        // The spec check keeps the reserve below every group's vCPUs; at least a tenth of one.
        let millis = (vcpus * 1000).saturating_sub(k.reserve_millicpu).max(100);
        let cpu = if millis % 1000 == 0 {
            (millis / 1000).to_string()
        } else {
            format!("{millis}m")
        };
        resources["requests"] = json!({ "cpu": cpu });
    }
    let memory = Catalog::builtin()
        .get(&group.instance_type)
        .map(|t| (t.memory_gib * 1024.0) as u64);
    if let (Some(reserve), Some(mib)) = (k.reserve_memory_mib, memory) {
        resources["requests"]["memory"] =
            json!(format!("{}Mi", mib.saturating_sub(reserve).max(64)));
    }
    if let Some(gpus) = group.gpus.filter(|g| *g > 0) {
        resources["limits"] = json!({ GPU_RESOURCE: gpus.to_string() });
    }
    resources
}

fn channels_of<'a>(job: &'a Job, group: &Group) -> Vec<&'a String> {
    job.channels
        .iter()
        .filter(|c| c.reaches(&group.name))
        .map(|c| &c.name)
        .collect()
}

/// A channel's volume: its name as a DNS label.
fn volume_name(channel: &str) -> String {
    format!(
        "channel-{}",
        channel.to_ascii_lowercase().replace(['_', '.'], "-")
    )
}

fn user_env(k: &Kubernetes) -> Vec<Value> {
    k.environment
        .iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect()
}
