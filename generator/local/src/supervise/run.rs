//! Watching the hosts until the job ends, and ending it as SageMaker does.

use std::process::ExitStatus;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use hetgen_env::process::Signal;

use super::host::{Event, LineAt, Tap, failure_reason, kill_group, spawn, to_exit};
use super::{Exit, HostCommand, Limits, Observer, Outcome, Status, StopRequests, Stream};
use crate::{LocalError, Step};

/// How often stop requests and deadlines are looked at when nothing else happens.
const POLL: Duration = Duration::from_millis(50);
/// How long output may keep coming after every host exited: only a process that left its
/// host's process group can still hold a pipe open, and it must not hang the run.
const DRAIN: Duration = Duration::from_secs(2);

/// A host of the run, started or waiting to be.
pub(super) struct Running {
    /// Its process, once started: a host that waits for others to be Ready has none yet.
    process: Option<Process>,
    exit: Option<Exit>,
    /// How far its stdout and stderr were written when the job's stop sent it SIGTERM: what
    /// it wrote after may be the stop's doing, not a failure of its own.
    stopped_at: Option<[u64; 2]>,
    /// When the host's output first showed a Python traceback: its script raised then.
    raised: Option<Raised>,
}

/// A started host's process.
struct Process {
    pid: u32,
    started: Instant,
    /// Its stdout and stderr, as far as they were written.
    taps: [Tap; 2],
}

impl Running {
    fn started(pid: u32, taps: [Tap; 2]) -> Running {
        Running {
            process: Some(Process {
                pid,
                started: Instant::now(),
                taps,
            }),
            exit: None,
            stopped_at: None,
            raised: None,
        }
    }

    fn waiting() -> Running {
        Running {
            process: None,
            exit: None,
            stopped_at: None,
            raised: None,
        }
    }

    /// Signals its process group, if it has started.
    fn signal(&self, signal: Signal) {
        if let Some(p) = &self.process {
            kill_group(p.pid, signal);
        }
    }
}

/// A Python traceback in a host's output.
#[derive(Debug, Clone, Copy)]
struct Raised {
    /// When it was read.
    at: Instant,
    /// Whether it was written before the job's stop reached the host.
    before_stop: bool,
}

impl Running {
    /// A traceback began at `at` in `stream`.
    fn raised(&mut self, stream: Stream, at: LineAt) {
        let i = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        let raised = Raised {
            at: at.read_at,
            before_stop: self.stopped_at.is_none_or(|marks| at.end <= marks[i]),
        };
        // The first, unless it was the stop's and one before the stop is read only now (from
        // the other stream).
        if self
            .raised
            .is_none_or(|r| !r.before_stop && raised.before_stop)
        {
            self.raised = Some(raised);
        }
    }
}

/// Why a run that did not complete is ending. A run without one completes when its hosts have.
#[derive(Debug, Clone, PartialEq)]
enum Ending {
    /// A host failed; its failure reason.
    Failed(String),
    /// A stop was requested (Ctrl-C, SIGTERM).
    Stopped,
    /// The max runtime, this long, passed.
    MaxRuntimeExceeded(Duration),
}

impl Ending {
    fn status(&self) -> Status {
        match self {
            Ending::Failed(_) => Status::Failed,
            Ending::Stopped | Ending::MaxRuntimeExceeded(_) => Status::Stopped,
        }
    }

    /// SageMaker's secondary status.
    fn secondary_status(&self) -> &'static str {
        match self {
            Ending::Failed(_) => "Failed",
            Ending::Stopped => "Stopped",
            Ending::MaxRuntimeExceeded(_) => "MaxRuntimeExceeded",
        }
    }

    /// The job's failure reason, also what the observer is told when the stop begins.
    fn reason(&self) -> String {
        match self {
            Ending::Failed(reason) => reason.clone(),
            Ending::Stopped => "stopped on request (Ctrl-C or SIGTERM)".to_owned(),
            Ending::MaxRuntimeExceeded(limit) => format!(
                "the job ran past its max runtime of {} s",
                limit.as_secs_f64()
            ),
        }
    }
}

/// Starts one process per host, except for those that wait for others to be Ready. Should
/// one not start, those already started are killed.
pub(super) fn start_hosts(
    commands: &[HostCommand],
    tx: &Sender<Event>,
    observer: &mut dyn Observer,
) -> Result<Vec<Running>, LocalError> {
    let mut hosts: Vec<Running> = Vec::with_capacity(commands.len());
    for (i, command) in commands.iter().enumerate() {
        if !command.waits_for.is_empty() {
            hosts.push(Running::waiting());
            continue;
        }
        match spawn(i, command, tx) {
            Ok((pid, taps)) => {
                observer.started(&command.host, pid);
                hosts.push(Running::started(pid, taps));
            }
            Err(e) => {
                // Those already started must not outlive a run that never began.
                for h in &hosts {
                    h.signal(Signal::KILL);
                }
                return Err(e);
            }
        }
    }
    Ok(hosts)
}

/// A run in progress: its hosts and where their stop stands.
pub(super) struct Run<'a> {
    commands: &'a [HostCommand],
    hosts: Vec<Running>,
    /// Where a host started later sends its events.
    tx: Sender<Event>,
    limits: Limits,
    /// When the max runtime passes; `None` without one (or one too far off to be an `Instant`).
    deadline: Option<Instant>,
    ending: Option<Ending>,
    /// When the hosts still running get SIGKILL, once they were asked to stop.
    kill_at: Option<Instant>,
    killed: bool,
    /// Host output streams not yet at their end.
    open_streams: usize,
    /// How long output may still come once every host exited.
    drain_until: Option<Instant>,
    stops_seen: usize,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        commands: &'a [HostCommand],
        hosts: Vec<Running>,
        tx: Sender<Event>,
        limits: Limits,
        started_at: Instant,
        stops_seen: usize,
    ) -> Run<'a> {
        Run {
            commands,
            hosts,
            tx,
            limits,
            // A limit too far off to be an `Instant` is no limit (checked: it is the user's
            // number).
            deadline: limits.max_runtime.and_then(|d| started_at.checked_add(d)),
            ending: None,
            kill_at: None,
            killed: false,
            open_streams: 2 * commands.len(),
            drain_until: None,
            stops_seen,
        }
    }

    /// Handles events and moments to act on until every host exited and its output is read.
    pub(super) fn watch(
        &mut self,
        events: &Receiver<Event>,
        stop: &StopRequests,
        observer: &mut dyn Observer,
    ) {
        loop {
            if self.hosts.iter().all(|h| h.exit.is_some()) {
                let until = *self
                    .drain_until
                    .get_or_insert_with(|| Instant::now() + DRAIN);
                if self.open_streams == 0 || Instant::now() >= until {
                    return;
                }
            }
            match events.recv_timeout(self.next_wait()) {
                Ok(Event::Line(i, stream, line, at)) => {
                    let host = &self.commands[i].host;
                    if crate::traceback::starts_traceback(&line) {
                        self.hosts[i].raised(stream, at);
                    }
                    observer.output(host, stream, &line);
                    // Either stream: a script's output may reach the host's stderr on its way
                    // through torchrun and the training toolkit.
                    if let Some(step) = Step::parse(&line) {
                        observer.step(host, &step);
                    }
                }
                Ok(Event::Eof) => self.open_streams -= 1,
                Ok(Event::Exited(i, status, at)) => self.exited(i, status, at, observer),
                Ok(Event::Ready(i)) => self.start(i, observer),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.look_at_stop_requests(stop, observer);
            self.look_at_waiting_hosts(observer);
            if self.ending.is_none()
                && let Some(limit) = self.limits.max_runtime
                && self.deadline.is_some_and(|d| Instant::now() >= d)
            {
                self.end(Ending::MaxRuntimeExceeded(limit), observer);
            }
            if !self.killed && self.kill_at.is_some_and(|t| Instant::now() >= t) {
                self.killed = true;
                for h in self.hosts.iter().filter(|h| h.exit.is_none()) {
                    h.signal(Signal::KILL);
                }
            }
        }
    }

    /// How long to wait for the next event: until the next moment still to act on, at most
    /// [`POLL`]. A moment already acted on is in the past and would make every wait zero,
    /// spinning for the whole grace period.
    fn next_wait(&self) -> Duration {
        let pending = [
            self.deadline.filter(|_| self.ending.is_none()),
            self.kill_at.filter(|_| !self.killed),
            self.drain_until,
        ];
        pending.into_iter().flatten().fold(POLL, |wait, t| {
            wait.min(t.saturating_duration_since(Instant::now()))
        })
    }

    /// Host `i` exited: its group goes, and a failure ends the job.
    fn exited(
        &mut self,
        i: usize,
        status: std::io::Result<ExitStatus>,
        at: Instant,
        observer: &mut dyn Observer,
    ) {
        let command = &self.commands[i];
        let h = &mut self.hosts[i];
        // The container ends with its entry point: nothing it started survives it.
        h.signal(Signal::KILL);
        let (pid, started) = h.process.as_ref().map_or((0, at), |p| (p.pid, p.started));
        let exit = to_exit(pid, status, at.duration_since(started));
        observer.exited(&command.host, &exit);
        let failed = self.ending.is_none() && !exit.success();
        let reason = failed.then(|| failure_reason(command, &exit));
        h.exit = Some(exit);
        if let Some(reason) = reason {
            self.end(Ending::Failed(reason), observer);
        }
    }

    /// Host `i`, which waited, may start now: unless the job is ending.
    fn start(&mut self, i: usize, observer: &mut dyn Observer) {
        if self.ending.is_some() || self.hosts[i].process.is_some() {
            return;
        }
        let command = &self.commands[i];
        match spawn(i, command, &self.tx) {
            Ok((pid, taps)) => {
                observer.started(&command.host, pid);
                self.hosts[i] = Running::started(pid, taps);
            }
            Err(e) => self.end(
                Ending::Failed(format!("{}: {e}", command.host.name)),
                observer,
            ),
        }
    }

    /// Hosts that wait for others which have all exited would wait for ever: the job fails,
    /// naming them.
    fn look_at_waiting_hosts(&mut self, observer: &mut dyn Observer) {
        if self.ending.is_some()
            || self.hosts.iter().all(|h| h.process.is_some())
            || self
                .hosts
                .iter()
                .any(|h| h.process.is_some() && h.exit.is_none())
        {
            return;
        }
        let waiting: Vec<&str> = self
            .hosts
            .iter()
            .zip(self.commands)
            .filter(|(h, _)| h.process.is_none())
            .map(|(_, c)| c.host.name.as_str())
            .collect();
        let reason = format!(
            "{} never started: every host it waited for to be Ready (to answer the data port's health check SERVING) exited first",
            waiting.join(", ")
        );
        self.end(Ending::Failed(reason), observer);
    }

    /// A stop request ends the job; a second one does not wait out the grace period.
    fn look_at_stop_requests(&mut self, stop: &StopRequests, observer: &mut dyn Observer) {
        let stops = stop.count();
        if stops <= self.stops_seen {
            return;
        }
        self.stops_seen = stops;
        if self.ending.is_none() {
            self.end(Ending::Stopped, observer);
        } else {
            self.kill_at = Some(Instant::now());
        }
    }

    /// Ends the job as StopTrainingJob does: SIGTERM to every host still running, SIGKILL after
    /// the grace period.
    fn end(&mut self, ending: Ending, observer: &mut dyn Observer) {
        observer.stopping(&ending.reason());
        self.ending = Some(ending);
        for h in self.hosts.iter_mut().filter(|h| h.exit.is_none()) {
            match &h.process {
                Some(p) => {
                    h.stopped_at = Some(p.taps.each_ref().map(Tap::written));
                    kill_group(p.pid, Signal::TERM);
                }
                // It never starts, and has no output to wait for.
                None => {
                    h.exit = Some(Exit {
                        pid: 0,
                        exit_code: None,
                        signal: None,
                        duration: Duration::ZERO,
                    });
                    self.open_streams -= 2;
                }
            }
        }
        self.kill_at = Instant::now().checked_add(self.limits.grace);
    }

    /// The reason of a failed job: that of the failed host whose script raised first, when
    /// any did before the job's stop began. The first host to exit is often not the one at
    /// fault: when one rank raises, its peers fail a moment later with "connection closed by
    /// peer", and one of them may end first. A traceback is the script's own account of its
    /// failure, and the one that caused the others is printed before its process ends and so
    /// before theirs start. A traceback a host wrote after the stop's SIGTERM reached it (as
    /// far as its pipes had been written then, [`Tap`]) may be the stop's (torchrun's
    /// `SignalException` on the SIGTERM a failed data host brought on), not a failure of its
    /// own: then the reason stays that of the host whose failure began the stop.
    fn root_cause(&self) -> Option<String> {
        let (i, h) = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.exit.as_ref().is_some_and(|e| !e.success()))
            .filter(|(_, h)| h.raised.is_some_and(|r| r.before_stop))
            .min_by_key(|(_, h)| h.raised.map(|r| r.at))?;
        Some(failure_reason(&self.commands[i], h.exit.as_ref()?))
    }

    /// The outcome, once no process of any host is left.
    pub(super) fn finish(mut self, start: SystemTime) -> Outcome {
        // Belt and braces: every group is gone already, unless the watch ended by disconnection.
        for h in &self.hosts {
            h.signal(Signal::KILL);
        }
        if matches!(self.ending, Some(Ending::Failed(_)))
            && let Some(reason) = self.root_cause()
        {
            self.ending = Some(Ending::Failed(reason));
        }
        let (status, secondary_status, failure_reason) = match &self.ending {
            None => (Status::Completed, "Completed", None),
            Some(ending) => (
                ending.status(),
                ending.secondary_status(),
                Some(ending.reason()),
            ),
        };
        let exits = self
            .hosts
            .into_iter()
            .map(|h| {
                h.exit.unwrap_or(Exit {
                    pid: h.process.as_ref().map_or(0, |p| p.pid),
                    exit_code: None,
                    signal: None,
                    duration: h
                        .process
                        .as_ref()
                        .map_or(Duration::ZERO, |p| p.started.elapsed()),
                })
            })
            .collect();
        Outcome {
            status,
            secondary_status: secondary_status.to_owned(),
            failure_reason,
            start,
            end: SystemTime::now(),
            exits,
        }
    }
}
