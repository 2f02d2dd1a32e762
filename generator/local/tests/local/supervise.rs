//! Real processes: shell scripts stand in for the launcher on every host, and the job must end
//! as SageMaker ends one, leaving no process behind.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use hetgen_local::{
    JobRecord, Limits, LocalError, LocalJob, Observer, Status, StopRequests, Stream,
};

use crate::{
    Seen, TINY, alive, assert_status, job, job_processes, launcher_options, options, prepare,
    read_json,
};

/// Script lines that tell the test (and other hosts) this host got going.
const READY: &str = r#"JOB_DIR="$SAGEMAKER_BASE_DIR/../.."
touch "$JOB_DIR/ready-$SM_CURRENT_HOST""#;

/// Script lines that wait (at most 10 s) until every data host is ready.
const AWAIT_DATA_HOSTS: &str = r#"JOB_DIR="$SAGEMAKER_BASE_DIR/../.."
n=0
while [ "$(ls "$JOB_DIR" | grep -c '^ready-')" -lt 2 ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done"#;

/// Prepares TINY in a fresh folder with `body` as every host's program.
fn tiny(body: &str, limits: Limits) -> (tempfile::TempDir, LocalJob) {
    let (dir, mut opts) = launcher_options(body);
    opts.limits = limits;
    let local = prepare(&job(TINY), opts);
    (dir, local)
}

fn limits(max_runtime_s: f64, grace_s: f64) -> Limits {
    Limits {
        max_runtime: Some(Duration::from_secs_f64(max_runtime_s)),
        grace: Duration::from_secs_f64(grace_s),
    }
}

fn token(local: &LocalJob) -> String {
    local.commands[0].env["HETGEN_JOB_TOKEN"].clone()
}

fn trainer(local: &LocalJob) -> &hetgen_local::HostCommand {
    local
        .commands
        .iter()
        .find(|c| c.host.group == "dnn_group")
        .unwrap()
}

/// Prepares TINY with `body` as every host's program and [`run`]s it with nothing asking it to
/// stop: the folder it ran in (the hosts' logs and outputs are there), the job, what the
/// observer was told, the record and how long the run took.
fn run_tiny(
    body: &str,
    limits: Limits,
) -> (tempfile::TempDir, LocalJob, Seen, JobRecord, Duration) {
    run_tiny_stopped(body, limits, 0)
}

/// [`run_tiny`], asking for a stop `stops` times, 300 ms apart, from another thread once every
/// host is ready (its program ran [`READY`]).
fn run_tiny_stopped(
    body: &str,
    limits: Limits,
    stops: usize,
) -> (tempfile::TempDir, LocalJob, Seen, JobRecord, Duration) {
    let (dir, local) = tiny(body, limits);
    let stop = StopRequests::new();
    let requester = (stops > 0).then(|| {
        let job_dir = local.layout.job_dir.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            for h in ["algo-1", "algo-2", "algo-3"] {
                wait_for(&job_dir.join(format!("ready-{h}")));
            }
            for i in 0..stops {
                if i > 0 {
                    thread::sleep(Duration::from_millis(300));
                }
                stop.request();
            }
        })
    });
    let mut seen = Seen::default();
    let started = Instant::now();
    let record = run(&local, &stop, &mut seen);
    if let Some(requester) = requester {
        requester.join().unwrap();
    }
    (dir, local, seen, record, started.elapsed())
}

/// Runs the job, checks the record on disk is the one returned, and that nothing of the job is
/// still running.
fn run(local: &LocalJob, stop: &StopRequests, seen: &mut Seen) -> JobRecord {
    let record = local.run(stop, seen).unwrap();
    let path = JobRecord::path(&local.layout.job_dir);
    assert_eq!(path, local.layout.job_dir.join("job-record.json"));
    let on_disk = read_json(&path);
    assert_eq!(
        on_disk,
        serde_json::to_value(&record).unwrap(),
        "job-record.json is the record"
    );
    assert_no_process_left(local, &record);
    record
}

fn assert_no_process_left(local: &LocalJob, record: &JobRecord) {
    let pids: Vec<u32> = record.hosts.iter().map(|h| h.pid).collect();
    for pid in &pids {
        assert!(!alive(*pid), "host process {pid} outlived the run");
    }
    // The supervisor has sent SIGKILL to every host's group when it returns, but a process
    // that got SIGKILL an instant ago may still be on its way out (on a loaded machine the
    // kernel takes a moment to end it): allow a short settle, never survival.
    let token = token(local);
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let left = job_processes(&pids, &token);
        if left.is_empty() {
            return;
        }
        if Instant::now() >= until {
            let stats: Vec<String> = left
                .iter()
                .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
                .collect();
            panic!("processes of the job still run: {stats:?} (hosts {pids:?})");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The CPU time the calling thread has used (the supervisor runs on the caller's thread).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills the timespec it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Waits (at most 10 s) until `path` holds a whole line, and reads it as a process id.
fn read_pid(path: &Path) -> u32 {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().parse().unwrap();
        }
        assert!(
            Instant::now() < until,
            "{} never held a pid",
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (at most 10 s) until `path` exists.
fn wait_for(path: &Path) {
    let until = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        thread::sleep(Duration::from_millis(20));
    }
}

/// Checks that every data host was ended by SIGTERM.
fn assert_data_hosts_got_sigterm(record: &JobRecord) {
    for h in record.hosts.iter().filter(|h| h.host.group == "data_group") {
        assert_eq!(h.signal, Some(libc::SIGTERM), "{h:?}");
    }
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn a_job_whose_hosts_all_exit_0_completes_with_a_record() {
    let body = r#"
echo "hello from $SM_CURRENT_HOST"
echo "to stderr from $SM_CURRENT_HOST" >&2
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  echo "hetgen-step step=5 loss=0.5 step_ms=10.0 wait_ms=2.5 samples_per_s=100.0"
  echo '{"steps": 5, "epochs_started": 1, "samples": 40, "mean_step_ms": 10.0, "mean_wait_ms": 2.5, "stall_fraction": 0.25, "samples_per_s": 100.0, "final_loss": 0.5, "device": "cpu", "model": "mlp", "replicas": 1, "resumed_from_step": null}' > "$SAGEMAKER_BASE_DIR/output/data/summary.json"
  echo weights > "$SAGEMAKER_BASE_DIR/model/model.bin"
fi
printf 'no newline at the end'
"#;
    let (_dir, local, seen, record, _) = run_tiny(body, limits(20.0, 1.0));

    assert_status(&record, Status::Completed, &seen);
    assert_eq!(record.secondary_status, "Completed");
    assert_eq!(record.failure_reason, None);
    assert_eq!(record.job_name, "tiny-local");
    assert_eq!(record.job_dir, local.layout.job_dir);
    assert_eq!(record.launcher, local.launcher);
    assert!(
        record.duration_s >= 0.0 && record.duration_s < 10.0,
        "{}",
        record.duration_s
    );
    assert!(record.start.ends_with('Z') && record.end.ends_with('Z'));
    assert!(seen.stopping.is_empty(), "{:?}", seen.stopping);

    let names: Vec<&str> = record.hosts.iter().map(|h| h.host.name.as_str()).collect();
    assert_eq!(names, ["algo-1", "algo-2", "algo-3"]);
    for (h, c) in record.hosts.iter().zip(&local.commands) {
        assert_eq!(h.host, c.host);
        assert_eq!(h.base_dir, c.base_dir);
        assert_eq!(h.log, c.base_dir.join("output/log.txt"));
        assert_eq!(h.exit_code, Some(0), "{}", h.host.name);
        assert_eq!(h.signal, None);
        assert!(h.pid > 0);
        assert!(
            seen.started.contains(&(h.host.name.clone(), h.pid)),
            "the observer saw {} start",
            h.host.name
        );
        assert!(
            h.duration_s >= 0.0 && h.duration_s <= record.duration_s + 0.01,
            "{h:?}"
        );

        // The log keeps both streams, and the last line without its newline.
        let log = std::fs::read_to_string(&h.log).unwrap();
        assert!(
            log.contains(&format!("hello from {}\n", h.host.name)),
            "{log}"
        );
        assert!(
            log.contains(&format!("to stderr from {}\n", h.host.name)),
            "{log}"
        );
        assert!(log.contains("no newline at the end\n"), "{log}");

        // The observer got each line with its host and stream.
        assert!(seen.output.contains(&(
            h.host.name.clone(),
            Stream::Stdout,
            format!("hello from {}", h.host.name)
        )));
        assert!(seen.output.contains(&(
            h.host.name.clone(),
            Stream::Stderr,
            format!("to stderr from {}", h.host.name)
        )));
        assert!(
            seen.lines
                .contains(&format!("[{}] hello from {}", h.host.name, h.host.name))
        );
        let exits: Vec<_> = seen
            .exited
            .iter()
            .filter(|(n, _, _)| *n == h.host.name)
            .collect();
        assert_eq!(exits.len(), 1, "one exit per host");
        assert!(exits[0].1.success());
        assert_eq!(exits[0].1.pid, h.pid);
    }
    assert_eq!(
        seen.output
            .iter()
            .filter(|(_, _, l)| l.starts_with("hello from"))
            .count(),
        3
    );

    // The trainer's step line, summary and model.
    let trainer = trainer(&local);
    assert_eq!(seen.steps.len(), 1, "{:?}", seen.steps);
    let (host, step) = &seen.steps[0];
    assert_eq!(host, &trainer.host.name);
    assert_eq!(step.step, 5);
    assert_eq!(step.wait_ms, 2.5);
    let summary = record.summary.as_ref().expect("the trainer's summary");
    assert_eq!((summary.steps, summary.final_loss), (5, 0.5));
    assert_eq!(
        record.model_dir.as_deref(),
        Some(trainer.base_dir.join("model").as_path())
    );
    let link = local.layout.job_dir.join("model");
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        trainer.base_dir.join("model")
    );
    assert_eq!(
        std::fs::read_to_string(link.join("model.bin")).unwrap(),
        "weights\n"
    );
}

#[test]
fn limits_too_far_off_to_be_an_instant_are_no_limits() {
    // `--max-runtime 9223372036854775808` once overflowed an `Instant` in the supervisor.
    let huge = Limits {
        max_runtime: Some(Duration::MAX),
        grace: Duration::MAX,
    };
    let body = "if [ \"$SM_CURRENT_INSTANCE_GROUP\" = dnn_group ]; then exit 3; fi";
    let (_dir, _, seen, record, _) = run_tiny(body, huge);
    assert_status(&record, Status::Failed, &seen);
}

#[test]
fn a_failing_host_fails_the_job_and_the_others_are_killed_after_the_grace_period() {
    // Data hosts trap SIGTERM and carry on, so only SIGKILL ends them; the trainer fails once
    // they are running.
    let body = format!(
        r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = data_group ]; then
  trap 'echo "got SIGTERM, carrying on"' TERM
  {READY}
  while :; do sleep 0.1; done
fi
{AWAIT_DATA_HOSTS}
echo "out of memory on step 3" > "$SAGEMAKER_BASE_DIR/output/failure"
exit 3
"#
    );
    let grace = 1.0;
    let (_dir, local, seen, record, took) = run_tiny(&body, limits(20.0, grace));

    let trainer = trainer(&local);
    assert_status(&record, Status::Failed, &seen);
    assert_eq!(record.secondary_status, "Failed");
    assert_eq!(
        record.failure_reason.as_deref(),
        Some(
            format!(
                "AlgorithmError: out of memory on step 3 ({} in dnn_group, exit code 3)",
                trainer.host.name
            )
            .as_str()
        )
    );
    assert_eq!(seen.stopping, [record.failure_reason.clone().unwrap()]);
    for h in &record.hosts {
        if h.host.group == "dnn_group" {
            assert_eq!((h.exit_code, h.signal), (Some(3), None));
        } else {
            assert_eq!(
                (h.exit_code, h.signal),
                (None, Some(libc::SIGKILL)),
                "{} needed SIGKILL",
                h.host.name
            );
            let log = std::fs::read_to_string(&h.log).unwrap();
            assert!(
                log.contains("got SIGTERM, carrying on"),
                "{} was sent SIGTERM first: {log}",
                h.host.name
            );
            // SIGKILL came after the grace period, not at once.
            let after = seen.exited_at(&h.host.name) - seen.exited_at(&trainer.host.name);
            assert!(
                after.as_secs_f64() >= grace * 0.95,
                "{h:?} ended {after:?} after the trainer"
            );
        }
    }
    assert!(took < Duration::from_secs(10), "stopped within {took:?}");
}

#[test]
fn hosts_that_heed_sigterm_end_without_sigkill_when_one_fails() {
    let body = format!(
        r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = data_group ]; then
  {READY}
  sleep 30
  exit 0
fi
{AWAIT_DATA_HOSTS}
exit 1
"#
    );
    // A long grace period: the data hosts must not need it.
    let (_dir, local, seen, record, took) = run_tiny(&body, limits(20.0, 30.0));
    assert!(took < Duration::from_secs(10));
    assert_status(&record, Status::Failed, &seen);
    let trainer = trainer(&local);
    assert_eq!(
        record.failure_reason.as_deref(),
        Some(
            format!(
                "AlgorithmError: {} in dnn_group ended with exit code 1",
                trainer.host.name
            )
            .as_str()
        ),
        "without output/failure the exit status is the reason"
    );
    assert_data_hosts_got_sigterm(&record);
}

#[test]
fn a_host_killed_from_outside_fails_the_job_and_takes_its_children() {
    // The trainer starts a child that would outlive it, then is killed with SIGKILL.
    let body = r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = data_group ]; then
  exec sleep 30
fi
sleep 30 &
echo $! > "$SAGEMAKER_BASE_DIR/output/child.pid"
echo $$ > "$SAGEMAKER_BASE_DIR/output/pid"
wait
"#;
    let (_dir, local) = tiny(body, limits(20.0, 1.0));
    let trainer = trainer(&local).clone();
    let pid_file = trainer.base_dir.join("output/pid");
    let killer = {
        let pid_file = pid_file.clone();
        thread::spawn(move || {
            let pid = read_pid(&pid_file);
            // SAFETY: signals one process of this test.
            assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
            pid
        })
    };
    let mut seen = Seen::default();
    let started = Instant::now();
    let record = run(&local, &StopRequests::new(), &mut seen);
    let killed = killer.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));

    assert_status(&record, Status::Failed, &seen);
    assert_eq!(
        record.failure_reason.as_deref(),
        Some(
            format!(
                "AlgorithmError: {} in dnn_group ended with signal 9 (SIGKILL)",
                trainer.host.name
            )
            .as_str()
        )
    );
    let host = record
        .hosts
        .iter()
        .find(|h| h.host.name == trainer.host.name)
        .unwrap();
    assert_eq!(host.pid, killed);
    assert_eq!((host.exit_code, host.signal), (None, Some(libc::SIGKILL)));
    let child = read_pid(&trainer.base_dir.join("output/child.pid"));
    assert!(!alive(child), "the killed host's child {child} survived it");
    // `exec sleep` heeds SIGTERM.
    assert_data_hosts_got_sigterm(&record);
}

#[test]
fn the_max_runtime_stops_the_job() {
    let body = r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  trap 'echo "ignoring SIGTERM"' TERM
fi
while :; do sleep 0.1; done
"#;
    let (_dir, _, seen, record, took) = run_tiny(body, limits(0.5, 1.0));

    assert_status(&record, Status::Stopped, &seen);
    assert_eq!(record.secondary_status, "MaxRuntimeExceeded");
    let reason = record.failure_reason.clone().unwrap();
    assert!(
        reason.contains("max runtime") && reason.contains("0.5 s"),
        "{reason}"
    );
    assert_eq!(seen.stopping, [reason]);
    assert!(
        took >= Duration::from_millis(500),
        "stopped early: {took:?}"
    );
    assert!(took < Duration::from_secs(10), "stopped within {took:?}");
    for h in &record.hosts {
        let expected = if h.host.group == "dnn_group" {
            libc::SIGKILL
        } else {
            libc::SIGTERM
        };
        assert_eq!(h.signal, Some(expected), "{h:?}");
    }
}

#[test]
fn the_supervisor_sleeps_while_it_waits_out_the_grace_period() {
    // After the max runtime passed, every host ignores SIGTERM for the whole grace period: the
    // supervisor must wait for them, not spin.
    let body = "trap '' TERM\nwhile :; do sleep 0.1; done";
    let (_dir, local) = tiny(body, limits(0.2, 2.0));
    let mut seen = Seen::default();
    let cpu = thread_cpu_time();
    let wall = Instant::now();
    let record = run(&local, &StopRequests::new(), &mut seen);
    let (cpu, wall) = (thread_cpu_time() - cpu, wall.elapsed());
    assert_eq!(record.secondary_status, "MaxRuntimeExceeded");
    assert!(wall >= Duration::from_secs(2), "{wall:?}");
    assert!(
        cpu < Duration::from_millis(500),
        "the supervisor used {cpu:?} of CPU in {wall:?} while waiting"
    );
}

#[test]
fn a_stop_request_stops_the_job() {
    let body = format!("{READY}\nsleep 30\n");
    let (_dir, _, seen, record, took) = run_tiny_stopped(&body, limits(20.0, 30.0), 1);
    assert!(took < Duration::from_secs(10), "{took:?}");

    assert_eq!(record.status, Status::Stopped);
    assert_eq!(record.secondary_status, "Stopped");
    let reason = record.failure_reason.clone().unwrap();
    assert!(reason.contains("request"), "{reason}");
    assert_eq!(seen.stopping, [reason]);
    for h in &record.hosts {
        assert_eq!(
            (h.exit_code, h.signal),
            (None, Some(libc::SIGTERM)),
            "{h:?}: SIGTERM sufficed"
        );
    }
}

#[test]
fn a_second_stop_request_kills_at_once() {
    let body =
        format!("trap 'echo \"SIGTERM, ignored\"' TERM\n{READY}\nwhile :; do sleep 0.1; done\n");
    let (_dir, _, _, record, took) = run_tiny_stopped(&body, limits(20.0, 60.0), 2);
    assert!(
        took < Duration::from_secs(10),
        "did not wait out the 60 s grace period"
    );
    assert_eq!(record.status, Status::Stopped);
    for h in &record.hosts {
        assert_eq!(h.signal, Some(libc::SIGKILL), "{h:?}");
        assert!(
            std::fs::read_to_string(&h.log)
                .unwrap()
                .contains("SIGTERM, ignored")
        );
    }
}

/// Asks for a stop as soon as the first host has started, while the others are still starting.
struct StopOnFirstStart {
    stop: StopRequests,
    seen: Seen,
}

impl Observer for StopOnFirstStart {
    fn started(&mut self, host: &hetgen_local::Host, pid: u32) {
        if self.seen.started.is_empty() {
            self.stop.request();
        }
        self.seen.started(host, pid);
    }
    fn output(&mut self, host: &hetgen_local::Host, stream: Stream, line: &str) {
        self.seen.output(host, stream, line);
    }
}

#[test]
fn a_stop_requested_while_hosts_start_is_not_lost() {
    let (_dir, local) = tiny("sleep 30", limits(3.0, 1.0));
    let stop = StopRequests::new();
    let mut observer = StopOnFirstStart {
        stop: stop.clone(),
        seen: Seen::default(),
    };
    let record = local.run(&stop, &mut observer).unwrap();
    assert_no_process_left(&local, &record);
    assert_eq!(record.status, Status::Stopped);
    assert_eq!(
        record.secondary_status, "Stopped",
        "{:?}",
        record.failure_reason
    );
}

#[test]
fn a_trainer_that_completes_waits_for_the_data_hosts_to_exit() {
    // hetgen-local has no rule of its own for a trainer that finishes first: as on SageMaker,
    // the job completes when every host's process has exited. The real data servers exit on the
    // trainer's Shutdown RPC; here they exit once the trainer's marker file appears.
    let body = r#"
JOB_DIR="$SAGEMAKER_BASE_DIR/../.."
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  touch "$JOB_DIR/trainer-done"
  exit 0
fi
n=0
while [ ! -e "$JOB_DIR/trainer-done" ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done
[ -e "$JOB_DIR/trainer-done" ] || exit 9
sleep 0.5
echo "shut down"
"#;
    let (_dir, _, seen, record, _) = run_tiny(body, limits(20.0, 1.0));
    assert_status(&record, Status::Completed, &seen);
    for h in record.hosts.iter().filter(|h| h.host.group == "data_group") {
        // Not signalled (a TERM would end `sleep` and the shell with signal 15): it exited itself.
        assert_eq!((h.exit_code, h.signal), (Some(0), None), "{h:?}");
        assert!(record.duration_s >= h.duration_s);
        assert!(
            std::fs::read_to_string(&h.log)
                .unwrap()
                .contains("shut down")
        );
    }
}

#[test]
fn data_hosts_that_never_exit_keep_the_job_running_until_its_max_runtime() {
    // The other side of the rule above: a completed trainer does not end the job by itself.
    let body = r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then exit 0; fi
exec sleep 30
"#;
    let (_dir, _, seen, record, _) = run_tiny(body, limits(0.8, 1.0));
    assert_status(&record, Status::Stopped, &seen);
    assert_eq!(record.secondary_status, "MaxRuntimeExceeded");
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.host.group == "dnn_group")
        .unwrap();
    assert_eq!(trainer.exit_code, Some(0));
    assert_data_hosts_got_sigterm(&record);
}

#[test]
fn a_process_that_leaves_its_host_group_does_not_hang_the_run() {
    // Only a process that left its host's process group survives the host; it still holds the
    // output pipe, and the run must end anyway (within the drain time).
    let body = r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  setsid sleep 6 &
  echo $! > "$SAGEMAKER_BASE_DIR/output/escaped.pid"
fi
exit 0
"#;
    let (_dir, local) = tiny(body, limits(20.0, 1.0));
    let mut seen = Seen::default();
    let started = Instant::now();
    let record = local.run(&StopRequests::new(), &mut seen).unwrap();
    let took = started.elapsed();
    let escaped = read_pid(&trainer(&local).base_dir.join("output/escaped.pid"));
    // SAFETY: the escaped process is this test's; it is ended here, not left to linger.
    unsafe { libc::kill(escaped as libc::pid_t, libc::SIGKILL) };
    assert_eq!(record.status, Status::Completed);
    assert!(
        took < Duration::from_secs(5),
        "the run waited {took:?} for the escaped process"
    );
}

#[test]
fn a_launcher_that_cannot_start_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing: PathBuf = dir.path().join("no-such-launcher");
    let local = prepare(&job(TINY), options(dir.path(), &missing));
    let mut seen = Seen::default();
    match local.run(&StopRequests::new(), &mut seen) {
        Err(e @ LocalError::Spawn { .. }) => {
            assert!(e.to_string().contains("algo-1"), "{e}");
            assert!(e.to_string().contains("no-such-launcher"), "{e}");
        }
        other => panic!("a missing launcher gave {other:?}"),
    }
    assert!(seen.started.is_empty());
}

#[test]
fn the_reason_is_the_script_that_raised_first_not_a_peer_that_ended_first() {
    // The trainer's script raises, and is slow to end; a data host's script fails a moment
    // after (as a rank whose peer vanished fails with "connection closed") and ends first.
    let body = r#"
job="$SAGEMAKER_BASE_DIR/../.."
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  # The stop the data host's failure starts must not cut its account short (hetgen's
  # launcher, too, writes the failure file after a SIGTERM).
  trap '' TERM
  echo "Traceback (most recent call last):"
  echo "RuntimeError: the real cause"
  touch "$job/raised"
  sleep 1
  echo "the real cause" > "$SAGEMAKER_BASE_DIR/output/failure"
  exit 2
fi
while [ ! -e "$job/raised" ]; do sleep 0.05; done
echo "Traceback (most recent call last):" >&2
echo "connection closed by peer" > "$SAGEMAKER_BASE_DIR/output/failure"
exit 1
"#;
    let (_dir, local, seen, record, _) = run_tiny(body, limits(20.0, 5.0));
    assert_status(&record, Status::Failed, &seen);
    let trainer = trainer(&local);
    assert_eq!(
        record.failure_reason.as_deref(),
        Some(
            format!(
                "AlgorithmError: the real cause ({} in dnn_group, exit code 2)",
                trainer.host.name
            )
            .as_str()
        )
    );
}

#[test]
fn sigkill_after_the_grace_period_takes_a_session_a_host_started() {
    // As hetgen's start of a container on AWS's image does, the data hosts run their work in
    // a session of its own, which neither they nor it end on SIGTERM.
    let body = format!(
        r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = data_group ]; then
  trap '' TERM
  setsid sh -c 'trap "" TERM; echo $$ > "$SAGEMAKER_BASE_DIR/output/session.pid"; while :; do sleep 0.1; done' &
  while [ ! -s "$SAGEMAKER_BASE_DIR/output/session.pid" ]; do sleep 0.05; done
  {READY}
  while :; do sleep 0.1; done
fi
{AWAIT_DATA_HOSTS}
exit 3
"#
    );
    let (_dir, local, seen, record, _) = run_tiny(&body, limits(20.0, 1.0));
    assert_status(&record, Status::Failed, &seen);
    for command in local
        .commands
        .iter()
        .filter(|c| c.host.group == "data_group")
    {
        let session = read_pid(&command.base_dir.join("output/session.pid"));
        assert!(
            !alive(session),
            "{}'s session {session} survived",
            command.host.name
        );
    }
}

/// A host that waits for others to be Ready (a Kubernetes trainer pod for its data pods) and
/// whose data hosts all exit before any was: it never starts, and the job fails naming it
/// instead of waiting for ever.
#[test]
fn a_host_whose_dependencies_exit_before_they_are_ready_never_starts_and_the_job_fails() {
    let (_dir, mut local) = tiny("exit 0", limits(20.0, 1.0));
    // Nothing answers a health check there: the data hosts exit without ever being Ready.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let i = local
        .commands
        .iter()
        .position(|c| c.host.group == "dnn_group")
        .unwrap();
    local.commands[i].waits_for = vec![nowhere];
    let trainer = local.commands[i].host.name.clone();
    let mut seen = Seen::default();
    let started = Instant::now();
    let record = run(&local, &StopRequests::new(), &mut seen);
    assert_status(&record, Status::Failed, &seen);
    let reason = record.failure_reason.clone().unwrap();
    assert!(
        reason.starts_with(&format!("{trainer} never started")),
        "{reason}"
    );
    assert!(seen.started.iter().all(|(h, _)| *h != trainer), "{seen:?}");
    let host = record
        .hosts
        .iter()
        .find(|h| h.host.name == trainer)
        .unwrap();
    assert_eq!((host.pid, host.exit_code, host.signal), (0, None, None));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A host still waiting when the job fails never starts.
#[test]
fn a_waiting_host_does_not_start_once_the_job_is_failing() {
    let body = r#"
if [ "$SM_CURRENT_INSTANCE_GROUP" = data_group ]; then
  sleep 0.3
  exit 4
fi
exit 0
"#;
    let (_dir, mut local) = tiny(body, limits(20.0, 1.0));
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for c in local
        .commands
        .iter_mut()
        .filter(|c| c.host.group == "dnn_group")
    {
        c.waits_for = vec![nowhere];
    }
    let mut seen = Seen::default();
    let record = run(&local, &StopRequests::new(), &mut seen);
    assert_status(&record, Status::Failed, &seen);
    assert!(
        record
            .failure_reason
            .as_deref()
            .unwrap()
            .contains("exit code 4"),
        "{:?}",
        record.failure_reason
    );
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.host.group == "dnn_group")
        .unwrap();
    assert_eq!(trainer.pid, 0, "{trainer:?}");
}
