//! A rank that outlives the job's data: ended, and the job told why.
//!
//! A training script can finish and yet never exit (torch's gloo teardown, docs/spec.md
//! "Ending a DDP script"), and a host that never exits keeps the job, and its GPUs, running
//! until its max runtime. The launcher watches for it where the end of reading shows: the
//! job's data servers. A server stops once every trainer host told it that it finished (a
//! launcher after its torchrun ended, or a script's `hetgen.Loader` on leaving its `with`
//! block or calling `shutdown()`), or once every trainer fell silent (every loader closed, its
//! watchdog). So when none of them accepts a connection any more, after one did, no rank of
//! the job reads another batch: its loader has finished. A worker of this host still running
//! [`LINGER_VAR`] seconds (60 by default) later gets SIGTERM, and SIGKILL 10 s after, and the
//! host fails naming it.
//!
//! What this does not see: a rank hung with its loader still open (its heartbeats keep the
//! servers serving it); and what it may cut short: a script that goes on for longer than the
//! limit after telling the servers it finished (set the variable higher for one).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hetgen_data::job::{data_hosts, data_port, resolve_blocking};
use hetgen_env::process::Signal;
use hetgen_env::{Env, VariableError};
use hetgen_spec::model::Job;

use super::workers::{Worker, workers};

/// The variable that sets how long a rank may run once the job's data servers have stopped,
/// in seconds.
pub const LINGER_VAR: &str = "HETGEN_LINGER_S";
/// Its default.
const DEFAULT_LINGER: Duration = Duration::from_secs(60);
/// How often the data servers are asked whether they still run, once one has been seen to (as
/// a server asks after its peers).
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// How often they are asked until then: a short job's servers may start after torchrun and
/// stop a few seconds later.
const FIRST_PROBE_EVERY: Duration = Duration::from_secs(1);
/// Between the SIGTERM to a lingering rank and its SIGKILL.
const END_GRACE: Duration = Duration::from_secs(10);

/// Ranks ended because they outlived the job's data servers.
#[derive(Debug)]
pub struct Lingered {
    script: String,
    ranks: Vec<Worker>,
    after: Duration,
}

impl std::fmt::Display for Lingered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.ranks.iter().map(Worker::describe).collect();
        let (was, it) = match self.ranks.len() {
            1 => ("was", "it was"),
            _ => ("were", "they were"),
        };
        write!(
            f,
            "{} of training script `{}` {was} still running {} s after the job's data servers \
             stopped (every trainer host had finished reading, or every loader had closed), so \
             {it} ended: a process that never exits keeps the job running until its max \
             runtime. A DDP script that hangs at exit: free the model (`del model`) before \
             `dist.destroy_process_group()`; a script that needs longer after its last batch: \
             set {LINGER_VAR}",
            names.join(", "),
            self.script,
            self.after.as_secs_f64(),
        )
    }
}

impl std::error::Error for Lingered {}

/// What a watch needs, read before torchrun starts: the job's data servers and how long a rank
/// may outlive them.
pub(super) struct Setting {
    hosts: Vec<String>,
    port: u16,
    after: Duration,
}

impl Setting {
    /// The job's; `None` for a job without data hosts. A malformed [`LINGER_VAR`] (or data
    /// port) is an error.
    pub fn of(job: &Job, env: &Env) -> Result<Option<Setting>, VariableError> {
        let after = linger_from_env()?;
        let hosts = data_hosts(job, env);
        if hosts.is_empty() {
            return Ok(None);
        }
        Ok(Some(Setting {
            hosts,
            port: data_port()?,
            after,
        }))
    }

    /// Watches the workers of the torchrun `torchrun`, running `script`, until it ends.
    pub fn watch(self, script: &str, torchrun: u32) -> Watch {
        let script = script.to_owned();
        let (done, ended) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let lingering =
                wait_for_lingering(&ended, &self.hosts, self.port, torchrun, self.after)?;
            Some(end(&ended, script, lingering, self.after))
        });
        Watch { done, thread }
    }
}

/// The watch over the workers of one torchrun, until it ends.
pub(super) struct Watch {
    done: Sender<()>,
    thread: JoinHandle<Option<Lingered>>,
}

impl Watch {
    /// torchrun has ended: the ranks this watch ended, if it did.
    pub fn finish(self) -> Option<Lingered> {
        let _ = self.done.send(());
        self.thread.join().ok().flatten()
    }
}

/// How long a rank may run once the data servers stopped: [`LINGER_VAR`], else 60 s.
fn linger_from_env() -> Result<Duration, VariableError> {
    let Ok(value) = std::env::var(LINGER_VAR) else {
        return Ok(DEFAULT_LINGER);
    };
    match value.trim().parse::<f64>() {
        Ok(s) if (1.0..=2_419_200.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(VariableError {
            var: LINGER_VAR,
            value,
            expected: "a number of seconds from 1 to 2419200 (28 days)".into(),
        }),
    }
}

/// Waits until the workers of `torchrun` still run `after` the data servers `hosts` stopped
/// (having run): those workers; `None` once torchrun ended (`ended` says so).
fn wait_for_lingering(
    ended: &Receiver<()>,
    hosts: &[String],
    port: u16,
    torchrun: u32,
    after: Duration,
) -> Option<Vec<Worker>> {
    let mut seen_serving = false;
    let mut stopped_since: Option<Instant> = None;
    loop {
        if any_serves(hosts, port) {
            seen_serving = true;
            stopped_since = None;
        } else if seen_serving {
            let since = *stopped_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= after {
                let lingering = workers(torchrun);
                if !lingering.is_empty() {
                    return Some(lingering);
                }
            }
        }
        let every = if seen_serving {
            PROBE_EVERY
        } else {
            FIRST_PROBE_EVERY
        };
        match ended.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// Ends `lingering`: SIGTERM, then SIGKILL to those still running after [`END_GRACE`] (unless
/// torchrun ended meanwhile).
fn end(ended: &Receiver<()>, script: String, lingering: Vec<Worker>, after: Duration) -> Lingered {
    let lingered = Lingered {
        script,
        ranks: lingering,
        after,
    };
    tracing::warn!("{lingered}");
    for worker in &lingered.ranks {
        worker.signal(Signal::TERM);
    }
    if let Err(RecvTimeoutError::Timeout) = ended.recv_timeout(END_GRACE) {
        for worker in lingered.ranks.iter().filter(|w| w.alive()) {
            worker.signal(Signal::KILL);
        }
    }
    lingered
}

/// Whether any of the data servers on `hosts` accepts a connection within a second. A frozen
/// server does (its kernel accepts for it): only servers that have exited, and hosts that are
/// gone, count as stopped.
fn any_serves(hosts: &[String], port: u16) -> bool {
    hosts.iter().any(|host| {
        resolve_blocking(host, port, Duration::from_secs(1)).is_ok_and(|address| {
            std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_ranks_and_what_to_do() {
        let lingered = Lingered {
            script: "train.py".to_owned(),
            ranks: vec![Worker::seen(4242, Some(1))],
            after: Duration::from_secs(60),
        };
        let text = lingered.to_string();
        assert!(
            text.starts_with(
                "rank 1 (pid 4242) of training script `train.py` was still running 60 s after \
                 the job's data servers stopped"
            ),
            "{text}"
        );
        assert!(
            text.contains("del model") && text.contains(LINGER_VAR),
            "{text}"
        );
    }
}
