//! Which cluster and namespace: a kubeconfig found the usual way (`KUBECONFIG`, else
//! `~/.kube/config`, else the pod's service account inside a cluster), with the context and
//! namespace overridable as `kubectl`'s `--context` and `--namespace` do.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::KubeError;

/// How to reach the cluster; every field empty is what `kubectl` does with no flags.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// This kubeconfig file instead of `KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// This context of the kubeconfig instead of its current one.
    pub context: Option<String>,
    /// This namespace instead of the rendered objects' (deploy) or the context's (stop, logs).
    pub namespace: Option<String>,
}

/// A client for one cluster, and the namespace a command without `--namespace` works in.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) client: Client,
    default_namespace: String,
    namespace: Option<String>,
}

impl Cluster {
    /// Loads the configuration `connection` names; nothing is sent yet.
    pub async fn connect(connection: &Connection) -> Result<Cluster, KubeError> {
        let options = KubeConfigOptions {
            context: connection.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&connection.kubeconfig, &connection.context) {
            (Some(path), _) => {
                let file = Kubeconfig::read_from(path).map_err(|e| KubeError::Config {
                    why: format!("{}: {e}", path.display()),
                })?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(config_error)?
            }
            // A context is a kubeconfig's: no falling back to the in-cluster account.
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(config_error)?,
            (None, None) => Config::infer().await.map_err(config_error)?,
        };
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(config_error)?;
        Ok(Cluster {
            client,
            default_namespace,
            namespace: connection.namespace.clone(),
        })
    }

    /// The namespace to work in: `--namespace`, else `preferred` (the rendered objects'), else
    /// the context's (`default` when it names none).
    pub fn namespace<'a>(&'a self, preferred: Option<&'a str>) -> &'a str {
        self.namespace
            .as_deref()
            .or(preferred)
            .unwrap_or(&self.default_namespace)
    }
}

fn config_error(e: impl std::fmt::Display) -> KubeError {
    KubeError::Config { why: e.to_string() }
}
