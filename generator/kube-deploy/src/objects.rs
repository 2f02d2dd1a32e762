//! The two objects `hetgen render` wrote for Kubernetes, read back and checked by
//! [`hetgen_kube::load`], and the groups of their pods.
//!
//! They are kept as JSON values, not typed: what is applied is exactly what was rendered (a
//! typed round trip would drop or default fields this crate does not know). `load` has already
//! checked them as the API server would (the Trainer and JobSet CRDs, their CEL rules, hetgen's
//! own, such as the TrainJob's `runtimeRef` naming the runtime beside it), so a file edited by
//! hand into something the cluster would refuse is refused here, at its line, before any call.

use std::collections::BTreeMap;
use std::path::Path;

use hetgen_kube::objects::{GROUP_LABEL, RUNTIME_FILE, TRAINJOB_FILE};
use serde_json::Value;

use crate::KubeError;

/// A rendered TrainingRuntime and the TrainJob that runs it.
#[derive(Debug, Clone)]
pub struct Rendered {
    runtime: Value,
    train_job: Value,
}

impl Rendered {
    /// Reads and checks the two objects `hetgen render` wrote under `job_root`, the job's render
    /// folder (`build/<job>`).
    pub fn read(job_root: &Path) -> Result<Rendered, KubeError> {
        let hetgen_kube::Rendered { runtime, trainjob } = hetgen_kube::load(job_root)?;
        // The schema accepts `generateName` instead of a name; server-side apply does not, and
        // the TrainJob's name is the job's on the cluster.
        let objects = [
            (&runtime, RUNTIME_FILE, "TrainingRuntime"),
            (&trainjob, TRAINJOB_FILE, "TrainJob"),
        ];
        for (object, file, kind) in objects {
            if name_of(object).is_empty() {
                let path = job_root.join(file);
                return Err(KubeError::Unnamed { path, kind });
            }
        }
        Ok(Rendered {
            runtime,
            train_job: trainjob,
        })
    }

    /// The TrainJob's name: the job's on the cluster.
    pub fn name(&self) -> &str {
        name_of(&self.train_job)
    }

    /// The TrainingRuntime's name.
    pub fn runtime_name(&self) -> &str {
        name_of(&self.runtime)
    }

    /// The namespace the TrainJob was rendered for; none when its file names none (it is
    /// optional in a file, as for `kubectl apply`), and the object goes to the context's.
    pub fn namespace(&self) -> Option<&str> {
        self.train_job["metadata"]["namespace"]
            .as_str()
            .filter(|namespace| !namespace.is_empty())
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

/// Each replicatedJob's instance group, from a TrainingRuntime's [`GROUP_LABEL`]s. The label is
/// on each replicatedJob's template, and JobSet copies those labels to its Jobs but not to their
/// pods (v0.12's `constructJob`), so a pod's group is found through its replicatedJob.
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

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use hetgen_kube::LoadError;
    use hetgen_kube::objects::DIR;
    use miette::Diagnostic;

    use super::*;

    /// The job root of the objects the deploy tests send.
    fn recorded() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/recorded/rendered")
    }

    #[test]
    fn the_rendered_pair_names_the_job_its_namespace_and_groups() {
        let rendered = Rendered::read(&recorded()).unwrap();
        assert_eq!(rendered.name(), "pytorch-digits");
        assert_eq!(rendered.runtime_name(), "pytorch-digits");
        assert_eq!(rendered.namespace(), Some("default"));
        let groups = rendered.groups();
        assert_eq!(groups.of("data-group"), Some("data_group"));
        assert_eq!(groups.of("node"), Some("dnn_group"));
        assert_eq!(groups.of("initializer"), None);
        let moved = rendered.in_namespace("other");
        assert_eq!(moved.namespace(), Some("other"));
        assert_eq!(moved.runtime()["metadata"]["namespace"], "other");
    }

    /// A job root holding the recorded objects, `from` replaced by `to` in `file`; the file.
    fn edited(file: &str, from: &str, to: &str) -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(DIR)).unwrap();
        for file in [RUNTIME_FILE, TRAINJOB_FILE] {
            std::fs::copy(recorded().join(file), root.path().join(file)).unwrap();
        }
        let path = root.path().join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "`{from}` not in {file}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
        (root, path)
    }

    #[test]
    fn a_misspelled_field_is_refused_at_its_line_and_column() {
        let (root, path) = edited(TRAINJOB_FILE, "    numNodes: 2", "    numNode: 2");
        let text = std::fs::read_to_string(&path).unwrap();
        let line = 1 + text.lines().position(|l| l.contains("numNode:")).unwrap();

        let err = Rendered::read(root.path()).unwrap_err();
        let KubeError::Load(LoadError::Invalid { problems }) = &err else {
            panic!("not refused as invalid: {err:?}");
        };
        let [problem] = problems.as_slice() else {
            panic!("not one problem: {problems:#?}");
        };
        assert_eq!(problem.location(), format!("{}:{line}:5", path.display()));
        assert!(problem.message.contains("`numNode`"), "{}", problem.message);
        // The command line shows the error as a diagnostic: each problem comes with it.
        let related: Vec<String> = err.related().unwrap().map(|d| d.to_string()).collect();
        assert_eq!(related, [problem.to_string()]);
    }

    #[test]
    fn a_trainjob_without_a_namespace_has_none() {
        let (root, _) = edited(TRAINJOB_FILE, "  namespace: default\n", "");
        let rendered = Rendered::read(root.path()).unwrap();
        assert_eq!(rendered.namespace(), None);
    }

    #[test]
    fn an_object_named_only_by_generate_name_is_refused() {
        let (root, path) = edited(
            TRAINJOB_FILE,
            "  name: pytorch-digits\n  namespace",
            "  generateName: pytorch-digits-\n  namespace",
        );
        match Rendered::read(root.path()) {
            Err(KubeError::Unnamed { path: at, kind }) => {
                assert_eq!((at, kind), (path, "TrainJob"));
            }
            other => panic!("not refused as unnamed: {other:?}"),
        }
    }
}
