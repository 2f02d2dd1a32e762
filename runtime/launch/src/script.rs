//! The trainer role in script mode: the user's own script under `torchrun`, on every host of
//! the trainer group.
//!
//! Every trainer host starts `torchrun --nnodes N --node-rank R --nproc-per-node P
//! --master-addr A --master-port PORT SCRIPT ARGS…` where N is the group's host count, R this
//! host's index in the group's host list from `resourceconfig.json` (sorted, so every host
//! computes the same ranks), P the spec's `processes_per_host`, and A the first host's address,
//! resolved as the data client resolves hosts. On Kubernetes Kubeflow Trainer's torch plugin
//! says all five (`PET_NNODES`, `PET_NODE_RANK`, `PET_NPROC_PER_NODE`, `PET_MASTER_ADDR`,
//! `PET_MASTER_PORT`): they are taken, once N and R agree with the cluster the pod computed
//! from the job's variables (`auto` processes are the spec's). The script finds everything `hetgen.Loader`
//! needs in the environment it inherits (`SAGEMAKER_BASE_DIR`, `HETGEN_*`, `SM_*`), and
//! `torchrun` adds `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
//!
//! `torchrun` runs in its own process group. SIGTERM or SIGINT to the launcher (how SageMaker
//! stops a job) goes to the script's processes, whose status then becomes the host's
//! ([`stop`]). When the script ends, however it ends, this host tells the data servers it
//! finished; a server stops once every trainer host has (or at once when one failed), so one
//! slow host is never cut off by a fast one, and no data instance bills after training. A rank
//! that outlives the data servers is ended ([`linger`]). The script's exit status becomes the
//! launcher's, and its own exception the job's failure reason ([`failure`]).

mod failure;
mod linger;
mod rendezvous;
mod stop;
mod torchrun;
mod workers;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ChildStderr;
use std::thread::JoinHandle;
use std::time::Duration;

use hetgen_data::client::tell_job_finished;
use hetgen_data::job::data_hosts;
use hetgen_env::Env;
use hetgen_pipeline::BoxError;
use hetgen_spec::model::{Job, ScriptTrainer};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use rendezvous::Rendezvous;
use torchrun::torchrun;

pub use failure::ScriptFailed;
pub use linger::{LINGER_VAR, Lingered};

/// Lines of the script's stderr kept to find its error in.
const TAIL_LINES: usize = 200;

/// Run this host's share of the script, with `more_args` after the spec's `args`, and tell the
/// data servers when it is over.
pub fn run(
    job: &Job,
    script: &ScriptTrainer,
    env: &Env,
    more_args: &[String],
) -> Result<String, BoxError> {
    let rendezvous = Rendezvous::of(env, script)?;
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
        processes = rendezvous.processes,
        master = %rendezvous.master,
        script = %program.display(),
        "starting torchrun"
    );
    // Handlers before torchrun starts: it then starts with the default action for both (a
    // handler, unlike an ignored signal, does not outlive `exec`), whatever this process
    // inherited (on AWS's image it inherits both ignored).
    let signals = Signals::new([SIGTERM, SIGINT])?;
    let linger = linger::Setting::of(job, env)?;
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start torchrun (is PyTorch installed in the image?): {e}"))?;
    let stop = stop::Stop::pass_on(signals, child.id());
    let linger = linger.map(|setting| setting.watch(&script.script, child.id()));
    let copier = copy_stderr(child.stderr.take().expect("stderr is piped"));
    let status = child.wait()?;
    let stopped = stop.close();
    let lingered = linger.and_then(linger::Watch::finish);
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
    if let Some(lingered) = lingered {
        return Err(Box::new(lingered));
    }
    if !failed {
        return Ok(format!(
            "training script finished ({} host(s) × {} process(es)){}",
            rendezvous.nodes,
            rendezvous.processes,
            stop::after_stop(stopped)
        ));
    }
    // What the launcher writes before the error in the failure file (`crate::launch_with`).
    let prefix = format!("{} ({}): ", env.host(), env.group());
    Err(Box::new(ScriptFailed::new(
        &script.script,
        status,
        tail,
        &prefix,
        stopped,
    )))
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

/// `algo-1` of `dnn_group` on `instance_type`, its collectives on `interface`: a trainer host
/// for the tests of this module's parts.
#[cfg(test)]
fn test_env(instance_type: &str, interface: &str) -> Env {
    Env {
        paths: hetgen_env::Paths {
            base: PathBuf::from("/opt/ml"),
        },
        resources: hetgen_env::ResourceConfig {
            current_group_name: "dnn_group".to_owned(),
            current_host: "algo-1".to_owned(),
            current_instance_type: instance_type.to_owned(),
            hosts: vec!["algo-1".to_owned()],
            instance_groups: Vec::new(),
            network_interface_name: interface.to_owned(),
        },
        hyperparameters: std::collections::BTreeMap::new(),
        channels: std::collections::BTreeMap::new(),
        channel_dirs: std::collections::BTreeMap::new(),
        kubernetes: false,
    }
}
