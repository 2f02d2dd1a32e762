//! The trainer role in script mode: the user's own script under `torchrun`, on every host of
//! the trainer group.
//!
//! Every trainer host starts `torchrun --nnodes N --node-rank R --nproc-per-node P
//! --master-addr A --master-port PORT SCRIPT ARGS…` where N is the group's host count, R this
//! host's index in the group's host list from `resourceconfig.json` (sorted, so every host
//! computes the same ranks), P the spec's `processes_per_host`, and A the first host's address,
//! resolved as the data client resolves hosts. The script finds everything `hetgen.Loader`
//! needs in the environment it inherits (`SAGEMAKER_BASE_DIR`, `HETGEN_*`, `SM_*`), and
//! `torchrun` adds `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
//!
//! `torchrun` runs in its own process group: SIGTERM or SIGINT to the launcher (how SageMaker
//! stops a job) is passed to the whole group. When the script ends, however it ends, this host
//! tells the data servers it finished; a server stops once every trainer host has (or at once
//! when one failed), so one slow host is never cut off by a fast one, and no data instance
//! bills after training. The script's exit status becomes the launcher's, and its last error
//! lines the job's failure reason.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use hetgen_data::client::tell_job_finished;
use hetgen_data::job::{data_hosts, resolve_blocking};
use hetgen_env::Env;
use hetgen_env::process::Signal;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::{Job, ScriptTrainer};
use hetgen_spec::{Catalog, Efa};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Lines of the script's stderr kept to find its error in.
const TAIL_LINES: usize = 200;
/// Lines of that tail shown when no Python exception is found in it.
const SHOWN_LINES: usize = 12;
/// SageMaker shows at most 1024 characters of a failure reason; leave room for the prefix.
const TAIL_CHARS: usize = 800;

/// The script failed: its exit status (128 + N for signal N) and what it last printed.
#[derive(Debug, thiserror::Error)]
#[error("training script `{script}` {how}{tail}")]
pub struct ScriptFailed {
    /// The status the launcher exits with.
    pub code: u8,
    script: String,
    how: String,
    tail: String,
}

/// Run this host's share of the script, with `more_args` after the spec's `args`, and tell the
/// data servers when it is over.
pub fn run(
    job: &Job,
    script: &ScriptTrainer,
    env: &Env,
    more_args: &[String],
) -> Result<String, BoxError> {
    let rendezvous = Rendezvous::of(env)?;
    let code_dir = std::env::var_os(hetgen_env::CODE_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(hetgen_env::DEFAULT_CODE_DIR));
    let program = code_dir.join(&script.script);
    if !program.is_file() {
        return Err(format!(
            "the training script {} does not exist (the image copies `source_dir` to {})",
            program.display(),
            code_dir.display()
        )
        .into());
    }
    let mut command = torchrun(env, script, more_args, &rendezvous, &code_dir, &program);
    tracing::info!(
        hosts = rendezvous.nodes,
        node_rank = rendezvous.node_rank,
        processes = script.processes_per_host,
        master = %rendezvous.master,
        script = %program.display(),
        "starting torchrun"
    );
    // Handlers before torchrun starts: it then starts with the default action for both (a
    // handler, unlike an ignored signal, does not outlive `exec`), whatever this process
    // inherited (on AWS's image it inherits both ignored).
    let signals = Signals::new([SIGTERM, SIGINT])?;
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start torchrun (is PyTorch installed in the image?): {e}"))?;
    let signals = forward_first_signal(signals, child.id());
    let copier = copy_stderr(child.stderr.take().expect("stderr is piped"));
    let status = child.wait()?;
    signals.close();
    let tail = copier.join().unwrap_or_default();

    let failed = !status.success();
    let reason = if failed {
        format!("{} training failed ({status})", env.host())
    } else {
        format!("{} finished training", env.host())
    };
    // After a signal the data servers are told all the same (this host alone may have been
    // stopped). A server answers a Shutdown in milliseconds; one that has not within a second
    // is gone (the whole job is being stopped, or another host failed) or frozen, and the
    // message waits for it in its socket.
    tell_data_servers(job, env, failed, &reason, Duration::from_secs(1));
    if !failed {
        return Ok(format!(
            "training script finished ({} host(s) × {} process(es))",
            rendezvous.nodes, script.processes_per_host
        ));
    }
    Err(Box::new(ScriptFailed::new(&script.script, status, tail)))
}

/// Where this host meets the trainer group's others.
struct Rendezvous {
    /// Hosts of the trainer group.
    nodes: usize,
    /// This host's index among them (`resourceconfig.json`'s order).
    node_rank: usize,
    /// The first host, resolved, at the rendezvous port.
    master: SocketAddr,
}

impl Rendezvous {
    fn of(env: &Env) -> Result<Self, BoxError> {
        let hosts = env.resources.hosts_of(env.group());
        let node_rank = hosts.iter().position(|h| h == env.host()).ok_or_else(|| {
            format!(
                "{} is not among the hosts of its group `{}` in resourceconfig.json ({hosts:?})",
                env.host(),
                env.group()
            )
        })?;
        let port = hetgen_env::port_from_env(
            hetgen_env::RENDEZVOUS_PORT_VAR,
            hetgen_env::DEFAULT_RENDEZVOUS_PORT,
        )?;
        let master = resolve_blocking(&hosts[0], port, Duration::from_secs(600))
            .map_err(|e| format!("the rendezvous host {}: {e}", hosts[0]))?;
        Ok(Self {
            nodes: hosts.len(),
            node_rank,
            master,
        })
    }
}

/// `torchrun` for this host's share of `program`, run in `code_dir`, in a process group of its
/// own that dies with the launcher; its stderr piped.
fn torchrun(
    env: &Env,
    script: &ScriptTrainer,
    more_args: &[String],
    rendezvous: &Rendezvous,
    code_dir: &Path,
    program: &Path,
) -> Command {
    let mut command = Command::new("torchrun");
    command
        .arg(format!("--nnodes={}", rendezvous.nodes))
        .arg(format!("--node-rank={}", rendezvous.node_rank))
        .arg(format!("--nproc-per-node={}", script.processes_per_host))
        .arg(format!("--master-addr={}", rendezvous.master.ip()))
        .arg(format!("--master-port={}", rendezvous.master.port()))
        .arg(program)
        .args(&script.args)
        .args(more_args)
        .current_dir(code_dir)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    // What the training toolkit's torchrun runner would set; the job's environment wins.
    for (var, value) in collective_environment(env) {
        if std::env::var_os(var).is_none() {
            command.env(var, value);
        }
    }
    // Its own process group, which SIGTERM is passed to (torchrun then stops its workers); and
    // should the launcher die without passing anything on, torchrun dies with it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    // SAFETY: one system call, async-signal-safe, touching nothing of the parent's state.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(
            &mut command,
            hetgen_env::process::die_with_parent,
        );
    }
    command
}

/// The script's stderr goes on to ours as it comes; the copier keeps its last lines and hands
/// them back when the stream ends.
fn copy_stderr(stderr: ChildStderr) -> JoinHandle<VecDeque<String>> {
    std::thread::spawn(move || {
        let mut tail = VecDeque::with_capacity(TAIL_LINES);
        let mut out = std::io::stderr();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(out, "{line}");
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        tail
    })
}

impl ScriptFailed {
    /// `script` ended with `status` (not a success), having last printed `tail`.
    fn new(script: &str, status: ExitStatus, tail: VecDeque<String>) -> Self {
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
        let lines: Vec<String> = tail.into_iter().collect();
        let mut text = script_error(&lines);
        if text.len() > TAIL_CHARS {
            let mut cut = text.len() - TAIL_CHARS;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            text = format!("…{}", &text[cut..]);
        }
        Self {
            code,
            script: script.to_owned(),
            how,
            tail: if text.is_empty() {
                String::new()
            } else {
                format!(":\n{text}")
            },
        }
    }
}

/// What the failure reason shows of the script's stderr: its own error, the last Python
/// exception line with the `File "…", line N` it was raised at, rather than the
/// `ChildFailedError` banner torchrun prints around it; the last lines when there is none.
fn script_error(lines: &[String]) -> String {
    // torchrun may prefix a worker's lines with `[rankN]:`.
    let bare = |line: &str| -> String {
        let line = line.trim_start();
        match line.strip_prefix("[rank").and_then(|r| r.split_once("]:")) {
            Some((rank, rest)) if rank.chars().all(|c| c.is_ascii_digit()) => {
                rest.trim().to_owned()
            }
            _ => line.trim_end().to_owned(),
        }
    };
    let is_exception = |line: &str| {
        let Some((name, _)) = line.split_once(':') else {
            return false;
        };
        let last = name.rsplit('.').next().unwrap_or(name);
        !name.contains(' ')
            && !name.is_empty()
            && (last.ends_with("Error") || last.ends_with("Exception") || last == "KeyboardInterrupt")
            // torchrun's own summary of a failed worker, not the script's error.
            && last != "ChildFailedError"
    };
    let Some(at) = lines.iter().rposition(|l| is_exception(&bare(l))) else {
        let from = lines.len().saturating_sub(SHOWN_LINES);
        return lines[from..].join("\n");
    };
    let place = lines[..at]
        .iter()
        .rev()
        .map(|l| bare(l))
        .find(|l| l.starts_with("File \""));
    place
        .into_iter()
        .chain([bare(&lines[at])])
        .collect::<Vec<_>>()
        .join("\n")
}

/// The collective back ends' settings for this host, as AWS's training toolkit sets them for
/// torchrun (hetgen starts torchrun itself, so that it spans the trainer group only): the
/// interface SageMaker set up for gloo and NCCL, NCCL's `simple` protocol, and EFA where the
/// instance catalog says the type has it ([`hetgen_spec::Efa`], the toolkit's own lists).
fn collective_environment(env: &Env) -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    let interface = &env.resources.network_interface_name;
    if !interface.is_empty() {
        vars.push(("GLOO_SOCKET_IFNAME", interface.clone()));
        vars.push(("NCCL_SOCKET_IFNAME", interface.clone()));
    }
    vars.push(("NCCL_PROTO", "simple".to_owned()));
    let efa = Catalog::builtin()
        .get(&env.resources.current_instance_type)
        .and_then(|instance| instance.efa);
    if efa.is_some() {
        vars.push(("FI_PROVIDER", "efa".to_owned()));
    }
    if efa == Some(Efa::Rdma) {
        vars.push(("FI_EFA_USE_DEVICE_RDMA", "1".to_owned()));
        vars.push(("RDMAV_FORK_SAFE", "1".to_owned()));
    }
    vars
}

/// This host finished: every data server is told (best effort; a server not told exits by its
/// watchdog).
fn tell_data_servers(job: &Job, env: &Env, failed: bool, reason: &str, patience: Duration) {
    if data_hosts(job, env).is_empty() {
        return;
    }
    // No handshake first, and no waiting past `patience`: a frozen server would hold this
    // host, and its GPUs, until it thaws.
    match tell_job_finished(job, env, failed, reason, patience) {
        Ok(untold) => {
            for (host, why) in untold {
                tracing::warn!(%host, %why, "could not tell a data server this host finished (its watchdog will stop it)");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not reach the data servers to say this host finished (their watchdog will stop them)")
        }
    }
}

/// The first SIGTERM or SIGINT to the launcher goes to `torchrun`'s whole process group; later
/// ones are the same stop said again (the container's start repeats SIGTERM every second until
/// its processes are gone), and a second signal to torchrun would cut short its wait for the
/// workers, leaving the script's SIGTERM handler to finish unwatched.
fn forward_first_signal(mut signals: Signals, group: u32) -> signal_hook::iterator::Handle {
    let handle = signals.handle();
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            tracing::info!(signal, "passing the signal to the training script");
            // The group is torchrun's, which this process started and has not yet reaped.
            if let Some(signal) = Signal::from_named_raw(signal) {
                let _ = hetgen_env::process::signal_group(group, signal);
            }
        }
        // The handlers stay installed until the launcher closes them: a repeat is taken, not
        // left to the default action, which would end the launcher before the script.
        for _ in signals.forever() {}
    });
    handle
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use hetgen_env::{Paths, ResourceConfig};

    use super::*;

    fn env(instance_type: &str, interface: &str) -> Env {
        Env {
            paths: Paths {
                base: PathBuf::from("/opt/ml"),
            },
            resources: ResourceConfig {
                current_group_name: "dnn_group".to_owned(),
                current_host: "algo-1".to_owned(),
                current_instance_type: instance_type.to_owned(),
                hosts: vec!["algo-1".to_owned()],
                instance_groups: Vec::new(),
                network_interface_name: interface.to_owned(),
            },
            hyperparameters: BTreeMap::new(),
            channels: BTreeMap::new(),
            channel_dirs: BTreeMap::new(),
        }
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
        let lines: Vec<String> = stderr.lines().map(str::to_owned).collect();
        assert_eq!(
            script_error(&lines),
            "File \"/opt/ml/code/train.py\", line 6, in <module>\n\
             RuntimeError: rank 1 gives up on purpose"
        );
        // Without a Python exception, the last lines.
        let plain: Vec<String> = (0..20).map(|i| format!("line {i}")).collect();
        assert_eq!(script_error(&plain).lines().next(), Some("line 8"));
        let dotted = vec![
            "  File \"x.py\", line 2, in f".to_owned(),
            "my.pkg.BadInputError: no".to_owned(),
        ];
        assert_eq!(
            script_error(&dotted),
            "File \"x.py\", line 2, in f\nmy.pkg.BadInputError: no"
        );
    }

    /// The collective settings of a host of `instance_type` on `interface`, as `NAME=value`.
    fn collective_settings(instance_type: &str, interface: &str) -> Vec<String> {
        collective_environment(&env(instance_type, interface))
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    #[test]
    fn torchrun_gets_the_toolkit_s_collective_settings() {
        let interface = ["GLOO_SOCKET_IFNAME=eth0", "NCCL_SOCKET_IFNAME=eth0"];
        assert_eq!(
            collective_settings("ml.p4d.24xlarge", "eth0"),
            [
                &interface[..],
                &["NCCL_PROTO=simple", "FI_PROVIDER=efa"],
                &["FI_EFA_USE_DEVICE_RDMA=1", "RDMAV_FORK_SAFE=1"],
            ]
            .concat()
        );
        // EFA without RDMA, and an instance without EFA or a known interface.
        assert_eq!(
            collective_settings("ml.g5.48xlarge", "eth0"),
            [&interface[..], &["NCCL_PROTO=simple", "FI_PROVIDER=efa"]].concat()
        );
        assert_eq!(
            collective_settings("ml.g5.xlarge", ""),
            ["NCCL_PROTO=simple"]
        );
    }
}
