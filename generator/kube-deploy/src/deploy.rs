//! Deploying a rendered job, and stopping it.
//!
//! Deploy, in order: make sure no TrainJob of the name exists (which also finds a cluster
//! without Trainer before anything is written), apply the token Secret, the TrainingRuntime
//! (replaced when what changed in it is immutable and no TrainJob runs it) and the TrainJob
//! with server-side apply, then make the TrainJob the Secret's owner, so that
//! deleting the TrainJob any way (`hetgen stop`, `kubectl delete`) deletes the token with it.
//! The Secret comes first because the pods read it as they start: a pod whose Secret is
//! missing waits in `CreateContainerConfigError` until the kubelet's next try.

use std::collections::BTreeMap;
use std::time::Duration;

use hetgen_kube::objects::MANAGED_BY;
use hetgen_spec::kube::{TOKEN_KEY, TRAINER_API_VERSION, token_secret};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, ValidationDirective};
use serde_json::json;

use crate::api::{self, FIELD_MANAGER};
use crate::{Cluster, KubeError, Rendered};

/// What a deploy needs besides the objects.
#[derive(Debug, Clone)]
pub struct DeployOptions {
    /// The job token the pods read from the Secret: fresh per deploy (`hetgen_env::job_token`),
    /// never rendered.
    pub token: String,
}

/// A deployed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    pub namespace: String,
    /// The TrainJob's name.
    pub name: String,
    /// The TrainJob's uid, as the API server assigned it.
    pub uid: String,
}

/// Deploys `rendered` (moved to `--namespace` if the cluster's connection names one).
pub async fn deploy(
    cluster: &Cluster,
    rendered: &Rendered,
    options: &DeployOptions,
) -> Result<Deployed, KubeError> {
    let namespace = cluster.namespace(rendered.namespace()).to_owned();
    let rendered = rendered.clone().in_namespace(&namespace);
    let name = rendered.name().to_owned();
    let client = &cluster.client;

    let jobs = api::train_jobs(client, &namespace);
    let job_target = api::train_job(&namespace, &name);
    match jobs.get(&name).await {
        Ok(_) => {
            return Err(KubeError::Exists {
                namespace,
                name: name.clone(),
            });
        }
        Err(e) if job_target.is_not_found(&e) => {}
        Err(e) => return Err(job_target.error("look up", e)),
    }

    let secret_name = token_secret(&name);
    let secret_target = api::secret(&namespace, &secret_name);
    let secrets = api::secrets(client, &namespace);
    // Forced: a Secret of this name left by an earlier deploy whose TrainJob is gone is stale,
    // and its token must be replaced whoever wrote it.
    let secret = token_secret_object(&namespace, &secret_name, &options.token);
    secrets
        .patch(&secret_name, &apply().force(), &Patch::Apply(&secret))
        .await
        .map_err(|e| secret_target.error("apply", e))?;

    let applied = apply_trainer_objects(cluster, &rendered, &namespace).await;
    let uid = match applied {
        Ok(uid) => uid,
        Err(e) => {
            // Nothing runs without the TrainJob: the token goes too. A failure to delete it is
            // not the error to report; the next deploy replaces it anyway.
            let _ = secrets.delete(&secret_name, &DeleteParams::default()).await;
            return Err(e);
        }
    };

    let owner = json!({
        "metadata": {
            "ownerReferences": [OwnerReference {
                api_version: TRAINER_API_VERSION.to_owned(),
                kind: "TrainJob".to_owned(),
                name: name.clone(),
                uid: uid.clone(),
                // Not `blockOwnerDeletion`: setting it needs update rights on the TrainJob's
                // finalizers, which a user who may create TrainJobs need not have.
                ..OwnerReference::default()
            }]
        }
    });
    secrets
        .patch(
            &secret_name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(&owner),
        )
        .await
        .map_err(|e| secret_target.error("set the owner of", e))?;

    Ok(Deployed {
        namespace,
        name,
        uid,
    })
}

/// Applies the TrainingRuntime, then the TrainJob that names it; the TrainJob's uid.
async fn apply_trainer_objects(
    cluster: &Cluster,
    rendered: &Rendered,
    namespace: &str,
) -> Result<String, KubeError> {
    let client = &cluster.client;
    apply_runtime(cluster, rendered, namespace).await?;
    let name = rendered.name();
    let jobs = api::train_jobs(client, namespace);
    let mut waits = RUNTIME_NOT_SEEN_WAITS.iter();
    let job = loop {
        match jobs
            .patch(name, &apply(), &Patch::Apply(rendered.train_job()))
            .await
        {
            Ok(job) => break job,
            Err(e) => match (runtime_not_seen(&e), waits.next()) {
                (true, Some(wait)) => tokio::time::sleep(*wait).await,
                _ => return Err(api::train_job(namespace, name).error("apply", e)),
            },
        }
    };
    job.metadata.uid.ok_or_else(|| KubeError::Api {
        verb: "apply",
        what: api::train_job(namespace, name).what(),
        message: "the API server returned it without a `metadata.uid`".to_owned(),
    })
}

/// Applies the TrainingRuntime. Trainer's CRD makes most of a runtime's JobSet template
/// immutable (`dependsOn`, `network`, the success, failure and startup policies: `self ==
/// oldSelf` rules), and a data group added, renamed or removed changes `node`'s `dependsOn`. So
/// over a live runtime the CRD's transition rules are asked first
/// ([`hetgen_kube::validate::refused_update`]); when they refuse the update, or the API server
/// does (a newer Trainer may make more immutable than the vendored CRD says), the runtime is
/// replaced instead.
async fn apply_runtime(
    cluster: &Cluster,
    rendered: &Rendered,
    namespace: &str,
) -> Result<(), KubeError> {
    let name = rendered.runtime_name();
    let target = api::runtime(namespace, name);
    let runtimes = api::runtimes(&cluster.client, namespace);
    let live = runtimes
        .get_opt(name)
        .await
        .map_err(|e| target.error("look up", e))?;
    if let Some(live) = live {
        let live = serde_json::to_value(&live).unwrap_or_default();
        let refused = hetgen_kube::validate::refused_update(rendered.runtime(), &live);
        if !refused.is_empty() {
            let changes = refused.iter().map(ToString::to_string).collect();
            return replace_runtime(cluster, rendered, namespace, changes).await;
        }
    }
    match runtimes
        .patch(name, &apply(), &Patch::Apply(rendered.runtime()))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_immutable(&e) => {
            let changes = vec![api_message(&e)];
            replace_runtime(cluster, rendered, namespace, changes).await
        }
        Err(e) => Err(target.error("apply", e)),
    }
}

/// Deletes the TrainingRuntime and applies it again, unless a TrainJob runs it (Trainer keeps
/// a runtime in use with a finalizer, and a TrainJob whose runtime changed under it would make
/// pods from a template it was not started with): then the deploy stops, naming them.
async fn replace_runtime(
    cluster: &Cluster,
    rendered: &Rendered,
    namespace: &str,
    changes: Vec<String>,
) -> Result<(), KubeError> {
    let name = rendered.runtime_name();
    let target = api::runtime(namespace, name);
    let runtimes = api::runtimes(&cluster.client, namespace);
    let train_jobs = running(cluster, namespace, name).await?;
    if !train_jobs.is_empty() {
        return Err(KubeError::RuntimeInUse {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            changes,
            train_jobs,
        });
    }
    match runtimes.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if target.is_not_found(&e) => {}
        Err(e) => return Err(target.error("delete", e)),
    }
    // Gone once the API server says so: a finalizer (Trainer's, while it still counts a
    // TrainJob that just ended) may hold it a moment.
    let mut waits = RUNTIME_GONE_WAITS.iter();
    while runtimes
        .get_opt(name)
        .await
        .map_err(|e| target.error("look up", e))?
        .is_some()
    {
        let Some(wait) = waits.next() else {
            return Err(KubeError::Api {
                verb: "replace",
                what: target.what(),
                message: "it is still being deleted after 15 s (a finalizer holds it: `kubectl get trainingruntime -o yaml` shows which)".to_owned(),
            });
        };
        tokio::time::sleep(*wait).await;
    }
    runtimes
        .patch(name, &apply(), &Patch::Apply(rendered.runtime()))
        .await
        .map_err(|e| target.error("apply", e))?;
    Ok(())
}

/// The TrainJobs in `namespace` that run the TrainingRuntime `runtime`.
async fn running(
    cluster: &Cluster,
    namespace: &str,
    runtime: &str,
) -> Result<Vec<String>, KubeError> {
    let jobs = api::train_jobs(&cluster.client, namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| api::train_jobs_in(namespace).error("list", e))?;
    Ok(jobs
        .items
        .into_iter()
        .filter(|job| {
            let reference = job.data.pointer("/spec/runtimeRef");
            let field = |f: &str| reference.and_then(|r| r.get(f)).and_then(|v| v.as_str());
            field("name") == Some(runtime)
                && field("kind").is_none_or(|kind| kind == "TrainingRuntime")
        })
        .filter_map(|job| job.metadata.name)
        .collect())
}

/// The waits for a deleted runtime to be gone: 15 s in all.
const RUNTIME_GONE_WAITS: [Duration; 6] = [
    Duration::from_millis(250),
    Duration::from_millis(750),
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(5),
    Duration::from_secs(5),
];

/// Whether `e` is the API server's refusal of an update that changes an immutable field (a
/// transition rule's "Value is immutable", 422 Invalid).
fn is_immutable(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 422
        && status.message.to_lowercase().contains("immutable"))
}

/// The API server's message of a refusal.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Trainer's TrainJob webhook looks the runtime up in its informer cache
/// (`TrainingRuntime.ValidateObjects`, pkg/runtime/core/trainingruntime.go, Trainer v2.3.0),
/// which may not yet have seen the runtime applied a moment before; it then refuses the
/// TrainJob with this. That refusal, and no other, is tried again after each of these waits
/// (7.75 s in all, far longer than an informer takes to catch up).
const RUNTIME_NOT_SEEN: &str =
    "specified trainingRuntime must be created before the TrainJob is created";
const RUNTIME_NOT_SEEN_WAITS: [Duration; 5] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Whether `e` is the webhook's refusal of a TrainJob whose runtime it has not seen yet.
fn runtime_not_seen(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if crate::error::is_webhook_denial(status)
        && status.message.contains(RUNTIME_NOT_SEEN))
}

/// Server-side apply as hetgen, unforced: a field another manager owns is a conflict to
/// report, not to take over. Strict: a field the installed Trainer does not know is an error,
/// not silently dropped (a render for another Trainer release).
fn apply() -> PatchParams {
    let mut params = PatchParams::apply(FIELD_MANAGER);
    params.field_validation = Some(ValidationDirective::Strict);
    params
}

/// The token Secret as applied: hetgen's label (the rendered objects' [`MANAGED_BY`]), the token
/// under [`TOKEN_KEY`].
fn token_secret_object(namespace: &str, name: &str, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                MANAGED_BY.0.to_owned(),
                MANAGED_BY.1.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            TOKEN_KEY.to_owned(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// What [`stop`] deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// The TrainJob was there and is being deleted (its pods get SIGTERM and their grace
    /// period).
    pub train_job: bool,
    /// The token Secret was still there and was deleted (a foreground delete of its owner may
    /// have taken it first).
    pub secret: bool,
}

/// Deletes the TrainJob `name` (foreground: the API server keeps it, marked for deletion,
/// until its JobSet and pods are gone) and its token Secret. The TrainingRuntime stays: it is
/// the rendered template, applied again by the next deploy.
pub async fn stop(cluster: &Cluster, name: &str) -> Result<Stopped, KubeError> {
    let namespace = cluster.namespace(None);
    let client = &cluster.client;
    let target = api::train_job(namespace, name);
    let train_job = match api::train_jobs(client, namespace)
        .delete(name, &DeleteParams::foreground())
        .await
    {
        Ok(_) => true,
        Err(e) if target.is_not_found(&e) => false,
        Err(e) => return Err(target.error("delete", e)),
    };
    let secret_name = token_secret(name);
    let secret_target = api::secret(namespace, &secret_name);
    let secret = match api::secrets(client, namespace)
        .delete(&secret_name, &DeleteParams::default())
        .await
    {
        Ok(_) => true,
        Err(e) if secret_target.is_not_found(&e) => false,
        Err(e) => return Err(secret_target.error("delete", e)),
    };
    if !train_job && !secret {
        return Err(KubeError::NotFound {
            kind: "TrainJob",
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(Stopped { train_job, secret })
}
