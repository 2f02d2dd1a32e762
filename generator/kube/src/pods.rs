//! The pods a `TrainingRuntime` and its `TrainJob` become, as Kubeflow Trainer, JobSet, the Job
//! controller and the kubelet make them: what `hetgen deploy --local --engine kubeflow` runs.
//!
//! Taken from the objects as written (so a rendered file edited by hand runs as edited):
//! every replicatedJob's pods (`parallelism`, or the TrainJob's `numNodes` for `node`), their
//! names, labels, command, args, environment, volumes and dependencies. Added as the
//! controllers add them (Trainer v2.3.0, JobSet v0.12.0):
//!
//! - Trainer fills the `node` container from `spec.trainer` (image, command, args, and `env`
//!   upserted) and its torch plugin injects `PET_NNODES`, `PET_NPROC_PER_NODE` (`numProcPerNode`,
//!   else `auto`, or the CPU request when the node asks for no GPU), `PET_NODE_RANK` (the pod's
//!   index), `PET_MASTER_ADDR` (`<job>-node-0-0.<job>`) and `PET_MASTER_PORT` (29500);
//! - JobSet labels every pod with its JobSet and replicatedJob and names it
//!   `<jobset>-<replicatedJob>-<job index>-<pod index>`, resolvable as `<that>.<subdomain>`;
//! - the Job controller sets `JOB_COMPLETION_INDEX` and the completion-index annotation;
//! - the kubelet resolves `fieldRef` and `secretKeyRef` values and expands `$(VAR)` in values,
//!   command and args.

use std::collections::BTreeMap;

use hetgen_spec::kube::{
    ANCESTOR_LABEL, ANCESTOR_TRAINER, COMPLETION_INDEX_ANNOTATION, JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL, TRAINER_JOB,
};
use serde_json::Value;

mod trainer;

use trainer::{apply_trainer, inject_torch};

/// One pod, before the kubelet resolves its environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// `<jobset>-<replicatedJob>-0-<index>`.
    pub name: String,
    /// Its stable DNS name: `<name>.<subdomain>`.
    pub host: String,
    /// Its replicatedJob.
    pub replicated_job: String,
    /// Its index in the replicatedJob's Job.
    pub index: u32,
    /// The spec's group, from its replicatedJob's `hetgen.io/group` label (a label of the
    /// Job, which JobSet does not copy to the pods).
    pub group: Option<String>,
    /// Labels: the pod template's and JobSet's.
    pub labels: BTreeMap<String, String>,
    /// Annotations (the template's and the Job controller's).
    pub annotations: BTreeMap<String, String>,
    /// The namespace.
    pub namespace: String,
    /// The pod's one container (hetgen's pods have one; more are refused).
    pub container: Container,
    /// Volume name → the PersistentVolumeClaim it reads.
    pub claims: BTreeMap<String, String>,
    /// The replicatedJobs this one waits for, with the status it waits for.
    pub depends_on: Vec<(String, String)>,
}

/// A pod's container as the objects write it.
#[derive(Debug, Clone, PartialEq)]
pub struct Container {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// `command` (empty: the image's entry point).
    pub command: Vec<String>,
    /// `args`.
    pub args: Vec<String>,
    /// `env`, in order.
    pub env: Vec<EnvVar>,
    /// Its volume mounts.
    pub mounts: Vec<Mount>,
    /// The port of a gRPC readiness probe, if it has one.
    pub grpc_ready_port: Option<u16>,
}

/// One `volumeMounts` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// The volume's name.
    pub volume: String,
    /// Where the container sees it.
    pub path: String,
    /// The folder of the volume mounted there (`subPath`); empty: all of it.
    pub sub_path: String,
}

/// One `env` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvVar {
    /// The variable.
    pub name: String,
    /// Where its value comes from.
    pub source: EnvSource,
}

/// Where a variable's value comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum EnvSource {
    /// `value`.
    Value(String),
    /// `valueFrom.fieldRef.fieldPath`.
    Field(String),
    /// `valueFrom.secretKeyRef`.
    Secret {
        /// The Secret.
        name: String,
        /// Its key.
        key: String,
    },
}

/// Why the objects do not make pods.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{at}: {message}")]
pub struct PodsError {
    /// Where, as a field path (`TrainingRuntime spec.template…`).
    pub at: String,
    /// What is wrong.
    pub message: String,
}

fn err(at: impl Into<String>, message: impl Into<String>) -> PodsError {
    PodsError {
        at: at.into(),
        message: message.into(),
    }
}

/// The pods of `trainjob` run with `runtime`, replicatedJob by replicatedJob in the runtime's
/// order, each one's pods by index.
pub fn pods(runtime: &Value, trainjob: &Value) -> Result<Vec<Pod>, PodsError> {
    let jobset = JobSet::of(runtime, trainjob)?;
    let jobs = runtime
        .pointer("/spec/template/spec/replicatedJobs")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            err(
                "TrainingRuntime spec.template.spec.replicatedJobs",
                "missing",
            )
        })?;
    let mut pods = Vec::new();
    for (j, rjob) in jobs.iter().enumerate() {
        let job = ReplicatedJob::of(&jobset, j, rjob)?;
        pods.extend((0..job.count).map(|index| job.pod(&jobset, index)));
    }
    Ok(pods)
}

/// What the TrainingRuntime and the TrainJob say of the whole JobSet Trainer makes.
struct JobSet<'a> {
    /// The JobSet's name: the TrainJob's.
    name: String,
    namespace: String,
    /// Of every pod's DNS name (`network.subdomain`, else the JobSet's name).
    subdomain: String,
    /// The TrainJob's `spec.trainer`.
    trainer: Option<&'a Value>,
    /// The trainer's pods: `numNodes`, the TrainJob's else the runtime's.
    num_nodes: u32,
    /// Whether Trainer's torch plugin runs (`mlPolicy.torch`).
    torch: bool,
}

impl<'a> JobSet<'a> {
    fn of(runtime: &'a Value, trainjob: &'a Value) -> Result<JobSet<'a>, PodsError> {
        let name = text(trainjob, "/metadata/name", "TrainJob metadata.name")?;
        let referenced = text(
            trainjob,
            "/spec/runtimeRef/name",
            "TrainJob spec.runtimeRef",
        )?;
        let runtime_name = text(runtime, "/metadata/name", "TrainingRuntime metadata.name")?;
        if referenced != runtime_name {
            return Err(err(
                "TrainJob spec.runtimeRef.name",
                format!("names runtime `{referenced}`, but the runtime given is `{runtime_name}`"),
            ));
        }
        let spec = runtime
            .pointer("/spec/template/spec")
            .ok_or_else(|| err("TrainingRuntime spec.template.spec", "missing"))?;
        let trainer = trainjob.pointer("/spec/trainer");
        Ok(JobSet {
            namespace: trainjob
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned(),
            subdomain: spec
                .pointer("/network/subdomain")
                .and_then(Value::as_str)
                .unwrap_or(&name)
                .to_owned(),
            num_nodes: trainer
                .and_then(|t| t.get("numNodes"))
                .and_then(Value::as_u64)
                .or_else(|| {
                    runtime
                        .pointer("/spec/mlPolicy/numNodes")
                        .and_then(Value::as_u64)
                })
                .unwrap_or(1) as u32,
            torch: runtime.pointer("/spec/mlPolicy/torch").is_some(),
            trainer,
            name,
        })
    }
}

/// One replicatedJob, as every pod of its Job shares it.
struct ReplicatedJob<'a> {
    rjob: &'a Value,
    name: String,
    /// The spec's group, from the Job template's [`GROUP_LABEL`](crate::objects::GROUP_LABEL).
    group: Option<String>,
    /// Whether it is the job Trainer fills from the TrainJob (`node`).
    is_trainer: bool,
    /// Its pods: `parallelism`, or `numNodes` for the trainer's.
    count: u32,
    /// The container, with Trainer's part applied to the trainer's.
    container: Container,
    claims: BTreeMap<String, String>,
    depends_on: Vec<(String, String)>,
}

impl<'a> ReplicatedJob<'a> {
    /// Replicated job `j` of the runtime, `rjob`.
    fn of(jobset: &JobSet<'_>, j: usize, rjob: &'a Value) -> Result<ReplicatedJob<'a>, PodsError> {
        let at = format!("TrainingRuntime spec.template.spec.replicatedJobs[{j}]");
        let name = text(rjob, "/name", &format!("{at}.name"))?;
        let replicas = rjob.get("replicas").and_then(Value::as_u64).unwrap_or(1);
        if replicas != 1 {
            // Trainer v2.3.0 supports one replica per replicatedJob (its issue #2318).
            return Err(err(
                format!("{at}.replicas"),
                "Kubeflow Trainer runs one Job per replicatedJob",
            ));
        }
        let job_labels = string_map(rjob.pointer("/template/metadata/labels"));
        let is_trainer =
            job_labels.get(ANCESTOR_LABEL).map(String::as_str) == Some(ANCESTOR_TRAINER);
        let count = if is_trainer {
            jobset.num_nodes
        } else {
            rjob.pointer("/template/spec/parallelism")
                .and_then(Value::as_u64)
                .unwrap_or(1) as u32
        };
        let pod_spec = rjob
            .pointer("/template/spec/template/spec")
            .ok_or_else(|| err(format!("{at}.template.spec.template.spec"), "missing"))?;
        let mut container = only_container(pod_spec, &at)?;
        if is_trainer {
            if container.name != TRAINER_JOB {
                return Err(err(
                    format!("{at}…containers[0].name"),
                    format!("Kubeflow Trainer fills only a container named `{TRAINER_JOB}`"),
                ));
            }
            if let Some(trainer) = jobset.trainer {
                apply_trainer(&mut container, trainer)?;
            }
        }
        Ok(ReplicatedJob {
            rjob,
            group: job_labels.get(crate::objects::GROUP_LABEL).cloned(),
            is_trainer,
            count,
            container,
            claims: name_pairs(pod_spec.get("volumes"), "/persistentVolumeClaim/claimName"),
            depends_on: name_pairs(rjob.get("dependsOn"), "/status")
                .into_iter()
                .collect(),
            name,
        })
    }

    /// Its pod `index`, with what JobSet, the Job controller and Trainer's torch plugin add.
    fn pod(&self, jobset: &JobSet<'_>, index: u32) -> Pod {
        let pod_name = format!("{}-{}-0-{index}", jobset.name, self.name);
        let template = |part: &str| {
            string_map(
                self.rjob
                    .pointer(&format!("/template/spec/template/metadata/{part}")),
            )
        };
        let mut labels = template("labels");
        labels.insert(JOBSET_NAME_LABEL.to_owned(), jobset.name.clone());
        labels.insert(REPLICATED_JOB_LABEL.to_owned(), self.name.clone());
        labels.insert("jobset.sigs.k8s.io/job-index".to_owned(), "0".to_owned());
        labels.insert(COMPLETION_INDEX_ANNOTATION.to_owned(), index.to_string());
        let mut annotations = template("annotations");
        annotations.insert(COMPLETION_INDEX_ANNOTATION.to_owned(), index.to_string());
        let mut container = self.container.clone();
        if self.is_trainer && jobset.torch {
            inject_torch(
                &mut container,
                &jobset.name,
                jobset.num_nodes,
                jobset.trainer,
            );
        }
        // The Job controller's own variable on every pod of an Indexed Job.
        container.env.insert(
            0,
            EnvVar {
                name: "JOB_COMPLETION_INDEX".to_owned(),
                source: EnvSource::Field(format!(
                    "metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
                )),
            },
        );
        Pod {
            host: format!("{pod_name}.{}", jobset.subdomain),
            name: pod_name,
            replicated_job: self.name.clone(),
            group: self.group.clone(),
            index,
            labels,
            annotations,
            namespace: jobset.namespace.clone(),
            container,
            claims: self.claims.clone(),
            depends_on: self.depends_on.clone(),
        }
    }
}

/// The pod's one container (hetgen's pods have one; more are refused).
fn only_container(pod_spec: &Value, at: &str) -> Result<Container, PodsError> {
    let containers = pod_spec
        .get("containers")
        .and_then(Value::as_array)
        .ok_or_else(|| err(format!("{at}…containers"), "missing"))?;
    let [container] = containers.as_slice() else {
        return Err(err(
            format!("{at}…containers"),
            format!(
                "{} containers: a local run runs one per pod",
                containers.len()
            ),
        ));
    };
    parse_container(container, &format!("{at}…containers[0]"))
}

/// `(name, the string at pointer)` of each entry of the list `list` that has both (a pod's
/// claims by volume, a replicatedJob's `dependsOn` by job).
fn name_pairs(list: Option<&Value>, pointer: &str) -> BTreeMap<String, String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            Some((
                v.get("name")?.as_str()?.to_owned(),
                v.pointer(pointer)?.as_str()?.to_owned(),
            ))
        })
        .collect()
}

fn parse_container(c: &Value, at: &str) -> Result<Container, PodsError> {
    Ok(Container {
        name: text(c, "/name", &format!("{at}.name"))?,
        image: text(c, "/image", &format!("{at}.image"))?,
        command: match c.get("command") {
            Some(v) => strings(v, &format!("{at}.command"))?,
            None => Vec::new(),
        },
        args: match c.get("args") {
            Some(v) => strings(v, &format!("{at}.args"))?,
            None => Vec::new(),
        },
        env: match c.get("env") {
            Some(v) => parse_env(v, &format!("{at}.env"))?,
            None => Vec::new(),
        },
        mounts: c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(Mount {
                    volume: m.get("name")?.as_str()?.to_owned(),
                    path: m.get("mountPath")?.as_str()?.to_owned(),
                    sub_path: m
                        .get("subPath")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                })
            })
            .collect(),
        grpc_ready_port: c
            .pointer("/readinessProbe/grpc/port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok()),
    })
}

fn parse_env(env: &Value, at: &str) -> Result<Vec<EnvVar>, PodsError> {
    let list = env
        .as_array()
        .ok_or_else(|| err(at, "must be a list of variables"))?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            let at = format!("{at}[{i}]");
            let name = text(e, "/name", &format!("{at}.name"))?;
            let source = if let Some(v) = e.get("value") {
                EnvSource::Value(v.as_str().unwrap_or_default().to_owned())
            } else if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath") {
                EnvSource::Field(path.as_str().unwrap_or_default().to_owned())
            } else if let Some(secret) = e.pointer("/valueFrom/secretKeyRef") {
                EnvSource::Secret {
                    name: text(
                        secret,
                        "/name",
                        &format!("{at}.valueFrom.secretKeyRef.name"),
                    )?,
                    key: text(secret, "/key", &format!("{at}.valueFrom.secretKeyRef.key"))?,
                }
            } else if e.get("valueFrom").is_some() {
                return Err(err(
                    format!("{at}.valueFrom"),
                    "a local run resolves `fieldRef` and `secretKeyRef` only",
                ));
            } else {
                EnvSource::Value(String::new())
            };
            Ok(EnvVar { name, source })
        })
        .collect()
}

impl Pod {
    /// The container's environment as the kubelet sets it: each variable in order, `fieldRef`s
    /// from the pod's metadata, `secretKeyRef`s from `secrets` (`(secret, key)` → value), and
    /// `$(VAR)` in values expanded from the variables before it.
    pub fn environment(
        &self,
        secrets: &BTreeMap<(String, String), String>,
    ) -> Result<Vec<(String, String)>, PodsError> {
        let mut resolved: Vec<(String, String)> = Vec::new();
        for var in &self.container.env {
            let value = match &var.source {
                EnvSource::Value(v) => expand(v, &resolved),
                EnvSource::Field(path) => self.field(path).ok_or_else(|| {
                    err(
                        format!("pod {} env {}", self.name, var.name),
                        format!("fieldRef `{path}` names nothing the pod has"),
                    )
                })?,
                EnvSource::Secret { name, key } => secrets
                    .get(&(name.clone(), key.clone()))
                    .cloned()
                    .ok_or_else(|| {
                        err(
                            format!("pod {} env {}", self.name, var.name),
                            format!("no Secret `{name}` with key `{key}`"),
                        )
                    })?,
            };
            match resolved.iter_mut().find(|(k, _)| *k == var.name) {
                Some(slot) => slot.1 = value,
                None => resolved.push((var.name.clone(), value)),
            }
        }
        Ok(resolved)
    }

    /// `command` then `args`, `$(VAR)` expanded from `env` (the kubelet's rule).
    pub fn argv(&self, env: &[(String, String)]) -> Vec<String> {
        self.container
            .command
            .iter()
            .chain(&self.container.args)
            .map(|a| expand(a, env))
            .collect()
    }

    /// The downward API's fields a pod has.
    fn field(&self, path: &str) -> Option<String> {
        let keyed = |prefix: &str| {
            path.strip_prefix(prefix)?
                .strip_suffix("']")
                .map(str::to_owned)
        };
        match path {
            "metadata.name" => Some(self.name.clone()),
            "metadata.namespace" => Some(self.namespace.clone()),
            _ => {
                if let Some(key) = keyed("metadata.labels['") {
                    self.labels.get(&key).cloned()
                } else {
                    self.annotations
                        .get(&keyed("metadata.annotations['")?)
                        .cloned()
                }
            }
        }
    }
}

/// Kubernetes' `$(VAR)` expansion: a defined variable's value; an undefined reference stays as
/// written; `$$` is one `$`.
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
            && let Some((_, value)) = env.iter().rev().find(|(k, _)| *k == body[..end])
        {
            out.push_str(value);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn text(v: &Value, pointer: &str, at: &str) -> Result<String, PodsError> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| err(at, "missing or not a string"))
}

fn strings(v: &Value, at: &str) -> Result<Vec<String>, PodsError> {
    v.as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| err(at, "must be a list of strings"))
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_like_the_kubelet() {
        let env = vec![("A".to_owned(), "x".to_owned())];
        assert_eq!(expand("$(A)/$(B)/$$(A)/$", &env), "x/$(B)/$(A)/$");
    }
}
