//! Following a TrainJob until it ends: its state and its pods after every poll, and every
//! pod's new lines, handed to a [`Watcher`] (the command line shows them; this crate prints
//! nothing).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::events::{self, Warning};
use crate::pods::{JobPods, PodLine, PodState};
use crate::status::{self, Phase, TrainJobState};
use crate::{Cluster, Groups, KubeError};

/// What is shown as a job is followed.
pub trait Watcher {
    /// The job's state and its pods, after every poll.
    fn state(&mut self, state: &TrainJobState, pods: &[PodState]);
    /// A pod's line, in time order within a poll.
    fn line(&mut self, line: &PodLine);
    /// A Warning event on the TrainJob or its JobSet, once (again if it repeats).
    fn warning(&mut self, _warning: &Warning) {}
}

/// What to follow.
#[derive(Clone)]
pub struct Follow<'a> {
    pub cluster: &'a Cluster,
    /// The TrainJob's name.
    pub name: &'a str,
    /// Its pods' groups (the rendered runtime's, or [`status::groups`]).
    pub groups: Groups,
    /// The pause between polls.
    pub interval: Duration,
    /// Read the pods' logs (`false`: states only, `--no-logs`).
    pub logs: bool,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `Complete`, with its condition's message.
    Complete { message: String },
    /// `Failed`, with its condition's reason and message, and the pod that failed first.
    Failed {
        reason: String,
        message: String,
        first_failed: Option<PodState>,
    },
    /// The API server refused the objects a controller made for it (a Warning event says so,
    /// [`Warning::is_refusal`]): it has no terminal condition and will never run.
    Refused(Warning),
}

impl Outcome {
    /// Why it failed, in one line: the condition's reason and message, then the first pod to
    /// fail and how (JobSet's message names no pod). `None` when it completed.
    pub fn failure(&self) -> Option<String> {
        let (reason, message, first_failed) = match self {
            Outcome::Complete { .. } => return None,
            Outcome::Refused(warning) => return Some(warning.describe()),
            Outcome::Failed {
                reason,
                message,
                first_failed,
            } => (reason, message, first_failed),
        };
        let mut text = match (reason.is_empty(), message.is_empty()) {
            (false, false) => format!("{reason}: {message}"),
            (false, true) => reason.clone(),
            (true, _) => message.clone(),
        };
        if let Some(pod) = first_failed {
            let group = pod
                .group
                .as_deref()
                .map(|g| format!(" {g}"))
                .unwrap_or_default();
            let how = pod.ended.as_deref().unwrap_or("failed");
            text.push_str(&format!(
                " (first to fail: [{}{group}] pod `{}`, {how})",
                pod.host, pod.pod
            ));
        }
        Some(text)
    }
}

impl Follow<'_> {
    /// Polls until the TrainJob is `Complete` or `Failed`, or a Warning event says the objects
    /// made for it were refused.
    pub async fn run(&self, watcher: &mut dyn Watcher) -> Result<Outcome, KubeError> {
        let mut pods = JobPods::new(self.cluster, self.name, self.groups.clone(), None);
        let mut shown = BTreeSet::new();
        loop {
            let state = status::state(self.cluster, self.name).await?;
            let poll = pods.poll(self.logs).await?;
            watcher.state(&state, &poll.pods);
            for line in &poll.lines {
                watcher.line(line);
            }
            if !state.phase.is_terminal() {
                let uid = state.uid.as_deref();
                let warnings =
                    events::warnings(self.cluster, self.name, uid, state.created.as_ref()).await?;
                for warning in warnings {
                    if shown.insert(warning.key()) {
                        watcher.warning(&warning);
                    }
                    if warning.is_refusal() {
                        return Ok(Outcome::Refused(warning));
                    }
                }
            }
            if state.phase.is_terminal() {
                // The condition can come between the pods' list and their last lines: one more
                // read, after which every ended pod's log is whole and read.
                let last = pods.poll(self.logs).await?;
                for line in &last.lines {
                    watcher.line(line);
                }
                return Ok(match state.phase {
                    Phase::Failed { reason, message } => Outcome::Failed {
                        reason,
                        message,
                        first_failed: JobPods::first_failed(&last.pods).cloned(),
                    },
                    Phase::Complete { message } => Outcome::Complete { message },
                    Phase::Running | Phase::Suspended { .. } => continue,
                });
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}
