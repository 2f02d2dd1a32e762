//! A run's folder, and finding it again once the run is over.
//!
//! Every run of a job lives in a folder of its own under the job's render folder,
//! `<out>/<job>/local/<run>/`: `log.jsonl` (every host's lines, [`crate::joblog`]),
//! `job-record.json` once the run has ended ([`crate::record`]), and one `/opt/ml` per host under
//! `hosts/<host>/`, with the host's own output in `output/log.txt`. [`crate::prepare`] lays it
//! out; `hetgen logs` and `deploy --local --resume-from` find a run by its folder or its name.

use std::path::{Path, PathBuf};

use hetgen_env::{Paths, ResourceConfig};

use crate::record::RECORD_FILE;

/// The run's log, every host's lines as JSON, one per line ([`crate::joblog`] writes it).
pub const LOG_FILE: &str = "log.jsonl";
/// The folder of a job's runs, under the job's render folder.
pub const RUNS_DIR: &str = "local";
/// The folder of a run that holds one `/opt/ml` per host.
pub const HOSTS_DIR: &str = "hosts";
/// A host's output (stdout and stderr as they came), under its `/opt/ml`.
pub const HOST_LOG: &str = "output/log.txt";

/// The folder of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    dir: PathBuf,
}

impl RunDir {
    /// The run in `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> RunDir {
        RunDir { dir: dir.into() }
    }

    /// The folder of the runs of the job rendered into `job_root`: `<job_root>/local`.
    pub fn runs_of(job_root: &Path) -> PathBuf {
        job_root.join(RUNS_DIR)
    }

    /// The run `run` of the job rendered into `job_root`: a run's folder when `run` is a path
    /// (an existing folder, or any path with a `/`), else the job's run of that name.
    pub fn of_job(job_root: &Path, run: &str) -> RunDir {
        let path = Path::new(run);
        match path.is_dir() || run.contains('/') {
            true => RunDir::at(path),
            false => RunDir::at(RunDir::runs_of(job_root).join(run)),
        }
    }

    /// The run `run` names among everything rendered into `out`: a folder with a run's log or
    /// record, else (for a bare name) the run of that name of any job in `out`. `None` when it
    /// names no run here (a SageMaker job's name, say).
    pub fn find(run: &str, out: &Path) -> Option<RunDir> {
        let given = RunDir::at(run);
        if given.log().is_file() || given.has_ended() {
            return Some(given);
        }
        if run.contains('/') {
            return None;
        }
        std::fs::read_dir(out)
            .ok()?
            .flatten()
            .map(|job_root| RunDir::at(RunDir::runs_of(&job_root.path()).join(run)))
            .find(|candidate| candidate.log().is_file())
    }

    /// The run's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `log.jsonl`: every host's lines, as shown.
    pub fn log(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// `job-record.json`, written once the run has ended.
    pub fn record(&self) -> PathBuf {
        self.dir.join(RECORD_FILE)
    }

    /// Whether the run has ended: its record is written after its last log line.
    pub fn has_ended(&self) -> bool {
        self.record().is_file()
    }

    /// The folder of the hosts' `/opt/ml` trees.
    pub fn hosts_dir(&self) -> PathBuf {
        self.dir.join(HOSTS_DIR)
    }

    /// Host `host`'s `/opt/ml`.
    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts_dir().join(host)
    }

    /// Host `host`'s own output.
    pub fn host_log(&self, host: &str) -> PathBuf {
        self.host_dir(host).join(HOST_LOG)
    }

    /// Every host's `/opt/ml`, in name order.
    pub fn host_dirs(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(self.hosts_dir())?
            .flatten()
            .map(|entry| entry.path())
            .collect();
        dirs.sort();
        Ok(dirs)
    }

    /// The cluster as the hosts saw it: the first readable `resourceconfig.json` of any host
    /// (every host's names every host and group).
    pub fn resource_config(&self) -> Option<ResourceConfig> {
        self.host_dirs().ok()?.into_iter().find_map(|base| {
            let text = std::fs::read_to_string(Paths { base }.resource_config()).ok()?;
            serde_json::from_str(&text).ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_run_is_found_by_its_folder_or_its_name() {
        let out = tempfile::tempdir().unwrap();
        let run = RunDir::at(out.path().join("digits/local/digits-20261204-120000"));
        write(&run.log(), "");
        let path = run.dir().to_str().unwrap();
        assert_eq!(RunDir::find(path, out.path()), Some(run.clone()));
        assert_eq!(
            RunDir::find("digits-20261204-120000", out.path()),
            Some(run.clone())
        );
        // A SageMaker job's name, and a path that holds no run.
        assert_eq!(RunDir::find("digits-20261204-130000", out.path()), None);
        assert_eq!(
            RunDir::find("nowhere/digits-20261204-120000", out.path()),
            None
        );

        // A job's own run by name, or any run by its path.
        let job_root = out.path().join("digits");
        assert_eq!(RunDir::of_job(&job_root, "digits-20261204-120000"), run);
        assert_eq!(RunDir::of_job(&job_root, path), run);
    }

    #[test]
    fn a_run_knows_its_hosts_and_whether_it_ended() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::at(dir.path());
        assert!(!run.has_ended());
        assert_eq!(run.resource_config(), None);
        let config = r#"{"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}"#;
        for host in ["algo-2", "algo-1"] {
            write(
                &Paths {
                    base: run.host_dir(host),
                }
                .resource_config(),
                config,
            );
        }
        assert_eq!(
            run.host_dirs().unwrap(),
            [run.host_dir("algo-1"), run.host_dir("algo-2")]
        );
        assert_eq!(
            run.host_log("algo-1"),
            dir.path().join("hosts/algo-1/output/log.txt")
        );
        assert_eq!(run.resource_config().unwrap().hosts, ["algo-1", "algo-2"]);
        write(&run.record(), "{}");
        assert!(run.has_ended());
    }
}
