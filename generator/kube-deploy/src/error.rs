//! Why a call to the cluster failed, in words that name the object and say what to do.
//!
//! Every API call goes through [`Target::error`], the one place an API server's answer becomes
//! a [`KubeError`]: the API server explains a refusal in a `Status` object (`reason`, `code`,
//! `details.causes`), except for a path it serves nothing at, which it answers with a plain-text
//! `404 page not found`: that is how a resource type whose CRD is not installed looks.

use std::path::PathBuf;

use kube::core::Status;

/// A failed deploy, stop or read of a job on Kubernetes.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum KubeError {
    /// The rendered files are missing, or hold what the API server would refuse: every problem
    /// at its file, line and column.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Load(#[from] hetgen_kube::LoadError),
    /// A rendered object with a `generateName` but no name, which server-side apply needs.
    #[error("the {kind} in `{}` has no `metadata.name`", path.display())]
    #[diagnostic(
        code("hetgen::kube::unnamed"),
        help("name it under `metadata`, or run `hetgen render` to write it from the spec again")
    )]
    Unnamed { path: PathBuf, kind: &'static str },
    /// No kubeconfig and not inside a cluster, or a kubeconfig that cannot be used.
    #[error("no usable Kubernetes configuration: {why}")]
    #[diagnostic(
        code("hetgen::kube::config"),
        help(
            "point `KUBECONFIG` (or `--kubeconfig`) at a kubeconfig, choose one of its contexts with `--context`, or run inside a cluster with a service account"
        )
    )]
    Config { why: String },
    /// The API server could not be reached, or the connection failed.
    #[error("cannot reach the Kubernetes API server to {verb} {what}: {why}")]
    #[diagnostic(
        code("hetgen::kube::unreachable"),
        help(
            "check the cluster's address in the kubeconfig and that it is up (`kubectl cluster-info`)"
        )
    )]
    Unreachable {
        verb: &'static str,
        what: String,
        why: String,
    },
    /// The cluster serves no Kubeflow Trainer resources.
    #[error("Kubeflow Trainer is not installed in this cluster: it serves no `{resource}`")]
    #[diagnostic(
        code("hetgen::kube::no-trainer"),
        help(
            "install Kubeflow Trainer v2.3 (its manifests, `kubectl apply --server-side -k \"github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0\"`), or choose a cluster that has it with `--context`"
        )
    )]
    TrainerMissing { resource: String },
    /// A TrainJob of the job's name is already there.
    #[error("TrainJob `{name}` already exists in namespace `{namespace}`")]
    #[diagnostic(
        code("hetgen::kube::exists"),
        help(
            "a job's name is its TrainJob's: stop and delete the earlier one with `hetgen stop --engine kubeflow {name}`, or rename the job in the spec"
        )
    )]
    Exists { namespace: String, name: String },
    /// The live TrainingRuntime differs in what cannot change, and a TrainJob still runs it, so
    /// it cannot be replaced.
    #[error(
        "TrainingRuntime `{name}` in namespace `{namespace}` cannot be updated ({}) and TrainJob{} {} still run{} it, so it cannot be replaced",
        changes.join("; "),
        if train_jobs.len() == 1 { "" } else { "s" },
        train_jobs.iter().map(|j| format!("`{j}`")).collect::<Vec<_>>().join(", "),
        if train_jobs.len() == 1 { "s" } else { "" }
    )]
    #[diagnostic(
        code("hetgen::kube::runtime-in-use"),
        help(
            "the runtime's JobSet template (`dependsOn`, network, the success, failure and startup policies) is immutable, and changes when a data group is added, renamed or removed: let those TrainJobs finish or stop them (`hetgen stop --engine kubeflow JOB`), then deploy again"
        )
    )]
    RuntimeInUse {
        namespace: String,
        name: String,
        changes: Vec<String>,
        train_jobs: Vec<String>,
    },
    /// The object is not there.
    #[error("{kind} `{name}` not found in namespace `{namespace}`")]
    #[diagnostic(
        code("hetgen::kube::not-found"),
        help(
            "check the name and the namespace (`--namespace`); `kubectl get trainjobs -A` lists them"
        )
    )]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// The credentials were not accepted.
    #[error("the API server did not accept the credentials to {verb} {what}: {message}")]
    #[diagnostic(
        code("hetgen::kube::unauthorized"),
        help(
            "log in to the cluster again (an expired token is the usual cause), or check `--context`"
        )
    )]
    Unauthorized {
        verb: &'static str,
        what: String,
        message: String,
    },
    /// RBAC refused the call.
    #[error("not allowed to {verb} {what}: {message}")]
    #[diagnostic(
        code("hetgen::kube::forbidden"),
        help(
            "hetgen needs to get, patch and delete TrainJobs, TrainingRuntimes and Secrets, and to list TrainJobs, pods and events and read pods' logs, in the job's namespace: ask for a Role that allows it, or choose another namespace with `--namespace`"
        )
    )]
    Forbidden {
        verb: &'static str,
        what: String,
        message: String,
    },
    /// The API server refused the object itself (422 Invalid, 409 Conflict, 400 BadRequest).
    #[error(
        "the API server refused to {verb} {what}: {message}{}",
        causes_text(causes)
    )]
    #[diagnostic(
        code("hetgen::kube::refused"),
        help(
            "the rendered objects must match the Kubeflow Trainer release installed in the cluster (hetgen renders for v2.3.0); a field owned by another manager is a conflict: delete the object or change it back"
        )
    )]
    Refused {
        verb: &'static str,
        what: String,
        message: String,
        causes: Vec<String>,
    },
    /// Any other answer: a server error, a timeout, an answer that is not what the API promises.
    #[error("cannot {verb} {what}: {message}")]
    #[diagnostic(code("hetgen::kube::api"))]
    Api {
        verb: &'static str,
        what: String,
        message: String,
    },
}

impl KubeError {
    /// The fault is in the configuration or the cluster's set-up, not in the job: exit 78.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            KubeError::Config { .. }
                | KubeError::Unreachable { .. }
                | KubeError::TrainerMissing { .. }
                | KubeError::Unauthorized { .. }
                | KubeError::Forbidden { .. }
        )
    }
}

/// `: field: message; field: message` under the message of a refusal.
fn causes_text(causes: &[String]) -> String {
    if causes.is_empty() {
        String::new()
    } else {
        format!("\n  {}", causes.join("\n  "))
    }
}

/// The object a call is about, for the error that names it.
#[derive(Debug, Clone)]
pub(crate) struct Target<'a> {
    /// The kind, as users know it (`TrainJob`).
    pub kind: &'static str,
    /// Its resource (`trainjobs`), as the API server names it in a `Status`'s details.
    pub resource: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl Target<'_> {
    /// `TrainJob `default/digits``.
    pub fn what(&self) -> String {
        format!("{} `{}/{}`", self.kind, self.namespace, self.name)
    }

    /// Whether `e` is the API server's "no such object" for this object itself (a `Status`
    /// with reason `NotFound` naming its resource), as against a path the server does not
    /// serve at all.
    pub fn is_not_found(&self, e: &kube::Error) -> bool {
        matches!(e, kube::Error::Api(s) if s.code == 404 && is_object_not_found(s, self.resource))
    }

    /// The error for `verb` (`apply`, `delete`, …) of this object failing with `e`.
    pub fn error(&self, verb: &'static str, e: kube::Error) -> KubeError {
        let status = match e {
            kube::Error::Api(status) => status,
            other => {
                return KubeError::Unreachable {
                    verb,
                    what: self.what(),
                    why: other.to_string(),
                };
            }
        };
        let what = self.what();
        let message = status.message.clone();
        match status.code {
            401 => KubeError::Unauthorized {
                verb,
                what,
                message,
            },
            // An admission webhook's denial comes as 403 too (controller-runtime's `Denied`),
            // but it is the controller refusing the object, not RBAC refusing the caller.
            403 if is_webhook_denial(&status) => KubeError::Refused {
                verb,
                what,
                message,
                causes: causes(&status),
            },
            403 => KubeError::Forbidden {
                verb,
                what,
                message,
            },
            404 if is_object_not_found(&status, self.resource) => KubeError::NotFound {
                kind: self.kind,
                namespace: self.namespace.to_owned(),
                name: self.name.to_owned(),
            },
            // Not a `Status` about the object: the API server serves nothing at the path, so
            // the resource type does not exist. For a Trainer type that means no Trainer.
            404 if self.resource.contains('.') => KubeError::TrainerMissing {
                resource: self.resource.to_owned(),
            },
            400 | 409 | 422 => KubeError::Refused {
                verb,
                what,
                message,
                causes: causes(&status),
            },
            _ => KubeError::Api {
                verb,
                what,
                message: if message.is_empty() {
                    format!("the API server answered {}", status.code)
                } else {
                    format!("{message} ({})", status.code)
                },
            },
        }
    }
}

/// A `Status` the API server made of an admission webhook's denial: its message is
/// `admission webhook "<name>" denied the request: <why>` (k8s.io/apiserver's
/// `webhookerrors.ToStatusErr`).
pub(crate) fn is_webhook_denial(status: &Status) -> bool {
    status.message.starts_with("admission webhook \"")
}

/// A `NotFound` `Status` whose details name `resource` (its plural, without the group: the API
/// server writes `"kind": "trainjobs"`, `"group": "trainer.kubeflow.org"`).
fn is_object_not_found(status: &Status, resource: &str) -> bool {
    let plural = resource.split('.').next().unwrap_or(resource);
    status.reason == "NotFound" && status.details.as_ref().is_some_and(|d| d.kind == plural)
}

/// Each cause of a refusal as `field: message`.
fn causes(status: &Status) -> Vec<String> {
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| {
            if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            }
        })
        .collect()
}
