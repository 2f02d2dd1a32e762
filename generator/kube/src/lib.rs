//! A hetgen job on Kubernetes, as a Kubeflow Trainer (v2) job.
//!
//! The names both sides share (replicatedJobs, pod DNS names, the variables a pod reads) are
//! in `hetgen_spec::kube`.
//!
//! - [`objects`]: the job as a `TrainingRuntime` and a `TrainJob`, written as YAML by `emit`;
//! - [`load`]: the rendered files read back, checked, for deploy and the local twin;
//! - [`pods`]: the pods those objects become, as Trainer, JobSet and the kubelet make them;
//! - [`validate`]: rendered objects checked offline as the API server would check them, against
//!   the Trainer and JobSet CRDs vendored in `crds/`, with their CEL rules and hetgen's own.

mod emit;
mod files;
pub mod objects;
pub mod pods;
pub mod validate;

pub use emit::to_yaml;
pub use files::{LoadError, Rendered, load};
pub use objects::{Objects, objects};
