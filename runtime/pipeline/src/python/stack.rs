//! A stuck worker's stack, as `faulthandler` wrote it, cut down to what the user wrote: hetgen's
//! own frames (`worker.py`) and its thread that watches for the pipeline's end are left out.

use std::path::Path;

/// Frames of `worker.py`'s thread that watches for the end of the pipeline.
const WATCHER: &str = "in watch_parent";

/// The threads of `dump` (`faulthandler`'s text: a `Thread 0x… (most recent call first):` or
/// `Current thread 0x…` line, then `  File "…", line N in f` lines) without the frames of
/// `script`, and without the threads that are left with none; a line saying so when the
/// worker wrote no stack.
pub(super) fn user_frames(dump: &str, script: &Path) -> String {
    let ours = format!("File \"{}\"", script.display());
    let mut threads: Vec<Vec<&str>> = Vec::new();
    for line in dump.lines().filter(|l| !l.trim().is_empty()) {
        let header = line.starts_with("Thread ") || line.starts_with("Current thread ");
        match threads.last_mut() {
            Some(thread) if !header => thread.push(line),
            _ => threads.push(vec![line]),
        }
    }
    let kept: Vec<String> = threads
        .into_iter()
        .filter(|thread| {
            !thread
                .iter()
                .any(|l| l.contains(&ours) && l.ends_with(WATCHER))
        })
        .filter_map(|thread| {
            let (header, frames) = thread.split_first()?;
            let frames: Vec<&str> = frames
                .iter()
                .copied()
                .filter(|l| !l.contains(&ours))
                .collect();
            (!frames.is_empty()).then(|| {
                std::iter::once(*header)
                    .chain(frames)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        })
        .collect();
    if kept.is_empty() {
        return "(no stack: the worker wrote none; it may have replaced the signal handler hetgen \
                asks `faulthandler` for, or be stuck outside Python)"
            .to_owned();
    }
    kept.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = r#"Thread 0x00007f0ba3ec56c0 (most recent call first):
  File "/dev/shm/hetgen-x/worker.py", line 412 in watch_parent
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner

Current thread 0x00007f0ba4a0cb80 (most recent call first):
  File "/code/data.py", line 9 in __getitem__
  File "/dev/shm/hetgen-x/worker.py", line 350 in getitem
  File "/dev/shm/hetgen-x/worker.py", line 470 in <module>"#;

    #[test]
    fn the_users_frames_stay_and_hetgens_go() {
        let stack = user_frames(DUMP, Path::new("/dev/shm/hetgen-x/worker.py"));
        assert_eq!(
            stack,
            "Current thread 0x00007f0ba4a0cb80 (most recent call first):\n  File \"/code/data.py\", line 9 in __getitem__"
        );
    }

    #[test]
    fn no_dump_says_so() {
        let stack = user_frames("", Path::new("/dev/shm/hetgen-x/worker.py"));
        assert!(stack.starts_with("(no stack"), "{stack}");
    }
}
