//! What a failed script's host reports: the script's own exception, read from what torchrun
//! passed on of its stderr, in a failure file that SageMaker shows whole.
//!
//! SageMaker returns the first 1024 characters of `/opt/ml/output/failure` as the job's
//! `FailureReason` ("How Amazon SageMaker Processes Training Output", SageMaker developer
//! guide), after its own `AlgorithmError: `. So the text is made to fit, with room for those
//! words: what is cut is the middle of a traceback, never the exception's first line (where a
//! `hetgen.Loader` error names the sample and the data host) nor its last (the error itself).

use std::collections::VecDeque;
use std::process::ExitStatus;

/// SageMaker's limit on `FailureReason`: the first 1024 characters of the failure file.
const FAILURE_REASON_MAX: usize = 1024;
/// Room left in it for the platform's words around the file (`AlgorithmError: `, and where it
/// happened, which `deploy --local` adds).
const PLATFORM_ROOM: usize = 100;
/// What stands for the lines cut out of the middle.
const CUT: &str = "  …";
/// Lines of the tail shown when no Python exception is found in it.
const SHOWN_LINES: usize = 12;

/// The script failed: its exit status (128 + N for signal N) and its error.
#[derive(Debug, thiserror::Error)]
#[error("training script `{script}` {how}{error}")]
pub struct ScriptFailed {
    /// The status the launcher exits with.
    pub code: u8,
    script: String,
    how: String,
    error: String,
}

impl ScriptFailed {
    /// `script` ended with `status` (not a success), torchrun having last printed `tail`; the
    /// failure file is `prefix` (what the launcher puts first: the host and its group) and
    /// this error. `stopped` names the signal that stopped the job, when one did.
    pub(crate) fn new(
        script: &str,
        status: ExitStatus,
        tail: VecDeque<String>,
        prefix: &str,
        stopped: Option<&str>,
    ) -> Self {
        use std::os::unix::process::ExitStatusExt;
        let (code, how) = match (status.code(), status.signal()) {
            (Some(code), _) => (
                code.clamp(1, 255) as u8,
                format!("exited with status {code}"),
            ),
            (None, Some(signal)) => (
                (128 + signal).clamp(1, 255) as u8,
                format!("was killed by signal {signal}"),
            ),
            (None, None) => (1, "failed".to_owned()),
        };
        let how = format!("{how}{}", super::stop::after_stop(stopped));
        let head = format!("{prefix}training script `{script}` {how}:\n");
        let budget = (FAILURE_REASON_MAX - PLATFORM_ROOM).saturating_sub(head.chars().count());
        let lines: Vec<String> = tail.into_iter().collect();
        let text = script_error(&lines, budget);
        Self {
            code,
            script: script.to_owned(),
            how,
            error: if text.is_empty() {
                String::new()
            } else {
                format!(":\n{text}")
            },
        }
    }
}

/// What the failure reason shows of the script's stderr, in at most `budget` characters: its
/// own exception (the last traceback a worker printed, not torchrun's `ChildFailedError`
/// around it), after the script's own frames it passed through; the last lines when there is
/// none.
pub(crate) fn script_error(lines: &[String], budget: usize) -> String {
    let lines: Vec<Line<'_>> = lines.iter().map(|l| Line::of(l)).collect();
    let Some(exception) = last_exception(&lines) else {
        let from = lines.len().saturating_sub(SHOWN_LINES);
        let text: Vec<String> = lines[from..]
            .iter()
            .map(|l| l.text.trim().to_owned())
            .collect();
        return fit(text, 0, budget);
    };
    // Where the script was: its own frames (the last frame when all are a library's), each a
    // `File "…", line N, in f` line, the last of them just before the exception.
    let frames = &exception.frames;
    let mut shown: Vec<&str> = frames.iter().copied().filter(|f| is_users(f)).collect();
    if shown.is_empty() {
        shown.extend(frames.last());
    }
    let message_at = shown.len();
    let text = shown
        .iter()
        .map(|f| f.trim().to_owned())
        .chain(exception.message.iter().map(|l| l.to_string()))
        .collect();
    fit(text, message_at, budget)
}

/// A line of torchrun's stderr: which worker wrote it (torchrun prefixes a worker's lines with
/// `[rankN]:`), and the line as the worker wrote it, indentation kept.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    rank: Option<&'a str>,
    text: &'a str,
}

impl<'a> Line<'a> {
    fn of(line: &'a str) -> Self {
        let line = line.trim_end();
        if let Some((rank, rest)) = line.strip_prefix("[rank").and_then(|r| r.split_once("]:"))
            && !rank.is_empty()
            && rank.chars().all(|c| c.is_ascii_digit())
        {
            return Self {
                rank: Some(rank),
                text: rest.strip_prefix(' ').unwrap_or(rest),
            };
        }
        Self {
            rank: None,
            text: line,
        }
    }
}

/// A Python exception as printed: the frames of its traceback and its message's lines (a
/// `hetgen.Loader` error's message holds the data host's traceback of the user's dataset).
#[derive(Debug, Default)]
struct Exception<'a> {
    frames: Vec<&'a str>,
    message: Vec<&'a str>,
}

const TRACEBACK: &str = "Traceback (most recent call last):";

/// The last exception in `lines` that is the script's: torchrun's own (`ChildFailedError`,
/// the `SignalException` of a stop) are not.
fn last_exception<'a>(lines: &[Line<'a>]) -> Option<Exception<'a>> {
    let starts = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.text == TRACEBACK)
        .map(|(i, _)| i);
    starts
        .rev()
        .filter_map(|start| exception_at(lines, start))
        .find(|e| e.message.first().is_some_and(|m| !is_torchrun_s(m)))
}

/// The exception whose traceback begins at `lines[start]`: the lines of the same worker that
/// follow it, until the worker says another exception followed or another traceback begins.
fn exception_at<'a>(lines: &[Line<'a>], start: usize) -> Option<Exception<'a>> {
    let source = lines[start].rank;
    let mut exception = Exception::default();
    for line in lines[start + 1..].iter().filter(|l| l.rank == source) {
        let text = line.text;
        if text.trim().is_empty() {
            continue;
        }
        if text == TRACEBACK
            || text.starts_with("During handling of the above exception")
            || text.starts_with("The above exception was the direct cause")
            || (source.is_none() && !exception.message.is_empty() && is_torch_log(text))
        {
            break;
        }
        if !exception.message.is_empty() {
            // A message's own lines; a caret line under a quoted line says nothing here.
            if !is_caret(text) {
                exception.message.push(text);
            }
        } else if text.starts_with("  File \"") {
            exception.frames.push(text);
        } else if !text.starts_with(' ') {
            exception.message.push(text);
        }
    }
    (!exception.message.is_empty()).then_some(exception)
}

/// Whether an exception's first line is torchrun's own.
fn is_torchrun_s(first: &str) -> bool {
    let name = first.split(':').next().unwrap_or(first);
    name.ends_with("ChildFailedError") || name.ends_with("SignalException")
}

/// torchrun's (glog-style) log lines: `E1207 01:58:11.058000 46 …`.
fn is_torch_log(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some('I' | 'W' | 'E' | 'F'))
        && chars.clone().take(4).filter(char::is_ascii_digit).count() == 4
        && chars.nth(4) == Some(' ')
}

/// Python's `~~~^^^` markers under a quoted line.
fn is_caret(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty() && t.chars().all(|c| matches!(c, '^' | '~' | ' '))
}

/// Whether a `File "…"` frame is the user's code, not an installed package or Python's own.
fn is_users(frame: &str) -> bool {
    let path = frame.split('"').nth(1).unwrap_or_default();
    !(path.contains("/site-packages/")
        || path.contains("/dist-packages/")
        || path.starts_with('<')
        || path.contains("/lib/python3"))
}

/// `lines` joined, in at most `budget` characters, where `lines[message_at]` begins the
/// exception (a `hetgen.Loader` error names the sample and the data host there) and the last
/// line is the error itself. Lines are cut from the middle of those that may go: the frames
/// before the last (`lines[..message_at]`) and the message's inner lines. A line still too long
/// loses its middle.
fn fit(mut lines: Vec<String>, message_at: usize, budget: usize) -> String {
    let size = |lines: &[String]| lines.iter().map(|l| l.chars().count() + 1).sum::<usize>();
    let last = lines.len().saturating_sub(1);
    let mut droppable: Vec<usize> = (0..message_at.saturating_sub(1))
        .chain(message_at + 1..last)
        .collect();
    let mut cut = vec![false; lines.len()];
    while size(&kept(&lines, &cut)) > budget + 1 && !droppable.is_empty() {
        let i = droppable.remove(droppable.len() / 2);
        cut[i] = true;
    }
    lines = kept(&lines, &cut);
    while size(&lines) > budget + 1 {
        let (longest, len) = lines
            .iter()
            .map(|l| l.chars().count())
            .enumerate()
            .max_by_key(|&(_, n)| n)
            .unwrap_or((0, 0));
        let over = size(&lines) - budget - 1;
        if len <= 2 || over >= len {
            break;
        }
        lines[longest] = cut_middle(&lines[longest], len - over - 1);
    }
    lines.join("\n")
}

/// `lines` with each run of cut lines replaced by one [`CUT`] line.
fn kept(lines: &[String], cut: &[bool]) -> Vec<String> {
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if !cut[i] {
            out.push(line.clone());
        } else if i == 0 || !cut[i - 1] {
            out.push(CUT.to_owned());
        }
    }
    out
}

/// `text` in `keep` characters (plus the `…` that stands for its middle).
fn cut_middle(text: &str, keep: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let head = keep / 2;
    let tail = keep - head;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn the_failure_names_the_script_s_error_not_torchrun_s_banner() {
        let stderr = r#"[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/ml/code/train.py", line 6, in <module>
[rank1]:     raise RuntimeError("rank 1 gives up on purpose")
[rank1]: RuntimeError: rank 1 gives up on purpose
E1204 13:00:00.000000 100 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1)
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/opt/ml/code/train.py FAILED
------------------------------------------------------------"#;
        assert_eq!(
            script_error(&lines(stderr), 900),
            "File \"/opt/ml/code/train.py\", line 6, in <module>\n\
             RuntimeError: rank 1 gives up on purpose"
        );
        // Without a Python exception, the last lines.
        let plain: Vec<String> = (0..20).map(|i| format!("line {i}")).collect();
        assert_eq!(script_error(&plain, 900).lines().next(), Some("line 8"));
        // Without torchrun's prefix (one process, or an older torchrun), and a dotted name.
        let dotted = lines(
            "Traceback (most recent call last):\n  File \"x.py\", line 2, in f\n    g()\nmy.pkg.BadInputError: no",
        );
        assert_eq!(
            script_error(&dotted, 900),
            "File \"x.py\", line 2, in f\nmy.pkg.BadInputError: no"
        );
    }

    /// What a rank printed when its `hetgen.Loader` failed on a sample: the loader's error,
    /// whose message holds the data host's traceback of the dataset.
    const LOADER_FAILED: &str = r#"[rank0]: Traceback (most recent call last):
[rank0]:   File "/opt/ml/code/train.py", line 117, in <module>
[rank0]:     main()
[rank0]:   File "/opt/ml/code/train.py", line 89, in main
[rank0]:     for batch in loader:
[rank0]:   File "/venv/lib/python3.11/site-packages/hetgen/_loader.py", line 374, in _batches
[rank0]:     item = self._native.next_batch()
[rank0]:            ^^^^^^^^^^^^^^^^^^^^^^^^^
[rank0]: hetgen.DataError: data host algo-2: shard 2 of epoch 0: sample 57: __getitem__: Traceback (most recent call last):
[rank0]:   File "/opt/ml/code/data.py", line 47, in __getitem__
[rank0]:     label = record['label']
[rank0]:             ~~~~~~^^^^^^^^^
[rank0]: KeyError: 'label'
[rank1]: Traceback (most recent call last):
[rank1]:   File "/opt/ml/code/train.py", line 93, in main
[rank1]:     loss.backward()
E1207 01:58:11.058000 46 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"#;

    #[test]
    fn a_loader_s_error_keeps_the_sample_the_host_and_the_user_s_frames() {
        assert_eq!(
            script_error(&lines(LOADER_FAILED), 900),
            "File \"/opt/ml/code/train.py\", line 117, in <module>\n\
             File \"/opt/ml/code/train.py\", line 89, in main\n\
             hetgen.DataError: data host algo-2: shard 2 of epoch 0: sample 57: __getitem__: \
             Traceback (most recent call last):\n  \
             File \"/opt/ml/code/data.py\", line 47, in __getitem__\n    \
             label = record['label']\n\
             KeyError: 'label'"
        );
    }

    #[test]
    fn a_long_traceback_loses_its_middle_not_the_sample_host_or_error() {
        let mut text = lines(LOADER_FAILED);
        // A dataset deep in library code: 60 frames inside the message.
        let deep: Vec<String> = (0..60)
            .flat_map(|i| {
                [
                    format!("[rank0]:   File \"/venv/lib/python3.11/site-packages/lib/m{i}.py\", line {i}, in f{i}"),
                    format!("[rank0]:     return f{}(x)", i + 1),
                ]
            })
            .collect();
        let at = text.iter().position(|l| l.contains("data.py")).unwrap();
        text.splice(at + 2..at + 2, deep);
        let error = script_error(&text, 700);
        assert!(error.chars().count() <= 700, "{}", error.chars().count());
        let shown: Vec<&str> = error.lines().collect();
        assert_eq!(shown.last(), Some(&"KeyError: 'label'"), "{error}");
        assert!(
            error.contains("File \"/opt/ml/code/train.py\", line 89, in main\nhetgen.DataError: data host algo-2: shard 2 of epoch 0: sample 57: "),
            "{error}"
        );
        assert!(error.contains(CUT) && error.contains("m0.py"), "{error}");
        // One line too long for any budget keeps its start and end.
        let one = vec![format!("ValueError: sample 3: {}end", "x".repeat(2000))];
        let error = script_error(&one, 100);
        assert_eq!(error.chars().count(), 100, "{error}");
        assert!(error.starts_with("ValueError: sample 3: ") && error.ends_with("end"));
    }

    #[test]
    fn the_failure_file_fits_sagemaker_s_failure_reason() {
        use std::os::unix::process::ExitStatusExt;
        let mut text = lines(LOADER_FAILED);
        let at = text.iter().position(|l| l.contains("data.py")).unwrap();
        let deep = (0..200).map(|i| format!("[rank0]:   File \"/x/m{i}.py\", line 1, in f"));
        text.splice(at..at, deep);
        let prefix = "algo-1 (dnn_group): ";
        let failed = ScriptFailed::new(
            "train.py",
            ExitStatus::from_raw(1 << 8),
            text.into(),
            prefix,
            None,
        );
        let file = format!("{prefix}{failed}");
        assert!(
            file.chars().count() <= FAILURE_REASON_MAX - PLATFORM_ROOM,
            "{}",
            file.chars().count()
        );
        assert!(
            file.contains("sample 57") && file.ends_with("KeyError: 'label'"),
            "{file}"
        );
        assert_eq!(failed.code, 1);
    }
}
