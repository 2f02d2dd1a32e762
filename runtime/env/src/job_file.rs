//! job.json: the resolved job `hetgen render` writes, read back inside every instance.

use std::path::{Path, PathBuf};

use hetgen_spec::model::Job;
use serde::{Deserialize, Serialize};

use crate::{EnvError, JOB_FILE_VAR};

/// The name of the job file: `hetgen render` writes it beside the other rendered files, and
/// the image and a local run read it by this name.
pub const JOB_FILE_NAME: &str = "job.json";

/// Where job.json is inside the image when `HETGEN_JOB_FILE` is unset (the Dockerfile puts it
/// there): [`JOB_FILE_NAME`] in `/opt/hetgen`.
pub const DEFAULT_JOB_FILE: &str = "/opt/hetgen/job.json";

/// What `job.json` holds: the resolved job and where it came from. `hetgen render` writes it,
/// `hetgen bench` writes variants of it, the launcher reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobFile {
    /// The hetgen that wrote it, e.g. `hetgen 0.1.0`.
    pub generated_by: String,
    /// The spec file it came from.
    pub spec: String,
    /// The spec's sha256 (empty when the job was derived from a spec rather than rendered).
    pub spec_sha256: String,
    /// The resolved job.
    pub job: Job,
}

impl JobFile {
    /// The file's text: pretty JSON with a final newline, keys in a stable order.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a job file serializes");
        text.push('\n');
        text
    }
}

/// Read job.json from `path`, or from `HETGEN_JOB_FILE`, or [`DEFAULT_JOB_FILE`].
pub fn load_job(path: Option<&Path>) -> Result<(PathBuf, JobFile), EnvError> {
    let path = path.map(Path::to_owned).unwrap_or_else(|| {
        std::env::var_os(JOB_FILE_VAR)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_JOB_FILE))
    });
    let file = crate::read_json(&path, true)?.expect("required files are present");
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_image_s_job_file_has_the_rendered_name() {
        let name = format!("/{}", super::JOB_FILE_NAME);
        assert!(super::DEFAULT_JOB_FILE.ends_with(&name));
    }
}
