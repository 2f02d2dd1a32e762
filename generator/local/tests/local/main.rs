//! hetgen-local as the launcher sees it: the files and environment of every simulated host, and
//! supervision of real processes (small shell scripts stand in for the launcher).

mod cpus;
mod framework;
mod job_faults;
mod layout;
mod supervise;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hetgen_local::{
    CpuPolicy, Exit, Host, JobRecord, Limits, LocalError, LocalJob, Observer, RunOptions, Status,
    Step, StopRequests, Stream,
};
use hetgen_spec::Job;

/// The tiny local example: 2 × data_group (ml.c5.xlarge), 1 × dnn_group (ml.m5.xlarge).
pub const TINY: &str = include_str!("../../../../examples/tiny-local.toml");

/// A `[sagemaker]` section that passes the checker, for tests of what only it can set.
pub const SAGEMAKER: &str = r#"
[sagemaker]
region = "us-east-1"
role_arn = "arn:aws:iam::123456789012:role/SageMakerRole"
image_uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/hetgen:latest"
output_path = "s3://example-bucket/output/"
max_runtime = "2h"
"#;

/// A valid job from spec text (a test spec with errors is a bug in the test).
pub fn job(text: &str) -> Job {
    let checked = hetgen_spec::check("hetgen.toml", text);
    match checked.job {
        Some(job) => job,
        None => panic!("test spec is invalid: {:?}", checked.report.problems),
    }
}

/// `TINY` with `[[channel]]` tables and a `[sagemaker]`-free spec otherwise.
pub fn with_channels(channels: &str) -> Job {
    job(&format!("{TINY}\n{channels}"))
}

/// `TINY` with only its trainer group: a homogeneous job.
pub fn homogeneous() -> Job {
    let data_group = "[[instance_group]]\nname = \"data_group\"\ninstance_type = \"ml.c5.xlarge\"\ncount = 2\nrole = \"data\"\n";
    assert!(
        TINY.contains(data_group),
        "tiny-local.toml changed its data group"
    );
    job(&TINY.replace(data_group, ""))
}

pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Options for a run in `dir/run` with `launcher` on every host, the test process's environment
/// as the caller's, a fixed seed and limits short enough for tests.
pub fn options(dir: &Path, launcher: &Path) -> RunOptions {
    let job_file = dir.join("job.json");
    std::fs::write(&job_file, "{}").unwrap();
    RunOptions {
        job_dir: dir.join("run"),
        launcher: launcher.to_owned(),
        job_file,
        spec_dir: dir.to_owned(),
        caller_env: std::env::vars().collect(),
        env: vec![],
        cpus: CpuPolicy::Shared,
        limits: Limits {
            max_runtime: Some(Duration::from_secs(20)),
            grace: Duration::from_secs(1),
        },
        seed: Some(7),
        framework: None,
        resume_from: None,
    }
}

/// A stand-in launcher: a `/bin/sh` script with `body`, run as `PROGRAM train` on every host.
///
/// Tests run in parallel, and a process forked by another test between this write and its exec
/// holds the file open for writing for a moment (`ETXTBSY` on exec); the script is therefore run
/// once as `PROGRAM probe` until the kernel lets it be executed.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let text = format!("#!/bin/sh\nif [ \"$1\" = probe ]; then exit 0; fi\n{body}\n");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    for _ in 0..200 {
        match std::process::Command::new(&path).arg("probe").status() {
            Ok(status) => {
                assert!(status.success(), "probe of {} failed", path.display());
                return path;
            }
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("cannot run {}: {e}", path.display()),
        }
    }
    panic!("{} stayed busy", path.display());
}

/// A fresh folder, and options for a run in it with a stand-in launcher of `body` (see
/// [`script`]) on every host.
pub fn launcher_options(body: &str) -> (tempfile::TempDir, RunOptions) {
    let dir = tempfile::tempdir().unwrap();
    let launcher = script(dir.path(), "launcher", body);
    let opts = options(dir.path(), &launcher);
    (dir, opts)
}

/// The error of a `prepare` that must fail, after checking that it laid nothing out: a run that
/// cannot start leaves no job folder.
pub fn refused(job: &Job, options: RunOptions) -> LocalError {
    let job_dir = options.job_dir.clone();
    let err = match hetgen_local::prepare(job, options) {
        Err(e) => e,
        Ok(local) => panic!("prepare accepted what it must refuse: {local:?}"),
    };
    assert!(!job_dir.exists(), "{err} left {}", job_dir.display());
    err
}

/// `prepare`, panicking with the error.
pub fn prepare(job: &Job, options: RunOptions) -> LocalJob {
    match hetgen_local::prepare(job, options) {
        Ok(local) => local,
        Err(e) => panic!("prepare failed: {e} ({e:?})"),
    }
}

/// Runs `local` to its end with nothing asking it to stop, and checks that it completed: what
/// the observer was told.
pub fn run_to_completion(local: &LocalJob) -> Seen {
    let mut seen = Seen::default();
    let record = local.run(&StopRequests::new(), &mut seen).unwrap();
    assert_status(&record, Status::Completed, &seen);
    seen
}

/// Checks that a run ended with `status`; when it did not, the failure shows why it ended and
/// the hosts' output.
pub fn assert_status(record: &JobRecord, status: Status, seen: &Seen) {
    assert_eq!(
        record.status,
        status,
        "{:?}\n{}",
        record.failure_reason,
        seen.transcript()
    );
}

/// Everything an [`Observer`] is told, in order.
#[derive(Debug, Default)]
pub struct Seen {
    /// `(host, pid)` as started.
    pub started: Vec<(String, u32)>,
    /// `[algo-N] line`, as the CLI prints them.
    pub lines: Vec<String>,
    /// `(host, stream, line)`.
    pub output: Vec<(String, Stream, String)>,
    /// `(host, step)`.
    pub steps: Vec<(String, Step)>,
    /// `(host, exit, when the observer was told)`.
    pub exited: Vec<(String, Exit, Instant)>,
    /// Reasons given for stopping.
    pub stopping: Vec<String>,
}

impl Seen {
    /// When the observer was told that `host` exited.
    pub fn exited_at(&self, host: &str) -> Instant {
        self.exited.iter().find(|(n, _, _)| n == host).unwrap().2
    }

    /// Lines of the hosts' output, for failure messages.
    pub fn transcript(&self) -> String {
        self.lines.join("\n")
    }
}

impl Observer for Seen {
    fn started(&mut self, host: &Host, pid: u32) {
        self.started.push((host.name.clone(), pid));
    }
    fn output(&mut self, host: &Host, stream: Stream, line: &str) {
        self.lines.push(format!("[{}] {line}", host.name));
        self.output
            .push((host.name.clone(), stream, line.to_owned()));
    }
    fn step(&mut self, host: &Host, step: &Step) {
        self.steps.push((host.name.clone(), *step));
    }
    fn exited(&mut self, host: &Host, exit: &Exit) {
        self.exited
            .push((host.name.clone(), exit.clone(), Instant::now()));
    }
    fn stopping(&mut self, reason: &str) {
        self.stopping.push(reason.to_owned());
    }
}

/// Fields of `/proc/<pid>/stat` after the command name: state, ppid, pgrp, …
fn stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Whether `pid` is a live process (a zombie is not: it runs nothing and only awaits its parent,
/// which in a container may be a PID 1 that never reaps).
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    exists && stat(pid).is_some_and(|s| !matches!(s[0].as_str(), "Z" | "X"))
}

/// Every live process that is in one of the process groups `pgids` or has the job's token in its
/// environment (what every process of the job inherits, wherever it moved). A pid of 0 is a host
/// that never started, with no group of its own.
pub fn job_processes(pgids: &[u32], token: &str) -> Vec<u32> {
    let pgids: Vec<u32> = pgids.iter().copied().filter(|p| *p != 0).collect();
    let needle = format!("HETGEN_JOB_TOKEN={token}\0").into_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(fields) = stat(pid) else { continue };
        if matches!(fields[0].as_str(), "Z" | "X") {
            continue;
        }
        let in_group = fields[2].parse::<u32>().is_ok_and(|g| pgids.contains(&g));
        let has_token = std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle));
        if in_group || has_token {
            found.push(pid);
        }
    }
    found
}

/// `KEY=VALUE` lines of a file written by `env`.
pub fn env_file(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
