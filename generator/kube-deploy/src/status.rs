//! A TrainJob's state, from its status conditions as Kubeflow Trainer v2.3.0 sets them.
//!
//! Trainer sets three condition types on a TrainJob (`trainjob_types.go`): `Suspended`, and the
//! two terminal ones, `Complete` and `Failed`, copied from its JobSet's `Completed` and
//! `Failed` conditions with their reason and message (JobSet's `AllJobsCompleted`,
//! `FailedJobs`, `ReachedMaxRestarts`, …; Trainer's own `DeadlineExceeded` and
//! `TrainingRuntimeNotSupported`). A TrainJob with none of them true is running, or waiting
//! for its pods to be scheduled.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use serde::Deserialize;

use crate::events::{self, Warning};
use crate::pods::{JobPods, PodState};
use crate::{Cluster, Groups, KubeError, api};

/// A TrainJob's condition types (Trainer v2.3.0).
pub mod condition {
    pub const COMPLETE: &str = "Complete";
    pub const FAILED: &str = "Failed";
    pub const SUSPENDED: &str = "Suspended";
}

/// Where a TrainJob is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// No terminal condition yet: its pods are being made, scheduled or are running.
    Running,
    /// Suspended (by a queue such as Kueue, or `spec.suspend`); the reason says by whom.
    Suspended { reason: String },
    /// `Complete` is true.
    Complete { message: String },
    /// `Failed` is true.
    Failed { reason: String, message: String },
}

impl Phase {
    /// `Complete` or `Failed`: it will not change again.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Phase::Complete { .. } | Phase::Failed { .. })
    }

    /// One word, as the condition's type (`Running` for none).
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Running => "Running",
            Phase::Suspended { .. } => condition::SUSPENDED,
            Phase::Complete { .. } => condition::COMPLETE,
            Phase::Failed { .. } => condition::FAILED,
        }
    }
}

/// One `metav1.Condition`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub last_transition_time: String,
}

/// A TrainJob as hetgen follows it.
#[derive(Debug, Clone)]
pub struct TrainJobState {
    pub phase: Phase,
    pub conditions: Vec<Condition>,
    /// The TrainingRuntime it runs (`spec.runtimeRef.name`).
    pub runtime: String,
    /// Its `metadata.uid`: this TrainJob, not an earlier one of the same name.
    pub uid: Option<String>,
    /// When it was created.
    pub created: Option<Time>,
}

impl TrainJobState {
    /// The state of a TrainJob as the API server returned it.
    pub fn of(object: &DynamicObject) -> TrainJobState {
        let conditions: Vec<Condition> = object
            .data
            .pointer("/status/conditions")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        let runtime = object
            .data
            .pointer("/spec/runtimeRef/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_owned();
        TrainJobState {
            phase: phase(&conditions),
            conditions,
            runtime,
            uid: object.metadata.uid.clone(),
            created: object.metadata.creation_timestamp.clone(),
        }
    }
}

/// The phase the conditions say; `Failed` wins over `Complete` should both be true.
pub fn phase(conditions: &[Condition]) -> Phase {
    let holds = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    if let Some(c) = holds(condition::FAILED) {
        Phase::Failed {
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    } else if let Some(c) = holds(condition::COMPLETE) {
        Phase::Complete {
            message: c.message.clone(),
        }
    } else if let Some(c) = holds(condition::SUSPENDED) {
        Phase::Suspended {
            reason: c.reason.clone(),
        }
    } else {
        Phase::Running
    }
}

/// The TrainJob `name`'s state.
pub async fn state(cluster: &Cluster, name: &str) -> Result<TrainJobState, KubeError> {
    let namespace = cluster.namespace(None);
    let object = api::train_jobs(&cluster.client, namespace)
        .get(name)
        .await
        .map_err(|e| api::train_job(namespace, name).error("get", e))?;
    Ok(TrainJobState::of(&object))
}

/// The groups of the TrainJob's pods, from the TrainingRuntime it runs. A runtime that is gone
/// or unreadable leaves the groups unknown, which only makes the labels shorter.
pub async fn groups(cluster: &Cluster, state: &TrainJobState) -> Groups {
    let namespace = cluster.namespace(None);
    match api::runtimes(&cluster.client, namespace)
        .get(&state.runtime)
        .await
    {
        Ok(runtime) => Groups::of_runtime(&serde_json::to_value(&runtime).unwrap_or_default()),
        Err(_) => Groups::default(),
    }
}

/// A TrainJob at one moment, as `hetgen status --engine kubeflow` shows it.
#[derive(Debug, Clone)]
pub struct JobStatus {
    pub state: TrainJobState,
    /// Its pods, with their groups.
    pub pods: Vec<PodState>,
    /// The Warning events on it and its JobSet.
    pub warnings: Vec<Warning>,
}

/// The TrainJob `name`, its pods and its Warning events.
pub async fn status(cluster: &Cluster, name: &str) -> Result<JobStatus, KubeError> {
    let state = state(cluster, name).await?;
    let groups = groups(cluster, &state).await;
    let pods = JobPods::new(cluster, name, groups, None)
        .poll(false)
        .await?
        .pods;
    let warnings =
        events::warnings(cluster, name, state.uid.as_deref(), state.created.as_ref()).await?;
    Ok(JobStatus {
        state,
        pods,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: format!("{reason} message"),
            ..Condition::default()
        }
    }

    #[test]
    fn the_phase_follows_the_true_conditions() {
        assert_eq!(phase(&[]), Phase::Running);
        assert_eq!(phase(&[c("Suspended", "False", "Resumed")]), Phase::Running);
        assert_eq!(
            phase(&[c("Suspended", "True", "Suspended")]),
            Phase::Suspended {
                reason: "Suspended".to_owned()
            }
        );
        assert_eq!(
            phase(&[c("Complete", "True", "AllJobsCompleted")]),
            Phase::Complete {
                message: "AllJobsCompleted message".to_owned()
            }
        );
        let failed = phase(&[
            c("Complete", "True", "AllJobsCompleted"),
            c("Failed", "True", "FailedJobs"),
        ]);
        assert_eq!(failed.name(), "Failed");
        assert!(failed.is_terminal());
        assert!(!Phase::Running.is_terminal());
    }
}
