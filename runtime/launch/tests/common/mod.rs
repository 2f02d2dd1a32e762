//! Shared set-up: real jobs run as simulated clusters by hetgen-local, with this crate's
//! `hetgen-launcher` as every host's program.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hetgen_local::{JobRecord, LocalJob, Observer, RunOptions, StopRequests, Stream};
use hetgen_spec::model::Job;

/// The digits data set as `root/{train,test}/<digit>/<n>.png` (every fifth image held out).
pub fn write_digits(root: &Path) {
    let manifest =
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR");
    let gz =
        std::fs::read(Path::new(&manifest).join("../../datasets/digits/digits.csv.gz")).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    for (n, line) in text.lines().enumerate() {
        let values: Vec<u32> = line.split(',').map(|v| v.trim().parse().unwrap()).collect();
        let (pixels, label) = values.split_at(64);
        let split = if n % 5 == 0 { "test" } else { "train" };
        let dir = root.join(split).join(label[0].to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let image = hetgen_pipeline::Image {
            height: 8,
            width: 8,
            channels: 1,
            data: pixels.iter().map(|v| (v * 16).min(255) as u8).collect(),
        };
        let png = hetgen_pipeline::codec::encode_png(&image).unwrap();
        std::fs::write(dir.join(format!("{n:04}.png")), png).unwrap();
    }
}

/// Lay the job out under `dir` with `job.json`, ready to run with this crate's launcher.
pub fn prepare(job: &Job, dir: &Path, seed: u64) -> LocalJob {
    prepare_with_env(job, dir, seed, vec![])
}

/// [`prepare`], with `env` in every host's environment.
pub fn prepare_with_env(job: &Job, dir: &Path, seed: u64, env: Vec<(String, String)>) -> LocalJob {
    let job_file = hetgen_fixtures::write_job_file(dir, job, "hetgen.toml");
    let caller_env = std::env::vars().filter(|(k, _)| k == "RUST_LOG").collect();
    let options = RunOptions {
        job_dir: dir.join("run"),
        launcher: PathBuf::from(env!("CARGO_BIN_EXE_hetgen-launcher")),
        job_file,
        spec_dir: dir.to_owned(),
        caller_env,
        env,
        cpus: hetgen_local::CpuPolicy::Shared,
        limits: hetgen_local::Limits {
            max_runtime: Some(Duration::from_secs(240)),
            grace: Duration::from_secs(5),
        },
        seed: Some(seed),
        framework: None,
        resume_from: None,
    };
    hetgen_local::prepare(job, options).unwrap()
}

/// The trainer host's `/opt/ml` tree in a prepared run.
pub fn trainer_tree(local: &LocalJob) -> PathBuf {
    local
        .commands
        .iter()
        .find(|c| c.host.role == hetgen_spec::model::Role::Trainer)
        .expect("the job has a trainer host")
        .base_dir
        .clone()
}

/// Collects every host's output for the failure message.
#[derive(Default)]
pub struct Lines(pub Vec<String>);

impl Observer for Lines {
    fn output(&mut self, host: &hetgen_local::Host, _stream: Stream, line: &str) {
        self.0.push(format!("[{}] {line}", host.name));
    }
}

/// Run to the end; panics with the hosts' output unless the job completed.
pub fn run_completed(local: &LocalJob) -> JobRecord {
    let mut lines = Lines::default();
    let record = local.run(&StopRequests::new(), &mut lines).unwrap();
    assert_eq!(
        record.status,
        hetgen_local::supervise::Status::Completed,
        "{:?}\n{}",
        record.failure_reason,
        lines.0.join("\n")
    );
    record
}

/// [`run_completed`] for `job` laid out under `dir`, with an audit file: the record and every
/// sample the trainer's input yielded, as (epoch, id). A sample yielded twice in one epoch
/// fails the test.
pub fn run_audited(job: &Job, dir: &Path, seed: u64) -> (JobRecord, BTreeSet<(u32, u64)>) {
    let audit = dir.join("audit.txt");
    let env = vec![("HETGEN_AUDIT_FILE".to_owned(), audit.display().to_string())];
    let record = run_completed(&prepare_with_env(job, dir, seed, env));
    let mut seen = BTreeSet::new();
    for line in std::fs::read_to_string(&audit).unwrap().lines() {
        let (epoch, id) = line.split_once(' ').unwrap();
        let key: (u32, u64) = (epoch.parse().unwrap(), id.parse().unwrap());
        assert!(seen.insert(key), "sample {key:?} yielded twice");
    }
    (record, seen)
}

/// The losses of the trainer's `hetgen-step` lines, in order.
pub fn losses(record: &JobRecord) -> Vec<(u64, f64)> {
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.host.role == hetgen_spec::model::Role::Trainer)
        .unwrap();
    let log = std::fs::read_to_string(&trainer.log).unwrap();
    log.lines()
        .filter_map(hetgen_local::Step::parse)
        .map(|s| (s.step, s.loss.expect("the trainer's lines carry the loss")))
        .collect()
}
