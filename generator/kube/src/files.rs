//! The rendered files read back: what `hetgen deploy --engine kubeflow` sends and what the
//! local twin runs are the files themselves, checked as the API server would check them
//! before either uses them; a problem is refused with every other at its file and line.

use std::path::{Path, PathBuf};

use hetgen_spec::Problem;
use serde_json::Value;

use crate::objects::{RUNTIME_FILE, TRAINJOB_FILE};
use crate::validate;

/// The job's `TrainingRuntime` and `TrainJob`, as the files in `build/<job>/` have them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The `TrainingRuntime`.
    pub runtime: Value,
    /// The `TrainJob`.
    pub trainjob: Value,
}

/// Why the rendered files cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum LoadError {
    /// A file is missing or unreadable.
    #[error("cannot read `{}`", path.display())]
    #[diagnostic(
        code("hetgen::kube::read"),
        help(
            "run `hetgen render`: a spec with `[kubernetes]` renders kubeflow/ beside the other files"
        )
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The API server would refuse them.
    #[error("{} problem(s) in the rendered Kubernetes objects", problems.len())]
    #[diagnostic(
        code("hetgen::kube::invalid"),
        help("fix the files, or run `hetgen render` to write them from the spec again")
    )]
    Invalid {
        /// Every problem, each at its file, line and column.
        #[related]
        problems: Vec<Problem>,
    },
    /// A file does not hold the one object it is named for.
    #[error("`{}` holds {found} object(s); it should hold one {kind}", path.display())]
    #[diagnostic(
        code("hetgen::kube::shape"),
        help("run `hetgen render` to write it again")
    )]
    Shape {
        /// The file.
        path: PathBuf,
        /// The kind it should hold.
        kind: &'static str,
        /// What it holds.
        found: String,
    },
}

/// Reads `kubeflow/trainingruntime.yaml` and `kubeflow/trainjob.yaml` under `job_root` (the
/// job's render folder), checks them together, and returns their objects.
pub fn load(job_root: &Path) -> Result<Rendered, LoadError> {
    let read = |file: &str| {
        let path = job_root.join(file);
        std::fs::read_to_string(&path)
            .map(|text| (path.clone(), text))
            .map_err(|source| LoadError::Read { path, source })
    };
    let files = [read(RUNTIME_FILE)?, read(TRAINJOB_FILE)?];
    let objects = validate::read(&files).map_err(|problems| LoadError::Invalid { problems })?;
    let [runtime, trainjob] = <[Vec<Value>; 2]>::try_from(objects).expect("one list per file");
    Ok(Rendered {
        runtime: one(&files[0].0, runtime, "TrainingRuntime")?,
        trainjob: one(&files[1].0, trainjob, "TrainJob")?,
    })
}

/// The file's one object of `kind`.
fn one(path: &Path, objects: Vec<Value>, kind: &'static str) -> Result<Value, LoadError> {
    let shape = |found: String| LoadError::Shape {
        path: path.to_owned(),
        kind,
        found,
    };
    match <[Value; 1]>::try_from(objects) {
        Ok([object]) if object["kind"] == kind => Ok(object),
        Ok([object]) => Err(shape(format!("a {}", object["kind"]))),
        Err(more) => Err(shape(more.len().to_string())),
    }
}
