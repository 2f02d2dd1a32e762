//! The Warning events the cluster keeps on a TrainJob and its JobSet, read while a job is
//! followed.
//!
//! When Kubeflow Trainer cannot create a TrainJob's JobSet, because JobSet's webhook refuses it
//! (a pod name over its limit, say) or the API server finds it invalid, Trainer records a
//! Warning event `TrainJobResourcesCreationFailed` on the TrainJob ("TrainJob resources
//! reconciliation failed: …", `pkg/controller/trainjob_controller.go`, v2.3.0), sets no
//! condition, and tries again with backoff, to be refused the same way each time. A follow that
//! read the conditions alone would say "Running" for ever; it reads these events too, shows
//! every Warning once, and ends on a refusal with its message. JobSet's own Warnings (a child
//! Job it cannot create) are on the JobSet, which has the TrainJob's name.

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};

use crate::{Cluster, KubeError, api};

/// A Warning event on the TrainJob or its JobSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// `TrainJob` or `JobSet`.
    pub kind: String,
    /// The event's reason, e.g. `TrainJobResourcesCreationFailed`.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// How often it happened (the API server counts repeats of one event).
    pub count: i32,
    /// The event object's own id, with `count`: what was shown already.
    id: String,
}

impl Warning {
    /// Whether it says the API server refused the controller's objects as they are: an
    /// admission webhook's denial, or a validation error (422 "… is invalid: …"). Retrying the
    /// same objects cannot help, so the job will never run.
    pub fn is_refusal(&self) -> bool {
        self.message.contains("denied the request") || self.message.contains(" is invalid: ")
    }

    /// What was shown already is the same event at the same count.
    pub(crate) fn key(&self) -> (String, i32) {
        (self.id.clone(), self.count)
    }

    /// `TrainJob TrainJobResourcesCreationFailed: TrainJob resources reconciliation failed: …`.
    pub fn describe(&self) -> String {
        format!("{} {}: {}", self.kind, self.reason, self.message)
    }
}

/// The Warning events on TrainJob `name` (the one of `uid`, not an earlier one of the same name
/// whose events the cluster still keeps) and on its JobSet, since `created`, oldest first.
pub(crate) async fn warnings(
    cluster: &Cluster,
    name: &str,
    uid: Option<&str>,
    created: Option<&Time>,
) -> Result<Vec<Warning>, KubeError> {
    let namespace = cluster.namespace(None);
    let events: Api<Event> = Api::namespaced(cluster.client.clone(), namespace);
    let params = ListParams::default().fields(&format!("type=Warning,involvedObject.name={name}"));
    let list = events
        .list(&params)
        .await
        .map_err(|e| api::events_of(namespace, name).error("list", e))?;
    let mut warnings: Vec<(Option<Time>, Warning)> = list
        .items
        .into_iter()
        .filter(|e| {
            let object = &e.involved_object;
            match object.kind.as_deref() {
                Some("TrainJob") => uid.is_none() || object.uid.as_deref() == uid,
                Some("JobSet") => true,
                _ => false,
            }
        })
        .map(|e| (last_seen(&e), e))
        .filter(|(at, _)| match (at, created) {
            (Some(at), Some(created)) => at.0 >= created.0,
            _ => true,
        })
        .map(|(at, e)| {
            let warning = Warning {
                kind: e.involved_object.kind.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default(),
                count: e.count.unwrap_or(1),
                id: e
                    .metadata
                    .uid
                    .clone()
                    .or(e.metadata.name.clone())
                    .unwrap_or_default(),
            };
            (at, warning)
        })
        .collect();
    warnings.sort_by(|a, b| a.0.as_ref().map(|t| t.0).cmp(&b.0.as_ref().map(|t| t.0)));
    Ok(warnings.into_iter().map(|(_, w)| w).collect())
}

/// When an event last happened: `lastTimestamp` (core/v1 recorders), else `eventTime`
/// (events.k8s.io/v1 recorders, whose series the core view does not count), else when the
/// event object was made.
fn last_seen(event: &Event) -> Option<Time> {
    event
        .last_timestamp
        .clone()
        .or_else(|| event.event_time.as_ref().map(|t| Time(t.0)))
        .or_else(|| event.metadata.creation_timestamp.clone())
}
