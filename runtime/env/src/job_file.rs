//! job.json: the resolved job `hetgen render` wrote, read back inside every instance.

use std::path::{Path, PathBuf};

use hetgen_spec::model::Job;
use serde::Deserialize;

use crate::{EnvError, JOB_FILE_VAR};

/// What `job.json` holds.
#[derive(Debug, Clone, Deserialize)]
pub struct JobFile {
    /// The hetgen that rendered it.
    pub generated_by: String,
    /// The spec file it came from.
    pub spec: String,
    /// The spec's sha256.
    pub spec_sha256: String,
    /// The resolved job.
    pub job: Job,
}

/// Read job.json from `path`, or from `HETGEN_JOB_FILE`, or `/opt/hetgen/job.json`.
pub fn load_job(path: Option<&Path>) -> Result<(PathBuf, JobFile), EnvError> {
    let path = path.map(Path::to_owned).unwrap_or_else(|| {
        std::env::var_os(JOB_FILE_VAR)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/opt/hetgen/job.json"))
    });
    let text = std::fs::read_to_string(&path).map_err(|source| EnvError::Read {
        path: path.clone(),
        source,
    })?;
    let file: JobFile = serde_json::from_str(&text).map_err(|e| EnvError::Malformed {
        path: path.clone(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    Ok((path, file))
}
