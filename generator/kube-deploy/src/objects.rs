//! The two objects `hetgen render` writes for Kubernetes, read back as it wrote them, and the
//! groups of their pods.
//!
//! They are kept as JSON values, not typed: what is applied is exactly what was rendered (a
//! typed round trip would drop or default fields this crate does not know), and the API
//! server, not this crate, is the judge of the Trainer schema.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_spec::kube::TRAINER_API_VERSION;
use serde_json::Value;

use crate::KubeError;

/// The folder under a job's render folder that holds the Kubeflow objects.
pub const KUBEFLOW_DIR: &str = "kubeflow";
/// The TrainingRuntime's file in [`KUBEFLOW_DIR`].
pub const RUNTIME_FILE: &str = "trainingruntime.yaml";
/// The TrainJob's file in [`KUBEFLOW_DIR`].
pub const TRAIN_JOB_FILE: &str = "trainjob.yaml";

/// The label on each replicatedJob's template that names its instance group. JobSet copies a
/// replicatedJob template's labels to its Jobs but not to their pods (v0.12's
/// `constructJob`), so a pod's group is found through its replicatedJob ([`Groups`]).
pub const GROUP_LABEL: &str = "hetgen.io/group";

/// A rendered TrainingRuntime and the TrainJob that runs it.
#[derive(Debug, Clone)]
pub struct Rendered {
    runtime: Value,
    train_job: Value,
}

impl Rendered {
    /// Reads the two files `hetgen render` wrote into `dir` (`build/<job>/kubeflow`).
    pub fn read(dir: &Path) -> Result<Rendered, KubeError> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read_to_string(&path)
                .map(|text| (path.clone(), text))
                .map_err(|source| KubeError::Read { path, source })
        };
        let (runtime_path, runtime) = read(RUNTIME_FILE)?;
        let (job_path, job) = read(TRAIN_JOB_FILE)?;
        Rendered::parse((&runtime_path, &runtime), (&job_path, &job))
    }

    /// The objects from their YAML text; the paths only name them in errors.
    pub fn parse(
        (runtime_path, runtime): (&Path, &str),
        (job_path, job): (&Path, &str),
    ) -> Result<Rendered, KubeError> {
        let runtime = object(runtime_path, runtime, "TrainingRuntime")?;
        let train_job = object(job_path, job, "TrainJob")?;
        let rendered = Rendered { runtime, train_job };
        let wanted = rendered.runtime_name();
        let refers = rendered.train_job["spec"]["runtimeRef"]["name"].as_str();
        if refers != Some(wanted) {
            return Err(KubeError::Rendered {
                path: job_path.to_owned(),
                kind: "TrainJob",
                why: format!("its `spec.runtimeRef.name` is not the rendered runtime `{wanted}`"),
            });
        }
        Ok(rendered)
    }

    /// The TrainJob's name: the job's on the cluster.
    pub fn name(&self) -> &str {
        name_of(&self.train_job)
    }

    /// The TrainingRuntime's name.
    pub fn runtime_name(&self) -> &str {
        name_of(&self.runtime)
    }

    /// The namespace the TrainJob was rendered for.
    pub fn namespace(&self) -> &str {
        self.train_job["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
    }

    /// The same objects in `namespace` (`--namespace`).
    pub fn in_namespace(mut self, namespace: &str) -> Rendered {
        for object in [&mut self.runtime, &mut self.train_job] {
            object["metadata"]["namespace"] = Value::from(namespace);
        }
        self
    }

    /// The TrainingRuntime, as rendered.
    pub fn runtime(&self) -> &Value {
        &self.runtime
    }

    /// The TrainJob, as rendered.
    pub fn train_job(&self) -> &Value {
        &self.train_job
    }

    /// The group of each replicatedJob.
    pub fn groups(&self) -> Groups {
        Groups::of_runtime(&self.runtime)
    }
}

/// Each replicatedJob's instance group, from a TrainingRuntime's [`GROUP_LABEL`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Groups {
    by_replicated_job: BTreeMap<String, String>,
}

impl Groups {
    /// The groups a TrainingRuntime (as rendered, or as the API server returns it) names.
    pub fn of_runtime(runtime: &Value) -> Groups {
        let jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"].as_array();
        let by_replicated_job = jobs
            .into_iter()
            .flatten()
            .filter_map(|job| {
                let name = job["name"].as_str()?;
                let group = job["template"]["metadata"]["labels"][GROUP_LABEL].as_str()?;
                Some((name.to_owned(), group.to_owned()))
            })
            .collect();
        Groups { by_replicated_job }
    }

    /// The group of `replicated_job`, if the runtime labelled it.
    pub fn of(&self, replicated_job: &str) -> Option<&str> {
        self.by_replicated_job
            .get(replicated_job)
            .map(String::as_str)
    }

    /// Each replicatedJob and its group.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_replicated_job
            .iter()
            .map(|(job, group)| (job.as_str(), group.as_str()))
    }
}

/// One rendered object of `kind`, checked to be Trainer's and named.
fn object(path: &Path, text: &str, kind: &'static str) -> Result<Value, KubeError> {
    let bad = |why: String| KubeError::Rendered {
        path: PathBuf::from(path),
        kind,
        why,
    };
    let value: Value = serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))?;
    if value["apiVersion"] != TRAINER_API_VERSION || value["kind"] != kind {
        return Err(bad(format!(
            "it is `{}` `{}`, not `{TRAINER_API_VERSION}` `{kind}`",
            value["apiVersion"].as_str().unwrap_or("?"),
            value["kind"].as_str().unwrap_or("?"),
        )));
    }
    if value["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err(bad("it has no `metadata.name`".to_owned()));
    }
    Ok(value)
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNTIME: &str = "# generated by hetgen\napiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: digits, namespace: team}
spec:
  template:
    spec:
      replicatedJobs:
      - name: data-group
        template: {metadata: {labels: {hetgen.io/group: data_group}}}
      - name: node
        template: {metadata: {labels: {hetgen.io/group: dnn_group}}}
      - name: unlabelled
";
    const JOB: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: digits, namespace: team}
spec: {runtimeRef: {name: digits}}
";

    fn parse(runtime: &str, job: &str) -> Result<Rendered, KubeError> {
        Rendered::parse(
            (Path::new("trainingruntime.yaml"), runtime),
            (Path::new("trainjob.yaml"), job),
        )
    }

    #[test]
    fn the_rendered_pair_names_the_job_its_namespace_and_groups() {
        let rendered = parse(RUNTIME, JOB).unwrap();
        assert_eq!(rendered.name(), "digits");
        assert_eq!(rendered.namespace(), "team");
        let groups = rendered.groups();
        assert_eq!(groups.of("data-group"), Some("data_group"));
        assert_eq!(groups.of("node"), Some("dnn_group"));
        assert_eq!(groups.of("unlabelled"), None);
        let moved = rendered.in_namespace("other");
        assert_eq!(moved.namespace(), "other");
        assert_eq!(moved.runtime()["metadata"]["namespace"], "other");
    }

    #[test]
    fn objects_of_another_kind_or_a_mismatched_pair_are_refused() {
        let err = parse(JOB, JOB).unwrap_err().to_string();
        assert!(err.contains("not a rendered TrainingRuntime"), "{err}");
        let other = JOB.replace("runtimeRef: {name: digits}", "runtimeRef: {name: x}");
        let err = parse(RUNTIME, &other).unwrap_err().to_string();
        assert!(err.contains("runtimeRef.name"), "{err}");
        let err = parse(RUNTIME, "kind: [").unwrap_err().to_string();
        assert!(err.contains("trainjob.yaml"), "{err}");
    }
}
