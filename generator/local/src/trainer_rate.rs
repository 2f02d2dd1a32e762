//! `hetgen profile --trainer`: the rate one GPU trains at when input costs nothing, measured
//! on the user's own script rather than typed in.
//!
//! The script runs here under `torchrun` as the job runs it (one process: the rate is per GPU),
//! on this machine's accelerator when torch sees one, else on its CPU. `hetgen.Loader()` in it
//! sees [`hetgen_env::REPLAY_VAR`]: it makes a few batches of the job's own dataset on this
//! host, then hands them out from memory, so no step waits for data. Its `hetgen-step` lines
//! (every 10 batches) give the step time; the first two windows are a warm-up (the first
//! kernels, allocator growth) and are not counted. Once enough steps are measured the script's
//! process group is stopped: what it does after training (evaluating, saving) is not run.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use hetgen_env::process::{Signal, die_with_parent, signal_group};
use hetgen_spec::step::StepLine;
use serde::{Deserialize, Serialize};

/// Batches between two of the replaying Loader's step lines (`_loader.py` prints every 10).
const LINE_EVERY: u64 = 10;
/// Step lines not counted: the warm-up.
const WARMUP_LINES: usize = 2;
/// Lines of the script's output kept, to find its traceback for an error message.
const KEPT: usize = 400;
/// Lines of it an error shows when no traceback of the script's is among them.
const TAIL: usize = 40;

/// What to run.
#[derive(Debug, Clone)]
pub struct TrainerRun {
    /// The Python with torch (and the hetgen package) that runs `torchrun` and the script.
    pub python: PathBuf,
    /// The spec whose dataset the Loader replays (absolute).
    pub spec: PathBuf,
    /// The script's folder (the spec's `source_dir`): its working directory, and where the
    /// dataset's file is found.
    pub code_dir: PathBuf,
    /// The script, relative to `code_dir`.
    pub script: String,
    /// Its arguments: the spec's, then the hyperparameters as `--key value`, as the job passes
    /// them.
    pub args: Vec<String>,
    /// `SM_CHANNEL_<NAME>` of the trainer's channels: their local folders.
    pub channels: BTreeMap<String, PathBuf>,
    /// Samples per batch.
    pub batch_size: u32,
    /// Steps to time after the warm-up.
    pub steps: u64,
    /// The most the whole run may take.
    pub timeout: Duration,
    /// An empty folder for what the script writes (`SM_MODEL_DIR`, `SM_OUTPUT_DATA_DIR`).
    pub scratch: PathBuf,
}

/// The trainer's rate with input that never waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerRate {
    /// `cuda` or `cpu`: where torch could run the script.
    pub device: String,
    /// The accelerator's name, when there is one.
    pub device_name: Option<String>,
    /// torch's CPU threads in a fresh process (the script may set its own).
    pub cpu_threads: u32,
    /// Steps timed.
    pub steps: u64,
    /// Mean time of a step, ms.
    pub step_ms: f64,
    /// Mean wait for a batch, ms (near 0: the replay hands out batches from memory).
    pub wait_ms: f64,
    /// Samples per second one trainer process (one GPU) trains at.
    pub samples_per_s: f64,
}

/// Why the trainer could not be measured.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TrainerError {
    /// The Python given cannot import torch.
    #[error("`{}` cannot import torch: {message}", python.display())]
    #[diagnostic(
        code("hetgen::profile::trainer"),
        help(
            "pass `--python` the interpreter of an environment with torch and the hetgen package, as the job's image has"
        )
    )]
    NoTorch { python: PathBuf, message: String },
    /// A program that cannot be started.
    #[error("cannot start `{}`: {source}", program.display())]
    #[diagnostic(
        code("hetgen::profile::trainer"),
        help("pass `--python` an interpreter that exists")
    )]
    Start {
        program: PathBuf,
        source: std::io::Error,
    },
    /// The script ended with an error before enough steps were timed.
    #[error("`{script}` failed ({how}) after {steps} step(s):\n{tail}")]
    #[diagnostic(code("hetgen::profile::trainer"), help("{help}"))]
    Failed {
        script: String,
        how: String,
        steps: u64,
        tail: String,
        help: String,
    },
    /// The script ended, or ran out of time, without a step timed.
    #[error("`{script}` {why} before any step was timed:\n{tail}")]
    #[diagnostic(
        code("hetgen::profile::trainer"),
        help(
            "the script must read its batches through `hetgen.Loader()` (no arguments: the profile sets its input) and train at least {needed} batches"
        )
    )]
    NoSteps {
        script: String,
        why: String,
        needed: u64,
        tail: String,
    },
}

/// What torch sees on this machine.
#[derive(Debug, Deserialize)]
struct Probe {
    cuda: bool,
    name: Option<String>,
    threads: u32,
}

/// Runs the script as [`TrainerRun`] says, handing every line it prints to `line` (for a
/// progress display), and returns its rate.
pub fn measure(run: &TrainerRun, line: &mut dyn FnMut(&str)) -> Result<TrainerRate, TrainerError> {
    let probe = probe(&run.python)?;
    let needed_lines = run.steps.div_ceil(LINE_EVERY).max(1) as usize;
    // The first batch opens the first window; then the warm-up, the timed lines and a spare.
    let total = 1 + LINE_EVERY * (WARMUP_LINES + needed_lines + 1) as u64;
    let mut child = command(run, total)
        .spawn()
        .map_err(|source| TrainerError::Start {
            program: run.python.clone(),
            source,
        })?;
    let lines = read_lines(&mut child);
    let started = Instant::now();
    let mut tail = VecDeque::new();
    let mut steps = Vec::new();
    let outcome = loop {
        let left = run.timeout.saturating_sub(started.elapsed());
        match lines.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(text) => {
                line(&text);
                if let Some(step) = StepLine::parse(&text) {
                    steps.push(step);
                    if steps.len() >= WARMUP_LINES + needed_lines {
                        break Ended::Measured;
                    }
                }
                if tail.len() == KEPT {
                    tail.pop_front();
                }
                tail.push_back(text);
            }
            Err(RecvTimeoutError::Timeout) if started.elapsed() >= run.timeout => {
                break Ended::TimedOut;
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Both pipes closed: the process group's output is over.
            Err(RecvTimeoutError::Disconnected) => break Ended::Exited,
        }
    };
    let status = stop(&mut child, outcome);
    let timed: Vec<&StepLine> = steps.iter().skip(WARMUP_LINES).collect();
    let kept: Vec<String> = tail.into();
    let tail = what_failed(&kept);
    let script = run.script.clone();
    if timed.is_empty() {
        let measured_steps = steps.last().map_or(0, |s| s.step);
        return Err(match (outcome, status) {
            (Ended::Exited, Some(status)) if !status.success() => TrainerError::Failed {
                script,
                how: describe(status),
                steps: measured_steps,
                help: failed_help(&probe, &tail),
                tail: tail.join("\n"),
            },
            (outcome, _) => TrainerError::NoSteps {
                script,
                why: match outcome {
                    Ended::TimedOut => format!("ran {} s", run.timeout.as_secs()),
                    _ => "ended".to_owned(),
                },
                needed: total,
                tail: tail.join("\n"),
            },
        });
    }
    let n = timed.len() as f64;
    let step_ms = timed.iter().map(|s| s.step_ms).sum::<f64>() / n;
    let wait_ms = timed.iter().map(|s| s.wait_ms).sum::<f64>() / n;
    Ok(TrainerRate {
        device: if probe.cuda { "cuda" } else { "cpu" }.to_owned(),
        device_name: probe.name,
        cpu_threads: probe.threads,
        steps: timed.len() as u64 * LINE_EVERY,
        step_ms,
        wait_ms,
        samples_per_s: f64::from(run.batch_size) * 1000.0 / step_ms.max(1e-9),
    })
}

/// How the output loop ended.
#[derive(Debug, Clone, Copy)]
enum Ended {
    Measured,
    Exited,
    TimedOut,
}

/// What torch sees here, from a short run of `python`.
fn probe(python: &Path) -> Result<Probe, TrainerError> {
    const CODE: &str = "import json, torch\n\
        c = torch.cuda.is_available()\n\
        print(json.dumps({'cuda': c, 'name': torch.cuda.get_device_name(0) if c else None, \
        'threads': torch.get_num_threads()}))";
    let out = Command::new(python)
        .args(["-c", CODE])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| TrainerError::Start {
            program: python.to_owned(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let no_torch = |message: String| TrainerError::NoTorch {
        python: python.to_owned(),
        message,
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("").to_owned();
        return Err(no_torch(last));
    }
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).map_err(|e| no_torch(format!("unexpected answer `{last}`: {e}")))
}

/// `torchrun` over the script, one process, in a process group of its own.
fn command(run: &TrainerRun, total_steps: u64) -> Command {
    let mut command = Command::new(&run.python);
    command
        .args([
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
        ])
        .args(["--nproc-per-node", "1", &run.script])
        .args(&run.args)
        .current_dir(&run.code_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PYTHONUNBUFFERED", "1")
        .env(hetgen_env::REPLAY_VAR, &run.spec)
        .env(hetgen_env::REPLAY_STEPS_VAR, total_steps.to_string())
        .env(hetgen_env::CODE_DIR_VAR, &run.code_dir)
        .env("SM_MODEL_DIR", run.scratch.join("model"))
        .env("SM_OUTPUT_DATA_DIR", run.scratch.join("output"))
        // Not inside a job: the Loader must not find one of the caller's.
        .env_remove(hetgen_env::BASE_DIR_VAR)
        .env_remove(hetgen_env::JOB_FILE_VAR)
        .env_remove(hetgen_env::PYTHON_VAR)
        .process_group(0);
    for (name, dir) in &run.channels {
        command.env(format!("SM_CHANNEL_{}", name.to_uppercase()), dir);
    }
    // SAFETY: `die_with_parent` is one async-signal-safe system call.
    unsafe {
        command.pre_exec(die_with_parent);
    }
    command
}

/// The child's stdout and stderr, line by line, on one channel (closed when both end).
fn read_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// Ends the script's process group and reaps it; its exit status when it had ended by itself.
/// A script whose output is over (`Ended::Exited`) is given 5 s to exit on its own; one still
/// running is sent SIGTERM, then SIGKILL 5 s later.
fn stop(child: &mut Child, ended: Ended) -> Option<ExitStatus> {
    let grace = Duration::from_secs(5);
    if let Ended::Exited = ended
        && let Some(status) = wait_for(child, grace)
    {
        // Whatever it left running in its group goes too.
        let _ = signal_group(child.id(), Signal::KILL);
        return Some(status);
    }
    let _ = signal_group(child.id(), Signal::TERM);
    if wait_for(child, grace).is_none() {
        let _ = signal_group(child.id(), Signal::KILL);
        let _ = child.wait();
    } else {
        let _ = signal_group(child.id(), Signal::KILL);
    }
    None
}

/// The child's exit status, if it exits within `limit`.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `exit 1`, or the signal that killed it.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => hetgen_env::process::signal_name(signal).to_owned(),
        _ => status.to_string(),
    }
}

/// The lines that say why the script failed: the last traceback of the script's own (not
/// torchrun's report of its child's failure, which follows it), else the last lines.
fn what_failed(lines: &[String]) -> Vec<String> {
    // torchrun may prefix a worker's lines with its rank (`[rank0]:`).
    let body = |l: &str| -> String {
        match l.split_once("]:") {
            Some((rank, rest)) if rank.starts_with("[rank") => {
                rest.strip_prefix(' ').unwrap_or(rest).to_owned()
            }
            _ => l.to_owned(),
        }
    };
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| body(l).starts_with("Traceback (most recent call last):"))
        .map(|(i, _)| i)
        .collect();
    for (n, &start) in starts.iter().enumerate().rev() {
        let end = starts.get(n + 1).copied().unwrap_or(lines.len());
        let block = &lines[start..end];
        if block.iter().any(|l| l.contains("torch/distributed/")) {
            continue;
        }
        // The traceback ends with its exception line: the first line after it that is not
        // indented (a frame or its source).
        let last = block
            .iter()
            .skip(1)
            .position(|l| !body(l).starts_with(' '))
            .map_or(block.len(), |i| i + 2);
        return block[..last.min(block.len())].to_vec();
    }
    lines[lines.len().saturating_sub(TAIL)..].to_vec()
}

/// The help for a script that failed: what most often makes it fail here.
fn failed_help(probe: &Probe, tail: &[String]) -> String {
    let mentions = |word: &str| tail.iter().any(|l| l.contains(word));
    if !probe.cuda && (mentions("CUDA") || mentions("cuda") || mentions("NCCL")) {
        "this machine has no accelerator torch can use: the script must run on the CPU when \
         `torch.cuda.is_available()` is false (and use the `gloo` backend), or profile on a GPU machine"
            .to_owned()
    } else if mentions("hetgen") {
        "the lines above are the script's and the Loader's; a dataset that raises fails the script on its first batches".to_owned()
    } else {
        "the lines above are the end of the script's output".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn the_scripts_own_traceback_is_shown_not_torchruns_report() {
        let output = lines(
            "epoch 0\n\
             Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n\
             RuntimeError: the model does not fit\n\
             E1207 agent failed\n\
             Traceback (most recent call last):\n  File \"/venv/torch/distributed/run.py\", line 3\n\
             torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n\
             train.py FAILED",
        );
        assert_eq!(
            what_failed(&output),
            lines(
                "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\n\
                 RuntimeError: the model does not fit"
            )
        );
    }

    #[test]
    fn a_rank_prefix_is_read_through_and_without_a_traceback_the_last_lines_are_shown() {
        let output = lines(
            "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 2\n\
             [rank0]: KeyError: 'label'",
        );
        assert_eq!(what_failed(&output), output);
        let plain: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        assert_eq!(what_failed(&plain), plain[60..].to_vec());
    }
}
