//! A training job's CloudWatch logs: every host's lines, each exactly once, across polls.
//!
//! SageMaker sends each instance's output to the log group [`LOG_GROUP`], one stream per host
//! and container start, named `<job>/<host>-<epoch seconds>` (a host that restarts gets a new
//! stream beside its old one). [`JobLogs::poll`] lists the job's streams every time, so streams
//! created late are found, and reads each from where the previous poll stopped with the stream's
//! forward token: CloudWatch returns the token it was given once the stream has nothing newer,
//! so a line is never read twice, and a line written between polls is read by the next one.
//! Throttling and transient faults are retried with backoff by the client's retry policy
//! ([`crate::Aws`]).
//!
//! Lines come back ordered by time across hosts within one poll. Lines of one host that
//! CloudWatch ingests after another host's later lines were shown (its agent flushes every few
//! seconds) come in the next poll: following a running job, the order across hosts is the
//! order of arrival at that granularity; reading a finished job, it is exact.

use std::collections::BTreeMap;

use aws_sdk_cloudwatchlogs::Client;
use aws_sdk_cloudwatchlogs::error::ProvideErrorMetadata;

use crate::DeployError;

/// Where SageMaker training jobs log.
pub const LOG_GROUP: &str = "/aws/sagemaker/TrainingJobs";

/// Pages read from one stream in one poll: a stream with more waits for the next poll, so one
/// chatty host cannot hold back the others' lines (10 000 events a page at most).
const MAX_PAGES_PER_POLL: usize = 20;

/// One line of a host's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEvent {
    /// When the host wrote it, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// The host (`algo-1`), from the stream's name.
    pub host: String,
    /// The stream it came from (`<job>/algo-1-1733323549`).
    pub stream: String,
    /// The line, without its trailing newline.
    pub message: String,
}

/// The host a stream belongs to: `<job>/algo-1-1733323549` → `algo-1` (the suffix is the
/// container's start, in epoch seconds; a stream without one is named by what follows the job).
pub fn stream_host<'a>(job: &str, stream: &'a str) -> &'a str {
    let rest = stream
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix('/'))
        .unwrap_or(stream);
    match rest.rsplit_once('-') {
        Some((host, start))
            if !host.is_empty()
                && start.len() >= 9
                && start.bytes().all(|b| b.is_ascii_digit()) =>
        {
            host
        }
        _ => rest,
    }
}

/// Reads one job's streams forward, poll after poll.
pub struct JobLogs {
    client: Client,
    job: String,
    /// Lines before this time are skipped (`--since`), ms since the epoch.
    since_ms: Option<i64>,
    /// Every stream seen, with the forward token to read on from (`None`: from its start).
    streams: BTreeMap<String, Option<String>>,
}

impl JobLogs {
    /// Follows `job`'s logs from their start, or from `since_ms`.
    pub fn new(client: Client, job: &str, since_ms: Option<i64>) -> JobLogs {
        JobLogs {
            client,
            job: job.to_owned(),
            since_ms,
            streams: BTreeMap::new(),
        }
    }

    /// Whether any stream of the job has been seen yet.
    pub fn has_streams(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Every line written since the last poll, ordered by time (a stream's own order kept).
    pub async fn poll(&mut self) -> Result<Vec<LogEvent>, DeployError> {
        for stream in self.list_streams().await? {
            self.streams.entry(stream).or_insert(None);
        }
        let mut events = Vec::new();
        let names: Vec<String> = self.streams.keys().cloned().collect();
        for name in names {
            let token = self.streams.get(&name).cloned().flatten();
            let (lines, next) = self.read(&name, token).await?;
            events.extend(lines);
            self.streams.insert(name, next);
        }
        // Stable: equal times keep stream order, then each stream's own order.
        events.sort_by_key(|e| e.timestamp_ms);
        Ok(events)
    }

    /// The names of the job's streams, every page. No log group yet (no job has logged in this
    /// region) is no streams yet.
    async fn list_streams(&self) -> Result<Vec<String>, DeployError> {
        let mut names = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_log_streams()
                .log_group_name(LOG_GROUP)
                .log_stream_name_prefix(format!("{}/", self.job))
                .set_next_token(token.clone())
                .send()
                .await;
            let out = match out {
                Ok(out) => out,
                Err(e) if e.code() == Some("ResourceNotFoundException") => return Ok(names),
                Err(e) => {
                    return Err(DeployError::from_service(
                        "logs",
                        "DescribeLogStreams",
                        &self.job,
                        e,
                    ));
                }
            };
            names.extend(
                out.log_streams()
                    .iter()
                    .filter_map(|s| s.log_stream_name().map(str::to_owned)),
            );
            match out.next_token() {
                Some(next) if Some(next) != token.as_deref() => token = Some(next.to_owned()),
                _ => return Ok(names),
            }
        }
    }

    /// The lines of `stream` after `token`, and the token to read on from.
    async fn read(
        &self,
        stream: &str,
        mut token: Option<String>,
    ) -> Result<(Vec<LogEvent>, Option<String>), DeployError> {
        let host = stream_host(&self.job, stream).to_owned();
        let mut events = Vec::new();
        for _ in 0..MAX_PAGES_PER_POLL {
            let mut call = self
                .client
                .get_log_events()
                .log_group_name(LOG_GROUP)
                .log_stream_name(stream)
                .start_from_head(true)
                .set_next_token(token.clone());
            if token.is_none() {
                call = call.set_start_time(self.since_ms);
            }
            let out = match call.send().await {
                Ok(out) => out,
                // Listed, then gone (its retention ended): nothing more to read.
                Err(e) if e.code() == Some("ResourceNotFoundException") => break,
                Err(e) => {
                    return Err(DeployError::from_service(
                        "logs",
                        "GetLogEvents",
                        &self.job,
                        e,
                    ));
                }
            };
            events.extend(out.events().iter().map(|e| {
                LogEvent {
                    timestamp_ms: e.timestamp().unwrap_or_default(),
                    host: host.clone(),
                    stream: stream.to_owned(),
                    message: e
                        .message()
                        .unwrap_or_default()
                        .trim_end_matches(['\n', '\r'])
                        .to_owned(),
                }
            }));
            let next = out.next_forward_token().map(str::to_owned);
            // The same token back: the end of the stream for now.
            let at_end = next.is_none() || next == token;
            if next.is_some() {
                token = next;
            }
            if at_end {
                break;
            }
        }
        Ok((events, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streams_host_is_its_name_without_the_job_and_start_time() {
        assert_eq!(stream_host("job", "job/algo-1-1733323549"), "algo-1");
        assert_eq!(stream_host("job", "job/algo-12-1733323549"), "algo-12");
        assert_eq!(stream_host("job-2", "job-2/algo-3-1733323549"), "algo-3");
        // No start time: the rest is the host.
        assert_eq!(stream_host("job", "job/algo-1"), "algo-1");
        assert_eq!(stream_host("job", "job/algo-x"), "algo-x");
        assert_eq!(stream_host("job", "job/algo-1-"), "algo-1-");
        assert_eq!(
            stream_host("job", "other/algo-1-1733323549"),
            "other/algo-1"
        );
    }
}
