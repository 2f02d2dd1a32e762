//! `job-record.json`: what a local run did, for people and scripts, in the job folder.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::LocalError;
use crate::layout::Host;

/// The record's file in the job folder, written once the run has ended.
pub const RECORD_FILE: &str = "job-record.json";

/// The record of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRecord {
    /// The job's name.
    pub job_name: String,
    /// `Completed`, `Failed` or `Stopped`.
    pub status: crate::Status,
    /// SageMaker's secondary status (`MaxRuntimeExceeded` tells a timeout from a stop).
    pub secondary_status: String,
    /// Why it did not complete.
    pub failure_reason: Option<String>,
    /// When it started, RFC 3339 UTC.
    pub start: String,
    /// When it ended, RFC 3339 UTC.
    pub end: String,
    /// Wall time, seconds.
    pub duration_s: f64,
    /// The job folder.
    pub job_dir: PathBuf,
    /// The program every host ran.
    pub launcher: PathBuf,
    /// Every host, `algo-1` first.
    pub hosts: Vec<HostRecord>,
    /// The trainer's `output/data/summary.json`, when it wrote one.
    pub summary: Option<hetgen_env::Summary>,
    /// The trainer's model folder, when it saved anything (also linked as `<job dir>/model`).
    pub model_dir: Option<PathBuf>,
}

/// One host of the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRecord {
    /// The host as the run laid it out (name, group, type, role, address, vCPUs); flattened,
    /// its keys stand beside the others.
    #[serde(flatten)]
    pub host: Host,
    /// Its process id; 0 for a host that never started (it waited for others to be Ready when
    /// the job ended).
    pub pid: u32,
    /// Cores it was pinned to; `None` when it could use all.
    pub cpus: Option<Vec<usize>>,
    /// Exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that killed it, when one did.
    pub signal: Option<i32>,
    /// From start to exit, seconds.
    pub duration_s: f64,
    /// Its `/opt/ml`.
    pub base_dir: PathBuf,
    /// Its output.
    pub log: PathBuf,
}

impl JobRecord {
    /// Where the record of a run in `job_dir` goes.
    pub fn path(job_dir: &Path) -> PathBuf {
        crate::RunDir::at(job_dir).record()
    }

    /// Writes the record into its job folder.
    pub fn write(&self) -> Result<PathBuf, LocalError> {
        let path = JobRecord::path(&self.job_dir);
        let text = serde_json::to_string_pretty(self).expect("a job record serializes") + "\n";
        std::fs::write(&path, text).map_err(|source| LocalError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }
}

/// `2025-01-31T12:00:05Z` (times before 1970 count as 1970).
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_seconds(time.max(SystemTime::UNIX_EPOCH)).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_times() {
        let t = UNIX_EPOCH + Duration::from_secs(1_738_324_805); // 2025-01-31T12:00:05Z
        assert_eq!(rfc3339(t), "2025-01-31T12:00:05Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        // A leap day.
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }
}
