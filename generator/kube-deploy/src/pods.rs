//! A job's pods and their output: every pod's lines, each exactly once, across polls.
//!
//! JobSet labels every pod with its JobSet's name (the TrainJob's) and its replicatedJob, so
//! one list call with a label selector finds all of a job's pods, those made late or again
//! included. Each pod's log is read with the kubelet's timestamps (`timestamps=true`) from the
//! last line seen (`sinceTime`, whole seconds, so the lines of that second come again and are
//! skipped by their timestamps); a pod that had ended when it was listed is read once more and
//! then left alone, its log being whole.
//!
//! A pod's host is its stable DNS label (`spec.hostname`, `<job>-<replicatedJob>-0-<index>`,
//! the name the job's own hosts know it by: `hetgen_spec::kube::pod_host`); its group comes
//! from its replicatedJob ([`Groups`]).

use std::collections::BTreeMap;
use std::time::SystemTime;

use hetgen_spec::kube::{JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, LogParams};

use crate::{Cluster, Groups, KubeError, api};

/// One line of a pod's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLine {
    /// When the container wrote it (the kubelet's timestamp), ms since the Unix epoch.
    pub time_ms: i64,
    /// The pod's host name (`digits-data-group-0-1`).
    pub host: String,
    /// Its instance group, when the runtime names it.
    pub group: Option<String>,
    /// The pod's name.
    pub pod: String,
    /// The line, without its newline.
    pub message: String,
}

/// A pod as a poll found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    pub pod: String,
    pub host: String,
    pub group: Option<String>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` (`status.phase`).
    pub phase: String,
    /// How its container ended, when it has: `exit 1 (Error)`, with the container's
    /// termination message when it wrote one.
    pub ended: Option<String>,
    /// When its container ended (RFC 3339), to tell which pod failed first.
    pub finished_at: Option<String>,
}

/// Reads one job's pods forward, poll after poll.
pub struct JobPods {
    cluster: Cluster,
    job: String,
    groups: Groups,
    /// Only lines from this time on (`--since`).
    since: Option<Timestamp>,
    /// Every pod seen, with how far its log has been read.
    cursors: BTreeMap<String, Cursor>,
}

#[derive(Debug, Default)]
struct Cursor {
    /// The newest line's timestamp, and how many lines carried exactly it.
    last: Option<(Timestamp, usize)>,
    /// Its log is whole and read.
    done: bool,
}

/// What one poll found.
#[derive(Debug, Default)]
pub struct Poll {
    /// Every pod of the job, by host.
    pub pods: Vec<PodState>,
    /// Their new lines, ordered by time (one pod's own order kept).
    pub lines: Vec<PodLine>,
}

impl JobPods {
    /// Follows the pods of TrainJob `job` (in the cluster's namespace), their groups from
    /// `groups`, from their start or from `since` (`--since`).
    pub fn new(cluster: &Cluster, job: &str, groups: Groups, since: Option<SystemTime>) -> JobPods {
        JobPods {
            cluster: cluster.clone(),
            job: job.to_owned(),
            groups,
            since: since.and_then(|t| Timestamp::try_from(t).ok()),
            cursors: BTreeMap::new(),
        }
    }

    /// The pods now, and (with `logs`) every line written since the last poll.
    pub async fn poll(&mut self, logs: bool) -> Result<Poll, KubeError> {
        let pods = self.list().await?;
        let mut poll = Poll::default();
        for pod in &pods {
            let state = self.state_of(pod);
            let waiting = state.phase == "Pending" || state.phase.is_empty();
            let ended = state.phase == "Succeeded" || state.phase == "Failed";
            let done = self.cursors.get(&state.pod).is_some_and(|c| c.done);
            if logs && !waiting && !done {
                let lines = self.read(pod, &state).await?;
                poll.lines.extend(lines);
                if ended {
                    self.cursors.entry(state.pod.clone()).or_default().done = true;
                }
            }
            poll.pods.push(state);
        }
        poll.pods
            .sort_by(|a, b| (&a.host, &a.pod).cmp(&(&b.host, &b.pod)));
        // Stable: equal times keep each pod's own order.
        poll.lines.sort_by_key(|l| l.time_ms);
        Ok(poll)
    }

    /// The first pod to fail, by when its container ended.
    pub fn first_failed(pods: &[PodState]) -> Option<&PodState> {
        pods.iter()
            .filter(|p| p.phase == "Failed")
            .min_by(|a, b| a.finished_at.cmp(&b.finished_at))
    }

    async fn list(&self) -> Result<Vec<Pod>, KubeError> {
        let namespace = self.cluster.namespace(None);
        let selector = format!("{JOBSET_NAME_LABEL}={}", self.job);
        api::pods(&self.cluster.client, namespace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|list| list.items)
            .map_err(|e| api::pods_of(namespace, &self.job).error("list", e))
    }

    fn state_of(&self, pod: &Pod) -> PodState {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let host = spec
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| name.clone());
        let group = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REPLICATED_JOB_LABEL))
            .and_then(|job| self.groups.of(job))
            .map(str::to_owned);
        let status = pod.status.as_ref();
        let terminated = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.as_ref());
        let ended = terminated.map(|t| {
            let reason = t
                .reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            let message = t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            format!("exit {}{reason}{message}", t.exit_code)
        });
        PodState {
            pod: name,
            host,
            group,
            phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
            ended,
            finished_at: terminated
                .and_then(|t| t.finished_at.as_ref())
                .map(|t| t.0.to_string()),
        }
    }

    /// The lines of `pod` not read yet.
    async fn read(&mut self, pod: &Pod, state: &PodState) -> Result<Vec<PodLine>, KubeError> {
        let namespace = self.cluster.namespace(None).to_owned();
        let cursor = self.cursors.entry(state.pod.clone()).or_default();
        let from = cursor.last.map(|(t, _)| t).or(self.since);
        let params = LogParams {
            // The rendered pods have one container each; naming it keeps a sidecar a cluster
            // adds from making the request ambiguous.
            container: pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone()),
            timestamps: true,
            // Whole seconds: kube rounds to the nearest, which could skip the lines of the
            // half second after `from`.
            since_time: from.and_then(|t| Timestamp::from_second(t.as_second()).ok()),
            ..LogParams::default()
        };
        let text = match api::pods(&self.cluster.client, &namespace)
            .logs(&state.pod, &params)
            .await
        {
            Ok(text) => text,
            // Listed, then gone; or its container not started yet (400, "is waiting to start"):
            // nothing to read now.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 400 => return Ok(Vec::new()),
            Err(e) => return Err(api::pod(&namespace, &state.pod).error("read the log of", e)),
        };
        // Lines at the newest time already shown come again; this many of them are skipped.
        let mut seen_at_last = cursor.last.map_or(0, |(_, n)| n);
        let mut lines = Vec::new();
        for raw in text.lines() {
            let (time, message) = split_timestamp(raw);
            if let Some(time) = time {
                if self.since.is_some_and(|since| time < since) {
                    continue;
                }
                if let Some((last, _)) = cursor.last {
                    if time < last {
                        continue;
                    }
                    if time == last && seen_at_last > 0 {
                        seen_at_last -= 1;
                        continue;
                    }
                }
            }
            lines.push(PodLine {
                time_ms: time.map_or(0, |t| t.as_millisecond()),
                host: state.host.clone(),
                group: state.group.clone(),
                pod: state.pod.clone(),
                message: message.trim_end_matches('\r').to_owned(),
            });
        }
        cursor.last = newest(&text)
            .filter(|(t, _)| cursor.last.is_none_or(|(l, _)| *t >= l))
            .or(cursor.last);
        Ok(lines)
    }
}

/// The newest timestamp in a log read, and how many of its lines carry it. A read starts at
/// the previous newest time's second, so the count includes the lines shown before.
fn newest(text: &str) -> Option<(Timestamp, usize)> {
    let mut newest: Option<(Timestamp, usize)> = None;
    for time in text.lines().filter_map(|l| split_timestamp(l).0) {
        match &mut newest {
            Some((t, n)) if time == *t => *n += 1,
            Some((t, _)) if time < *t => {}
            _ => newest = Some((time, 1)),
        }
    }
    newest
}

/// `2024-12-04T15:27:19.123456789Z message` → its time and message; a line without a
/// timestamp (never, from a kubelet) is all message.
fn split_timestamp(line: &str) -> (Option<Timestamp>, &str) {
    match line.split_once(' ') {
        Some((time, message)) => match time.parse::<Timestamp>() {
            Ok(time) => (Some(time), message),
            Err(_) => (None, line),
        },
        None => match line.parse::<Timestamp>() {
            // An empty line, timestamped.
            Ok(time) => (Some(time), ""),
            Err(_) => (None, line),
        },
    }
}
