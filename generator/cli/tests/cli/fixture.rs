//! A scripted SageMaker endpoint for what moto cannot do (StopTrainingJob, status
//! transitions): it answers the AWS JSON 1.1 protocol on 127.0.0.1 with a fixed sequence of
//! DescribeTrainingJob states and records every operation it was called with.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub struct Fixture {
    pub url: String,
    calls: Arc<Mutex<Vec<String>>>,
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
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
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
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (calls, states, next, errors) = (
                    recorded.clone(),
                    states.clone(),
                    next.clone(),
                    errors.clone(),
                );
                std::thread::spawn(move || serve(stream, &calls, &states, &next, &errors));
            }
        });
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
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut target = String::new();
        let mut length = 0usize;
        let mut line = String::new();
        // Request line, then headers up to the blank line; EOF ends the connection.
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.to_ascii_lowercase().as_str() {
                    "x-amz-target" => target = value.trim().to_owned(),
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
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
                let state = states[(*i).min(states.len() - 1)].clone();
                *i += 1;
                state
            }
            "CreateTrainingJob" => {
                json!({"TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/fixture-job"})
            }
            _ => json!({}),
        };
        let text = reply.to_string();
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}
