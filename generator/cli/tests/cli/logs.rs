//! `hetgen deploy --wait` and `hetgen logs` reading a job's CloudWatch logs from moto's server,
//! while a scripted endpoint plays the job's status; and `hetgen logs` on a local run's folder.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::aws::{Moto, aws_command, job_command, rendered_project};
use super::fixture::Fixture;
use super::{code, stderr, stdout};

const GROUP: &str = "/aws/sagemaker/TrainingJobs";
/// The job name the fixture's CreateTrainingJob and `--name` agree on.
const JOB: &str = "logs-job";

/// One CloudWatch Logs call to moto (the JSON 1.1 protocol; moto checks no signature).
fn call(moto: &str, operation: &str, body: Value) -> Value {
    let body = body.to_string();
    let mut stream = TcpStream::connect(moto.trim_start_matches("http://")).unwrap();
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: {host}\r\nX-Amz-Target: Logs_20140328.{operation}\r\n\
         Content-Type: application/x-amz-json-1.1\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20261204/us-east-1/logs/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len(),
        host = moto.trim_start_matches("http://"),
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.contains(" 200 "), "{operation}: {response}");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// Writes `lines` to `host`'s stream of the job, creating it on first use.
struct Writer {
    moto: String,
    created: Mutex<Vec<String>>,
    /// Each line's time: one millisecond after the previous one, across hosts.
    clock: AtomicI64,
}

impl Writer {
    fn new(moto: &str) -> Writer {
        call(moto, "CreateLogGroup", json!({"logGroupName": GROUP}));
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        Writer {
            moto: moto.to_owned(),
            created: Mutex::new(Vec::new()),
            clock: AtomicI64::new(now.as_millis() as i64 - 600_000),
        }
    }

    /// `algo-1`'s stream, or with `algo-1@restart` the stream of its second container start.
    fn stream(host: &str) -> String {
        match host.split_once('@') {
            Some((host, _)) => format!("{JOB}/{host}-1796396200"),
            None => format!("{JOB}/{host}-1796396099"),
        }
    }

    /// Lines of several hosts, interleaved: each gets the next time.
    fn write(&self, lines: &[(&str, String)]) {
        let mut by_stream: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (host, message) in lines {
            let at = self.clock.fetch_add(1, Ordering::SeqCst);
            by_stream
                .entry(Writer::stream(host))
                .or_default()
                .push(json!({"timestamp": at, "message": message}));
        }
        for (stream, events) in by_stream {
            let mut created = self.created.lock().unwrap();
            if !created.contains(&stream) {
                call(
                    &self.moto,
                    "CreateLogStream",
                    json!({"logGroupName": GROUP, "logStreamName": stream}),
                );
                created.push(stream.clone());
            }
            // CloudWatch takes at most 10 000 events a call.
            for chunk in events.chunks(10_000) {
                call(
                    &self.moto,
                    "PutLogEvents",
                    json!({"logGroupName": GROUP, "logStreamName": stream, "logEvents": chunk}),
                );
            }
        }
    }
}

/// A job's output in four phases, one per DescribeTrainingJob: the first lines of two hosts
/// (each names its group), a page-filling burst from one of them, a third host whose stream
/// appears late, and last lines (with the summary) written as the job ends. Returns the hosts
/// and messages in time order.
fn phases(
    writer: Arc<Writer>,
) -> (
    impl Fn(usize) + Send + Sync + 'static,
    Vec<(&'static str, String)>,
) {
    let mut expected = Vec::new();
    let mut script: Vec<Vec<(&'static str, String)>> = vec![Vec::new(); 4];
    let mut add = |phase: usize, host: &'static str, message: String| {
        expected.push((host, message.clone()));
        script[phase].push((host, message));
    };
    add(
        0,
        "algo-1",
        "INFO starting role host=\"algo-1\" group=\"dnn_group\" role=Trainer job=logs-job".into(),
    );
    add(0, "algo-2", "SM_CURRENT_INSTANCE_GROUP=data_group".into());
    for i in 0..20 {
        let host = if i % 2 == 0 { "algo-1" } else { "algo-2" };
        add(0, host, format!("line {i} of the first phase"));
    }
    // More than one page of GetLogEvents (10 000 events) from one stream.
    for i in 0..10_050 {
        add(1, "algo-2", format!("burst {i}"));
    }
    add(
        1,
        "algo-1",
        "hetgen-step step=40 loss=0.5000 step_ms=10.00 wait_ms=0.50 samples_per_s=3200.0".into(),
    );
    add(2, "algo-3", "SM_CURRENT_INSTANCE_GROUP=data_group".into());
    for i in 0..10 {
        let host = ["algo-1", "algo-2", "algo-3"][i % 3];
        add(2, host, format!("line {i} after the late stream"));
    }
    // algo-1's container restarts: a second stream of the same host.
    for i in 0..3 {
        add(
            2,
            "algo-1@restart",
            format!("line {i} after algo-1 restarted"),
        );
    }
    add(
        3,
        "algo-1",
        r#"hetgen-summary {"steps":40,"epochs_started":1,"samples":1280,"mean_step_ms":10.0,"mean_wait_ms":0.5,"stall_fraction":0.05,"samples_per_s":3200.0,"final_loss":0.5,"device":"cuda","model":"mnist_cnn","replicas":1,"resumed_from_step":null,"batches_by_source":{"algo-2":30,"algo-3":10},"local_threads":0}"#.into(),
    );
    add(3, "algo-2", "the last line".into());
    let hook = move |i: usize| {
        if let Some(lines) = script.get(i) {
            writer.write(lines);
        }
    };
    (hook, expected)
}

fn states() -> [(&'static str, &'static str, Option<&'static str>); 5] {
    [
        ("InProgress", "Starting", None),
        ("InProgress", "Training", None),
        ("InProgress", "Training", None),
        ("Completed", "Completed", None),
        ("Completed", "Completed", None),
    ]
}

/// moto's server, and a scripted job in front of it whose output follows [`phases`], the first
/// `throttled` log reads refused; the lines the job writes.
fn scripted_job(
    states: &[(&str, &str, Option<&str>)],
    throttled: usize,
) -> (Moto, Fixture, Vec<(&'static str, String)>) {
    let moto = Moto::start();
    let writer = Arc::new(Writer::new(&moto.url));
    let (hook, expected) = phases(writer);
    let fixture = Fixture::with_upstream(states, &moto.url, hook, throttled);
    (moto, fixture, expected)
}

/// `hetgen deploy --wait` (and `extra`) of a rendered example as job [`JOB`], polling fast.
fn deploy_wait(fixture: &Fixture, extra: &[&str]) -> (tempfile::TempDir, Command) {
    let project = rendered_project("mnist-hetero.toml");
    let mut args = vec!["deploy", "--wait", "--name", JOB, "--poll-interval", "0.05"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--endpoint-url", &fixture.url]);
    let command = aws_command(&args, project.path(), true);
    (project, command)
}

/// `hetgen logs JOB` (and `extra`) against `fixture`, polling fast.
fn logs(fixture: &Fixture, extra: &[&str]) -> std::process::Output {
    let args = [&["logs", JOB, "--poll-interval", "0.05"], extra].concat();
    job_command(&args, &fixture.url, true)
}

/// The messages of `text`'s labelled lines, in order, with each label seen per host.
fn labelled_lines(text: &str) -> (Vec<String>, BTreeMap<String, String>) {
    let mut messages = Vec::new();
    let mut labels = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix('[') else {
            continue;
        };
        let Some((label, message)) = rest.split_once(']') else {
            continue;
        };
        let host = label.split(' ').next().unwrap().to_owned();
        labels.insert(host, format!("[{label}]"));
        messages.push(message.trim_start().to_owned());
    }
    (messages, labels)
}

fn assert_each_once_in_order(seen: &[String], expected: &[(&str, String)], text: &str) {
    let expected: Vec<String> = expected.iter().map(|(_, m)| m.clone()).collect();
    assert_eq!(
        seen.len(),
        expected.len(),
        "every line once: {} seen, {} written\n{}",
        seen.len(),
        expected.len(),
        &text[text.len().saturating_sub(3000)..]
    );
    assert!(seen == expected, "in time order");
}

#[test]
fn deploy_wait_streams_every_hosts_lines_once_in_time_order_with_their_groups() {
    let (_moto, fixture, expected) = scripted_job(&states(), 0);
    let out = deploy_wait(&fixture, &[]).1.output().unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{}", &err[err.len().saturating_sub(3000)..]);
    let (seen, labels) = labelled_lines(&err);
    assert_each_once_in_order(&seen, &expected, &err);
    assert_eq!(labels["algo-1"], "[algo-1 dnn_group]");
    assert_eq!(labels["algo-2"], "[algo-2 data_group]");
    assert_eq!(labels["algo-3"], "[algo-3 data_group]");
    // Status changes stay, and the trainer's summary closes the run.
    assert!(err.contains("InProgress · Training"), "{err}");
    assert!(err.contains("stall 5.0 %"), "{err}");
    assert!(err.contains("input: 40 batches received: algo-2 75.0 %, algo-3 25.0 %"));
    // The job's stream listing was paged through moto, not answered by the fixture.
    assert!(
        fixture
            .calls()
            .iter()
            .any(|c| c == "Logs_20140328.GetLogEvents")
    );
}

#[test]
fn no_logs_follows_the_status_only() {
    let (_moto, fixture, _) = scripted_job(&states(), 0);
    let out = deploy_wait(&fixture, &["--no-logs"]).1.output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("[algo-1"), "{}", stderr(&out));
    assert!(fixture.calls().iter().all(|c| !c.starts_with("Logs_")));
}

#[test]
fn logs_follow_prints_each_line_once_and_json_parses() {
    let (_moto, fixture, expected) = scripted_job(&states(), 0);
    let logs = |extra: &[&str]| logs(&fixture, extra);
    let out = logs(&["--follow"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let (seen, labels) = labelled_lines(&text);
    assert_each_once_in_order(&seen, &expected, &text);
    assert_eq!(labels["algo-3"], "[algo-3 data_group]");

    // The job has ended: the whole log again, as JSON, one host's group only.
    let out = logs(&["--format", "json", "--group", "dnn_group"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let of = |host: &str| -> Vec<String> {
        expected
            .iter()
            .filter(|(h, _)| h.split('@').next() == Some(host))
            .map(|(_, m)| m.clone())
            .collect()
    };
    let messages: Vec<String> = lines
        .iter()
        .map(|l| l["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(messages, of("algo-1"));
    assert!(lines.iter().all(|l| l["host"] == "algo-1"), "{lines:?}");
    assert!(lines.iter().all(|l| l["group"] == "dnn_group"));
    assert!(
        lines
            .iter()
            .all(|l| l["time"].as_str().unwrap().ends_with('Z'))
    );
    let times: Vec<&str> = lines.iter().map(|l| l["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // One host, by name.
    let out = logs(&["--host", "algo-3"]);
    let (seen, _) = labelled_lines(&stdout(&out));
    assert_eq!(seen, of("algo-3"), "{}", stdout(&out));
}

#[test]
fn throttled_reads_are_retried_and_lose_no_line() {
    // Two refusals in a row: within the client's retries, with backoff between them.
    let (_moto, fixture, expected) = scripted_job(&states(), 2);
    let out = logs(&fixture, &["--follow"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let (seen, _) = labelled_lines(&text);
    assert_each_once_in_order(&seen, &expected, &text);
    let calls = fixture.calls();
    let reads = calls
        .iter()
        .filter(|c| c.ends_with(".GetLogEvents"))
        .count();
    assert!(reads > 2, "{calls:?}");
}

#[test]
fn ctrl_c_stops_following_and_leaves_the_job_running() {
    // The job never ends.
    let (_moto, fixture, _) = scripted_job(&[("InProgress", "Training", None)], 0);
    let (project, mut deploy) = deploy_wait(&fixture, &[]);
    // Output to a file: a pipe nobody reads while the job is followed would fill up.
    let log = project.path().join("deploy.log");
    let child = deploy
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Following: several polls done.
    let deadline = Instant::now() + Duration::from_secs(60);
    while fixture
        .calls()
        .iter()
        .filter(|c| *c == "DescribeTrainingJob")
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "never followed: {:?}",
            fixture.calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let mut child = child;
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("the job goes on running"), "{err}");
    assert!(
        err.contains(&format!("hetgen logs {JOB} --follow")),
        "{err}"
    );
    assert!(err.contains(&format!("hetgen stop {JOB}")), "{err}");
    assert!(
        !fixture.calls().iter().any(|c| c == "StopTrainingJob"),
        "the job is left alone"
    );
}

#[test]
fn deploy_wait_names_the_script_that_raised_first_not_the_host_that_ended_first() {
    // algo-1's script raises; algo-2's fails a moment later because its peer is gone, ends
    // first, and is the host SageMaker's reason names.
    let moto = Moto::start();
    let writer = Arc::new(Writer::new(&moto.url));
    let lines: Vec<(&'static str, String)> = [
        ("algo-1", "[rank1]:Traceback (most recent call last):"),
        ("algo-1", "[rank1]:  File \"train.py\", line 6, in <module>"),
        ("algo-2", "Traceback (most recent call last):"),
        (
            "algo-2",
            "  File \"distributed_c10d.py\", line 5356, in barrier",
        ),
        ("algo-2", "RuntimeError: Connection closed by peer"),
        ("algo-1", "[rank1]:RuntimeError: rank 1 gives up on purpose"),
    ]
    .into_iter()
    .map(|(host, line)| (host, line.to_owned()))
    .collect();
    let hook = move |i: usize| {
        if i == 1 {
            writer.write(&lines);
        }
    };
    let sagemaker = "AlgorithmError: RuntimeError: Connection closed by peer (algo-2)";
    let states = [
        ("InProgress", "Training", None),
        ("InProgress", "Training", None),
        ("Failed", "Failed", Some(sagemaker)),
        ("Failed", "Failed", Some(sagemaker)),
    ];
    let fixture = Fixture::with_upstream(&states, &moto.url, hook, 0);
    let out = deploy_wait(&fixture, &[]).1.output().unwrap();
    let err = stderr(&out);
    assert_ne!(code(&out), 0, "{err}");
    // The diagnostic wraps its lines behind a margin.
    let flat = err
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ");
    let cause = "ended Failed: RuntimeError: rank 1 gives up on purpose (the first script to \
                 raise, on algo-1;";
    assert!(flat.contains(cause), "{err}");
    assert!(
        flat.contains(sagemaker),
        "SageMaker's own reason is kept: {err}"
    );
}
