//! The resources hetgen touches, as kube `Api`s, and the [`Target`]s that name them in errors.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use crate::error::Target;

/// Kubeflow Trainer's API group and version (`hetgen_spec::kube::TRAINER_API_VERSION`).
const GROUP: &str = "trainer.kubeflow.org";
const VERSION: &str = "v1alpha1";

/// The field manager of every change hetgen makes, so `kubectl get --show-managed-fields`
/// says which fields are hetgen's and a second deploy updates them without conflict.
pub const FIELD_MANAGER: &str = "hetgen";

/// `TrainJob` and `TrainingRuntime`, which are CRDs: no typed bindings, the objects are
/// applied as rendered.
pub(crate) fn trainer(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

pub(crate) fn train_jobs(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &trainer("TrainJob", "trainjobs"))
}

pub(crate) fn runtimes(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        namespace,
        &trainer("TrainingRuntime", "trainingruntimes"),
    )
}

pub(crate) fn secrets(client: &kube::Client, namespace: &str) -> Api<Secret> {
    Api::namespaced(client.clone(), namespace)
}

pub(crate) fn pods(client: &kube::Client, namespace: &str) -> Api<Pod> {
    Api::namespaced(client.clone(), namespace)
}

pub(crate) fn train_job<'a>(namespace: &'a str, name: &'a str) -> Target<'a> {
    Target {
        kind: "TrainJob",
        resource: "trainjobs.trainer.kubeflow.org",
        namespace,
        name,
    }
}

pub(crate) fn runtime<'a>(namespace: &'a str, name: &'a str) -> Target<'a> {
    Target {
        kind: "TrainingRuntime",
        resource: "trainingruntimes.trainer.kubeflow.org",
        namespace,
        name,
    }
}

/// The job's token Secret (`hetgen_spec::kube::token_secret`).
pub(crate) fn secret<'a>(namespace: &'a str, name: &'a str) -> Target<'a> {
    Target {
        kind: "Secret",
        resource: "secrets",
        namespace,
        name,
    }
}

pub(crate) fn pod<'a>(namespace: &'a str, name: &'a str) -> Target<'a> {
    Target {
        kind: "Pod",
        resource: "pods",
        namespace,
        name,
    }
}

/// A job's pods, as one list call sees them.
pub(crate) fn pods_of<'a>(namespace: &'a str, job: &'a str) -> Target<'a> {
    Target {
        kind: "the pods of TrainJob",
        resource: "pods",
        namespace,
        name: job,
    }
}

/// The events of a job's TrainJob and JobSet, as one list call sees them.
pub(crate) fn events_of<'a>(namespace: &'a str, job: &'a str) -> Target<'a> {
    Target {
        kind: "the events of TrainJob",
        resource: "events",
        namespace,
        name: job,
    }
}

/// A namespace's TrainJobs, as one list call sees them.
pub(crate) fn train_jobs_in(namespace: &str) -> Target<'_> {
    Target {
        kind: "the TrainJobs of namespace",
        resource: "trainjobs.trainer.kubeflow.org",
        namespace,
        name: namespace,
    }
}
