//! Following a SageMaker job: its status changes and every host's log lines, until the job ends
//! or the user presses Ctrl-C, which stops the following and leaves the job running.

use std::time::Duration;

use hetgen_deploy::logs::JobLogs;
use hetgen_deploy::{DeployError, JobStatus, jobs};

use crate::first_raise::FirstRaise;
use crate::view::{LogView, label_width};

/// After the job ends CloudWatch still receives the hosts' last lines for a few seconds (their
/// agents flush every few seconds): the logs are read again until two reads in a row bring
/// nothing, at most this many times.
const FINAL_READS: usize = 8;
/// The pause between those reads.
const FINAL_PAUSE: Duration = Duration::from_secs(2);

/// How following ended.
pub enum Ended {
    /// The job ended with this status; which host's script raised first, per its logs.
    Job(Box<(JobStatus, FirstRaise)>),
    /// Ctrl-C: the job goes on.
    Interrupted,
}

/// What to follow.
pub struct Follow<'a> {
    pub sagemaker: &'a hetgen_deploy::SageMakerClient,
    /// The job's logs; `None` follows the status only (`--no-logs`).
    pub logs: Option<JobLogs>,
    pub name: &'a str,
    pub interval: Duration,
    /// Print status changes as notes (`deploy --wait`), or only the lines (`logs --follow`).
    pub transitions: bool,
}

/// The label width for `status`'s groups: every host of the job lines up.
pub fn width_of(status: &JobStatus) -> usize {
    let hosts = status
        .instance_groups
        .iter()
        .map(|g| g.count.max(0) as usize)
        .sum();
    label_width(
        hosts,
        status.instance_groups.iter().map(|g| g.name.as_str()),
    )
}

impl Follow<'_> {
    /// Polls status and logs every `interval` until the job ends.
    pub async fn run(mut self, view: &mut LogView) -> Result<Ended, DeployError> {
        let start = tokio::time::Instant::now();
        let mut last: Option<(String, Option<String>)> = None;
        let mut first = FirstRaise::default();
        // Ctrl-C is ours from here on (the default would kill hetgen mid-line).
        let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
        loop {
            let status = jobs::describe(self.sagemaker, self.name).await?;
            let now = (status.status.clone(), status.secondary_status.clone());
            if last.as_ref() != Some(&now) {
                let text = transition(start.elapsed(), &now.0, now.1.as_deref());
                if self.transitions {
                    view.note(&text);
                }
                view.set_status(text.trim());
                last = Some(now);
            }
            self.read(view, &mut first).await?;
            if status.is_terminal() {
                let mut empty = 0;
                for _ in 0..FINAL_READS {
                    if self.logs.is_none() || empty == 2 {
                        break;
                    }
                    tokio::time::sleep(FINAL_PAUSE.min(self.interval)).await;
                    empty = if self.read(view, &mut first).await? == 0 {
                        empty + 1
                    } else {
                        0
                    };
                }
                view.flush();
                return Ok(Ended::Job(Box::new((status, first))));
            }
            tokio::select! {
                _ = &mut interrupt => return Ok(Ended::Interrupted),
                () = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// One read of every stream; how many lines it brought.
    async fn read(
        &mut self,
        view: &mut LogView,
        first: &mut FirstRaise,
    ) -> Result<usize, DeployError> {
        match &mut self.logs {
            Some(logs) => read_into(logs, view, first).await,
            None => Ok(0),
        }
    }
}

/// One read of every stream of `logs` into `view` (and `first`); how many lines it brought.
pub async fn read_into(
    logs: &mut JobLogs,
    view: &mut LogView,
    first: &mut FirstRaise,
) -> Result<usize, DeployError> {
    let events = logs.poll().await?;
    for e in &events {
        view.event(e.timestamp_ms, &e.host, &e.message);
        first.line(e.timestamp_ms, &e.host, &e.message);
    }
    Ok(events.len())
}

/// `  +0:05:12  InProgress · Training`
pub fn transition(after: Duration, status: &str, secondary: Option<&str>) -> String {
    let s = after.as_secs();
    let secondary = secondary.map(|s| format!(" · {s}")).unwrap_or_default();
    format!(
        "  +{}:{:02}:{:02}  {status}{secondary}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// What to do after Ctrl-C: the job was not touched.
pub fn interrupted_note(name: &str) -> String {
    format!(
        "stopped following `{name}`; the job goes on running.\n  follow it: hetgen logs {name} --follow\n  stop it:   hetgen stop {name}"
    )
}
