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
#[allow(
    clippy::too_many_lines,
    reason = "JobSet's and Trainer's pod building in one pass, in their order; to be split into per-job steps (open work: hetgen-kube owning only hetgen's part)"
)]
pub fn pods(runtime: &Value, trainjob: &Value) -> Result<Vec<Pod>, PodsError> {
    let job_name = text(trainjob, "/metadata/name", "TrainJob metadata.name")?;
    let namespace = trainjob
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
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
    let subdomain = spec
        .pointer("/network/subdomain")
        .and_then(Value::as_str)
        .unwrap_or(&job_name)
        .to_owned();
    let trainer = trainjob.pointer("/spec/trainer");
    let num_nodes = trainer
        .and_then(|t| t.get("numNodes"))
        .and_then(Value::as_u64)
        .or_else(|| {
            runtime
                .pointer("/spec/mlPolicy/numNodes")
                .and_then(Value::as_u64)
        })
        .unwrap_or(1) as u32;
    let torch = runtime.pointer("/spec/mlPolicy/torch").is_some();

    let jobs = spec
        .get("replicatedJobs")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            err(
                "TrainingRuntime spec.template.spec.replicatedJobs",
                "missing",
            )
        })?;
    let mut pods = Vec::new();
    for (j, rjob) in jobs.iter().enumerate() {
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
        let group = job_labels.get(crate::objects::GROUP_LABEL).cloned();
        let count = if is_trainer {
            num_nodes
        } else {
            rjob.pointer("/template/spec/parallelism")
                .and_then(Value::as_u64)
                .unwrap_or(1) as u32
        };
        let pod_spec = rjob
            .pointer("/template/spec/template/spec")
            .ok_or_else(|| err(format!("{at}.template.spec.template.spec"), "missing"))?;
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
        let mut container = parse_container(container, &format!("{at}…containers[0]"))?;
        if is_trainer {
            if container.name != TRAINER_JOB {
                return Err(err(
                    format!("{at}…containers[0].name"),
                    format!("Kubeflow Trainer fills only a container named `{TRAINER_JOB}`"),
                ));
            }
            if let Some(trainer) = trainer {
                apply_trainer(&mut container, trainer)?;
            }
        }
        let claims = pod_spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| {
                Some((
                    v.get("name")?.as_str()?.to_owned(),
                    v.pointer("/persistentVolumeClaim/claimName")?
                        .as_str()?
                        .to_owned(),
                ))
            })
            .collect();
        let depends_on = rjob
            .get("dependsOn")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some((
                    d.get("name")?.as_str()?.to_owned(),
                    d.get("status")?.as_str()?.to_owned(),
                ))
            })
            .collect::<Vec<_>>();
        for index in 0..count {
            let pod_name = format!("{job_name}-{name}-0-{index}");
            let mut labels = string_map(rjob.pointer("/template/spec/template/metadata/labels"));
            labels.insert(JOBSET_NAME_LABEL.to_owned(), job_name.clone());
            labels.insert(REPLICATED_JOB_LABEL.to_owned(), name.clone());
            labels.insert("jobset.sigs.k8s.io/job-index".to_owned(), "0".to_owned());
            labels.insert(COMPLETION_INDEX_ANNOTATION.to_owned(), index.to_string());
            let mut annotations =
                string_map(rjob.pointer("/template/spec/template/metadata/annotations"));
            annotations.insert(COMPLETION_INDEX_ANNOTATION.to_owned(), index.to_string());
            let mut container = container.clone();
            if is_trainer && torch {
                inject_torch(&mut container, &job_name, num_nodes, trainer);
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
            pods.push(Pod {
                host: format!("{pod_name}.{subdomain}"),
                name: pod_name,
                replicated_job: name.clone(),
                group: group.clone(),
                index,
                labels,
                annotations,
                namespace: namespace.clone(),
                container,
                claims: BTreeMap::clone(&claims),
                depends_on: depends_on.clone(),
            });
        }
    }
    Ok(pods)
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
