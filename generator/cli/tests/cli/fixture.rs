//! A scripted SageMaker endpoint for what moto cannot do (StopTrainingJob, status
//! transitions): it answers the AWS JSON 1.1 protocol on 127.0.0.1 with a fixed sequence of
//! DescribeTrainingJob states and records every operation it was called with. Calls to other
//! services (CloudWatch Logs) can be passed on to moto's server, so one endpoint URL serves a
//! scripted job and the emulator's logs.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::http::{Request, listen, read_request, write_reply};

pub struct Fixture {
    pub url: String,
    calls: Arc<Mutex<Vec<String>>>,
}

/// Called with the index of each DescribeTrainingJob call (0 first) before it is answered.
pub type Hook = Arc<dyn Fn(usize) + Send + Sync>;

/// Where calls that are not SageMaker's go, and what runs before each status is served.
#[derive(Default)]
struct Extras {
    upstream: Option<String>,
    hook: Option<Hook>,
    /// How many GetLogEvents calls are still to be refused as throttled.
    throttled: Arc<Mutex<usize>>,
}

impl Fixture {
    /// Serves `states` — (status, secondary status, failure reason) — one per
    /// DescribeTrainingJob call, repeating the last.
    pub fn start(states: &[(&str, &str, Option<&str>)]) -> Fixture {
        Fixture::with_create_errors(states, &[])
    }

    /// Like [`Fixture::start`], but the first CreateTrainingJob calls fail with `errors`
    /// (`(error type, message)`, HTTP 400), one per call, before one succeeds.
    pub fn with_create_errors(
        states: &[(&str, &str, Option<&str>)],
        errors: &[(&str, &str)],
    ) -> Fixture {
        Fixture::serve(states, errors, Extras::default())
    }

    /// Like [`Fixture::start`], passing every call that is not SageMaker's to `upstream` (a
    /// moto server's URL), calling `hook` before each DescribeTrainingJob is answered, and
    /// refusing the first `throttled` GetLogEvents calls with CloudWatch's ThrottlingException.
    pub fn with_upstream(
        states: &[(&str, &str, Option<&str>)],
        upstream: &str,
        hook: impl Fn(usize) + Send + Sync + 'static,
        throttled: usize,
    ) -> Fixture {
        let extras = Extras {
            upstream: Some(upstream.trim_start_matches("http://").to_owned()),
            hook: Some(Arc::new(hook)),
            throttled: Arc::new(Mutex::new(throttled)),
        };
        Fixture::serve(states, &[], extras)
    }

    fn serve(
        states: &[(&str, &str, Option<&str>)],
        errors: &[(&str, &str)],
        extras: Extras,
    ) -> Fixture {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let states: Vec<Value> = states
            .iter()
            .map(|(status, secondary, reason)| {
                let mut out = json!({
                    "TrainingJobName": "fixture-job",
                    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/fixture-job",
                    "TrainingJobStatus": status,
                    "SecondaryStatus": secondary,
                    "CreationTime": 1_796_237_427.0,
                    "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
                    "ResourceConfig": {"VolumeSizeInGB": 30},
                    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
                    "ModelArtifacts": {"S3ModelArtifacts": "s3://b/o/model.tar.gz"}
                });
                if let Some(r) = reason {
                    out["FailureReason"] = json!(r);
                }
                out
            })
            .collect();
        let next = Arc::new(Mutex::new(0usize));
        let errors: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(
            errors
                .iter()
                .rev()
                .map(|(kind, message)| json!({"__type": kind, "message": message}))
                .collect(),
        ));
        let recorded = calls.clone();
        let url = listen(move |stream| serve(stream, &recorded, &states, &next, &errors, &extras));
        Fixture { url, calls }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

fn serve(
    stream: TcpStream,
    calls: &Mutex<Vec<String>>,
    states: &[Value],
    next: &Mutex<usize>,
    errors: &Mutex<Vec<Value>>,
    extras: &Extras,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    while let Some(Request { head, target, body }) = read_request(&mut reader) {
        if !target.starts_with("SageMaker.")
            && let Some(upstream) = &extras.upstream
        {
            calls.lock().unwrap().push(target.clone());
            let mut throttled = extras.throttled.lock().unwrap();
            if target.ends_with(".GetLogEvents") && *throttled > 0 {
                *throttled -= 1;
                let refusal = json!({"__type": "ThrottlingException", "message": "Rate exceeded"});
                if write_reply(&mut writer, "400 Bad Request", &refusal).is_err() {
                    return;
                }
                continue;
            }
            drop(throttled);
            if relay(upstream, &head, &body, &mut writer).is_err() {
                return;
            }
            continue;
        }
        let operation = target.trim_start_matches("SageMaker.").to_owned();
        calls.lock().unwrap().push(operation.clone());
        let error = (operation == "CreateTrainingJob")
            .then(|| errors.lock().unwrap().pop())
            .flatten();
        let status = if error.is_some() {
            "400 Bad Request"
        } else {
            "200 OK"
        };
        let reply = match operation.as_str() {
            _ if error.is_some() => error.unwrap(),
            "DescribeTrainingJob" => {
                let mut i = next.lock().unwrap();
                if let Some(hook) = &extras.hook {
                    hook(*i);
                }
                let state = states[(*i).min(states.len() - 1)].clone();
                *i += 1;
                state
            }
            "CreateTrainingJob" => {
                json!({"TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/fixture-job"})
            }
            _ => json!({}),
        };
        if write_reply(&mut writer, status, &reply).is_err() {
            return;
        }
    }
}

/// Sends one request to `upstream` and its whole response back, byte for byte.
fn relay(upstream: &str, head: &str, body: &[u8], writer: &mut TcpStream) -> std::io::Result<()> {
    let mut up = TcpStream::connect(upstream)?;
    // One request per connection upstream: its response ends where the connection does.
    up.write_all(head.as_bytes())?;
    up.write_all(b"Connection: close\r\n\r\n")?;
    up.write_all(body)?;
    let mut response = Vec::new();
    up.read_to_end(&mut response)?;
    writer.write_all(&response)
}
