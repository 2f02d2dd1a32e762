//! A hetgen job on Kubernetes, deployed and followed: the Kubeflow Trainer objects
//! `hetgen render` wrote, sent to a cluster with kube-rs.
//!
//! - [`Rendered`] is the TrainingRuntime and TrainJob in `build/<job>/kubeflow/`, read back and
//!   checked by [`hetgen_kube::load`], and [`Groups`] says which instance group each of their
//!   replicatedJobs is.
//! - [`Cluster::connect`] finds the cluster as `kubectl` does ([`Connection`]).
//! - [`deploy`] writes the job's token Secret and server-side applies the two objects;
//!   [`stop`] deletes the TrainJob (its pods with it) and the Secret.
//! - [`TrainJobState`] is a TrainJob's [`Phase`], from Trainer's conditions ([`status`]: with
//!   its pods and Warning events); [`JobPods`] reads
//!   every pod's lines, each once, labelled with its host and group; [`Follow`] polls both,
//!   and the [`Warning`] events on the TrainJob and its JobSet, until the job ends or the
//!   controllers' objects are refused, and hands what it sees to a [`Watcher`].
//!
//! Every refusal of the API server becomes a [`KubeError`] that names the object. This crate
//! prints nothing: the command line shows what it returns.

mod api;
mod connect;
mod deploy;
mod error;
mod events;
mod follow;
mod objects;
mod pods;
mod status;

pub use api::FIELD_MANAGER;
pub use connect::{Cluster, Connection};
pub use deploy::{DeployOptions, Deployed, Stopped, deploy, stop};
pub use error::KubeError;
pub use events::Warning;
pub use follow::{Follow, Outcome, Watcher};
pub use objects::{Groups, Rendered};
pub use pods::{JobPods, PodLine, PodState, Poll};
pub use status::{Condition, JobStatus, Phase, TrainJobState, condition, groups, state, status};
