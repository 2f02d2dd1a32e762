//! How a job's output is shown, whether it comes from a local run or from CloudWatch: each line
//! behind its host and group (`[algo-1 dnn_group] …`, the label `hetgen deploy --local` prints),
//! or as one JSON object per line; the trainer's `hetgen-step` lines as a live progress line; its
//! `hetgen-summary` line as the run's summary at the end.
//!
//! A SageMaker host's group is not in any API: it is learned from the host's own early lines (the
//! runtime's `starting role … group="…"`, the training toolkit's `SM_CURRENT_INSTANCE_GROUP=…`).
//! Until then a host's lines, and every later line of other hosts, are held, so lines keep their
//! time order; a host that never says (a script that crashed at once) is shown without a group
//! once its lines have waited [`HOLD_MS`] or the output ends.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{IsTerminal, Write};

use hetgen_env::{SUMMARY_LINE_PREFIX, Summary};
use hetgen_local::joblog::LogLine;
use hetgen_spec::step::StepLine;
use indicatif::ProgressBar;

use crate::cli::Format;

/// How long (in the lines' own time) lines wait for their host's group before they are shown
/// without one.
pub const HOLD_MS: i64 = 30_000;

/// Lines held at most; past this the oldest are shown without their group.
const HOLD_LINES: usize = 2_000;

/// Which hosts' lines to show (empty: all).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub hosts: BTreeSet<String>,
    pub groups: BTreeSet<String>,
}

impl Filter {
    fn keeps(&self, host: &str, group: Option<&str>) -> bool {
        (self.hosts.is_empty() || self.hosts.contains(host))
            && (self.groups.is_empty() || group.is_some_and(|g| self.groups.contains(g)))
    }
}

/// The width of the `[host group]` label for a job of `hosts` hosts (`algo-1` … `algo-N`, as
/// SageMaker and the local twin name them) in `groups`, so every label lines up from the first
/// line on.
pub fn label_width<'a>(hosts: usize, groups: impl IntoIterator<Item = &'a str>) -> usize {
    let host = "algo-".len() + hosts.max(1).to_string().len();
    let group = groups.into_iter().map(str::len).max().unwrap_or(0);
    host + group + 3
}

/// `[algo-1 dnn_group]  message`, padded to `width`.
pub fn labelled(host: &str, group: Option<&str>, width: usize, message: &str) -> String {
    let prefix = match group {
        Some(group) => format!("[{host} {group}]"),
        None => format!("[{host}]"),
    };
    format!("{prefix:<width$} {message}")
}

/// The progress line's text for one step (a script's `hetgen.Loader` knows no loss).
pub fn progress(step: &StepLine) -> String {
    let loss = step
        .loss
        .map(|l| format!("  loss {l:.4}"))
        .unwrap_or_default();
    format!(
        "step {}{loss}  {:.0} samples/s  stall {:.1} %",
        step.step,
        step.samples_per_s,
        step.stall_percent()
    )
}

/// The run's summary for people: the trainer's figures, then where its batches came from.
pub fn summary_lines(summary: &Summary) -> Vec<String> {
    let mut lines = vec![format!(
        "trainer: {} steps, mean step {:.1} ms, {:.0} samples/s, stall {:.1} %, final loss {:.4}",
        summary.steps,
        summary.mean_step_ms,
        summary.samples_per_s,
        summary.stall_fraction * 100.0,
        summary.final_loss,
    )];
    let input = &summary.input;
    let total: u64 = input.batches_by_source.values().sum();
    if total > 0 {
        let shares: Vec<String> = input
            .batches_by_source
            .iter()
            .map(|(source, n)| format!("{source} {:.1} %", 100.0 * *n as f64 / total as f64))
            .collect();
        lines.push(format!(
            "input: {total} batches received: {}",
            shares.join(", ")
        ));
    }
    if input.backup_shards > 0 || input.duplicate_batches > 0 {
        lines.push(format!(
            "input: {} shards backed up on another source (a source fell behind), {} duplicate batches dropped",
            input.backup_shards, input.duplicate_batches
        ));
    }
    lines
}

/// The group a host names in one of its lines, if it does.
pub fn group_in(message: &str) -> Option<&str> {
    // hetgen's runtime: `INFO starting role host="algo-1" group="dnn_group" role=Trainer …`.
    if let Some(group) = hetgen_env::starting_role_group(message) {
        return Some(group);
    }
    // AWS's training toolkit: its environment, as variables and as JSON.
    if let Some(group) = message.trim().strip_prefix("SM_CURRENT_INSTANCE_GROUP=") {
        return Some(group.trim()).filter(|g| !g.is_empty());
    }
    let rest = message
        .trim()
        .strip_prefix("\"current_instance_group\":")?
        .trim();
    rest.strip_prefix('"')?.split_once('"').map(|(g, _)| g)
}

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `hetgen logs`: the lines are the result.
    Stdout,
    /// `hetgen deploy`: the lines accompany a command whose result (the ARN) is on stdout.
    Stderr,
}

struct Held {
    time_ms: i64,
    host: String,
    message: String,
}

/// Shows lines as they come; see the module's documentation.
pub struct LogView {
    format: Format,
    target: Target,
    filter: Filter,
    width: usize,
    groups: BTreeMap<String, String>,
    held: VecDeque<Held>,
    /// A live line on stderr, when it is a terminal and lines are for people.
    bar: Option<ProgressBar>,
    summary: Option<Summary>,
    last_step: Option<StepLine>,
}

impl LogView {
    pub fn new(format: Format, target: Target, filter: Filter, width: usize) -> LogView {
        let live = format == Format::Human && std::io::stderr().is_terminal();
        let bar = live.then(|| {
            let bar = crate::commands::spinner();
            bar.set_prefix("waiting");
            bar
        });
        LogView {
            format,
            target,
            filter,
            width,
            groups: BTreeMap::new(),
            held: VecDeque::new(),
            bar,
            summary: None,
            last_step: None,
        }
    }

    /// A line whose host's group is known (a local run's).
    pub fn line(&mut self, line: &LogLine) {
        if let Some(group) = &line.group {
            self.groups.insert(line.host.clone(), group.clone());
        }
        let time_ms = line
            .system_time()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64);
        self.event(time_ms, &line.host, &line.message);
    }

    /// A line of a host whose group may not be known yet (a SageMaker host's).
    pub fn event(&mut self, time_ms: i64, host: &str, message: &str) {
        if !self.groups.contains_key(host)
            && let Some(group) = group_in(message)
        {
            self.groups.insert(host.to_owned(), group.to_owned());
        }
        self.held.push_back(Held {
            time_ms,
            host: host.to_owned(),
            message: message.to_owned(),
        });
        self.release(false);
    }

    /// Shows every held line: the output has ended, or a poll's lines are all in.
    pub fn flush(&mut self) {
        self.release(true);
    }

    /// A note between the lines (a status transition), on stderr.
    pub fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    /// What the live line says before the first step (`InProgress · Training`).
    pub fn set_status(&self, status: &str) {
        if let Some(bar) = &self.bar
            && self.last_step.is_none()
        {
            bar.set_prefix(status.to_owned());
        }
    }

    /// [`LogView::finish`], then the trainer's summary for people (on stderr, after the lines),
    /// when its line was seen and lines are for people.
    pub fn end(&mut self) {
        if let Some(summary) = self.finish()
            && self.format == Format::Human
        {
            for line in summary_lines(&summary) {
                eprintln!("  {line}");
            }
        }
    }

    /// Clears the live line; returns the trainer's summary, if its line was seen.
    pub fn finish(&mut self) -> Option<Summary> {
        self.flush();
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.summary.take()
    }

    fn release(&mut self, all: bool) {
        let newest = self.held.back().map_or(0, |h| h.time_ms);
        while let Some(front) = self.held.front() {
            let known = self.groups.contains_key(&front.host);
            let waited = newest - front.time_ms >= HOLD_MS || self.held.len() > HOLD_LINES;
            if !(known || all || waited) {
                return;
            }
            let held = self.held.pop_front().expect("a front line");
            self.show(held);
        }
    }

    fn show(&mut self, held: Held) {
        let group = self.groups.get(&held.host).map(String::as_str);
        if let Some(at) = held.message.find(SUMMARY_LINE_PREFIX)
            && let Ok(summary) =
                serde_json::from_str(held.message[at + SUMMARY_LINE_PREFIX.len()..].trim())
        {
            self.summary = Some(summary);
        }
        if let Some(step) = StepLine::parse(&held.message) {
            if let Some(bar) = &self.bar {
                bar.set_prefix("training");
                bar.set_message(progress(&step));
            }
            self.last_step = Some(step);
        }
        if !self.filter.keeps(&held.host, group) {
            return;
        }
        let text = match self.format {
            Format::Human => labelled(&held.host, group, self.width, &held.message),
            Format::Json => serde_json::to_string(&LogLine::at_ms(
                held.time_ms,
                &held.host,
                group,
                &held.message,
            ))
            .expect("a log line serializes"),
        };
        let print = || match self.target {
            Target::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
            }
            Target::Stderr => eprintln!("{text}"),
        };
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetgen_env::InputReport;

    #[test]
    fn groups_are_found_in_the_runtimes_and_the_toolkits_lines() {
        assert_eq!(
            group_in(
                "2026-12-04T14:48:57Z  INFO starting role host=\"algo-1\" group=\"dnn_group\" role=Trainer job=d"
            ),
            Some("dnn_group")
        );
        assert_eq!(
            group_in("SM_CURRENT_INSTANCE_GROUP=data_group"),
            Some("data_group")
        );
        assert_eq!(
            group_in("    \"current_instance_group\": \"dnn_group\","),
            Some("dnn_group")
        );
        assert_eq!(group_in("group=\"x\" without the role"), None);
        assert_eq!(group_in("SM_CURRENT_INSTANCE_GROUP="), None);
        assert_eq!(group_in("training step 3"), None);
    }

    #[test]
    fn labels_line_up_for_every_host_of_the_job() {
        let width = label_width(4, ["dnn_group", "data_group"]);
        assert_eq!(width, "[algo-4 data_group]".len());
        assert_eq!(
            labelled("algo-1", Some("dnn_group"), width, "hi"),
            "[algo-1 dnn_group]  hi"
        );
        assert_eq!(
            labelled("algo-2", Some("data_group"), width, "hi"),
            "[algo-2 data_group] hi"
        );
        assert_eq!(label_width(12, ["g"]), "[algo-12 g]".len());
    }

    #[test]
    fn a_hosts_lines_wait_for_its_group_and_keep_their_order() {
        let mut view = LogView::new(
            Format::Human,
            Target::Stdout,
            Filter::default(),
            label_width(2, ["g"]),
        );
        view.event(1_000, "algo-2", "early line of algo-2");
        view.event(1_100, "algo-1", "starting role host=\"algo-1\" group=\"g\"");
        // algo-2's group is unknown, so algo-1's later line waits behind it.
        assert_eq!(view.held.len(), 2);
        view.event(1_200, "algo-2", "SM_CURRENT_INSTANCE_GROUP=g");
        assert!(view.held.is_empty());
        // Past the hold, a silent host's lines are shown without a group.
        view.event(2_000, "algo-3", "no group yet");
        view.event(2_000 + HOLD_MS, "algo-1", "much later");
        assert!(view.held.is_empty());
    }

    #[test]
    fn the_summary_and_steps_are_read_from_any_hosts_line() {
        let mut view = LogView::new(Format::Json, Target::Stdout, Filter::default(), 20);
        view.event(
            1,
            "algo-1",
            "hetgen-step step=7 loss=0.5000 step_ms=10.00 wait_ms=1.00 samples_per_s=100.0",
        );
        let summary = Summary {
            steps: 7,
            epochs_started: 1,
            samples: 700,
            mean_step_ms: 10.0,
            mean_wait_ms: 1.0,
            stall_fraction: 0.1,
            samples_per_s: 100.0,
            final_loss: 0.5,
            device: "cpu".into(),
            model: "mlp".into(),
            replicas: 1,
            resumed_from_step: None,
            input: InputReport {
                batches_by_source: [("algo-2".to_owned(), 3), ("local".to_owned(), 1)].into(),
                local_threads: 1,
                backup_shards: 2,
                duplicate_batches: 5,
            },
        };
        view.event(2, "algo-1", &summary.line());
        // algo-1 never named its group: its lines were held until the end.
        assert_eq!(view.last_step, None);
        let seen = view.finish().expect("the summary line was seen");
        assert_eq!(view.last_step.map(|s| s.step), Some(7));
        assert_eq!(seen, summary);
        assert_eq!(
            summary_lines(&seen)[1],
            "input: 4 batches received: algo-2 75.0 %, local 25.0 %"
        );
        assert_eq!(
            summary_lines(&seen)[2],
            "input: 2 shards backed up on another source (a source fell behind), 5 duplicate batches dropped"
        );
    }
}
