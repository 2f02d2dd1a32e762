use std::borrow::Cow;
use std::path::PathBuf;

use crate::VariableError;

/// Why the environment could not be read. Every variant names the file or the variable.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A file could not be read (missing, permissions).
    #[error("cannot read {}: {source} (is this running inside a SageMaker training job, or is SAGEMAKER_BASE_DIR set to a job's tree?)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not the JSON it should be.
    #[error("{}:{line}:{column}: malformed: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde said.
        message: String,
    },
    /// A file parses but contradicts itself or the job.
    #[error("{}: {message}", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A variable the environment needs (a Kubernetes pod's `HETGEN_KUBE_*`) is not set.
    #[error("{var} is not set: it should be {expected}")]
    Unset {
        /// The variable.
        var: &'static str,
        /// What it should be.
        expected: Cow<'static, str>,
    },
    /// A variable the environment needs has a value that cannot be used.
    #[error(transparent)]
    Variable(#[from] VariableError),
}
