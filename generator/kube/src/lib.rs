//! A hetgen job on Kubernetes, as a Kubeflow Trainer (v2) job.
//!
//! The names both sides share (replicatedJobs, pod DNS names, the variables a pod reads) are
//! in `hetgen_spec::kube`.

mod emit;
pub mod objects;
pub mod pods;

pub use emit::to_yaml;
pub use objects::{Objects, objects};
