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
mod stop;
mod workers;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use hetgen_data::client::tell_job_finished;
use hetgen_data::job::{data_hosts, resolve_blocking};
use hetgen_env::{Env, VariableError};
use hetgen_pipeline::BoxError;
use hetgen_spec::kube;
use hetgen_spec::model::{Job, ScriptTrainer};
use hetgen_spec::{Catalog, Efa};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

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
            match stopped {
                Some(signal) => format!(" after the job was stopped ({signal})"),
                None => String::new(),
            }
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

/// Where this host meets the trainer group's others.
struct Rendezvous {
    /// Hosts of the trainer group.
    nodes: usize,
    /// This host's index among them (`resourceconfig.json`'s order).
    node_rank: usize,
    /// Processes on this host (`--nproc-per-node`).
    processes: u32,
    /// The first host, resolved, at the rendezvous port.
    master: SocketAddr,
}

impl Rendezvous {
    fn of(env: &Env, script: &ScriptTrainer) -> Result<Self, BoxError> {
        let plan = Plan::of(env, script, |name| std::env::var(name).ok())?;
        let master = resolve_blocking(
            &plan.master_host,
            plan.master_port,
            Duration::from_secs(600),
        )
        .map_err(|e| format!("the rendezvous host {}: {e}", plan.master_host))?;
        Ok(Self {
            nodes: plan.nodes,
            node_rank: plan.node_rank,
            processes: plan.processes,
            master,
        })
    }
}

/// [`Rendezvous`] before the master's name is resolved.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    nodes: usize,
    node_rank: usize,
    processes: u32,
    master_host: String,
    master_port: u16,
}

impl Plan {
    /// The rendezvous of this host, with `var` standing for the process environment.
    ///
    /// On Kubernetes Kubeflow Trainer's torch plugin sets `PET_*` for `torchrun`: those are the
    /// controller's word and are taken as they are, once checked against the cluster this host
    /// computed from the job's variables (a TrainJob edited by hand, or rendered from another
    /// spec, must fail here with both numbers, not hang in a rendezvous that never fills).
    /// Elsewhere the cluster itself says it: its size, this host's index, its first host and
    /// `HETGEN_RENDEZVOUS_PORT`.
    fn of(
        env: &Env,
        script: &ScriptTrainer,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, BoxError> {
        let hosts = env.resources.hosts_of(env.group());
        let node_rank = hosts.iter().position(|h| h == env.host()).ok_or_else(|| {
            format!(
                "{} is not among the hosts of its group `{}` ({hosts:?})",
                env.host(),
                env.group()
            )
        })?;
        if let Some(controller) = Controller::from_env(&var)? {
            return controller.checked(env, script, &hosts, node_rank);
        }
        let port = hetgen_env::port_from_env(
            hetgen_env::RENDEZVOUS_PORT_VAR,
            hetgen_env::DEFAULT_RENDEZVOUS_PORT,
        )?;
        Ok(Self {
            nodes: hosts.len(),
            node_rank,
            processes: script.processes_per_host,
            master_host: hosts[0].clone(),
            master_port: port,
        })
    }
}

/// What Kubeflow Trainer's torch plugin tells `torchrun` through `PET_*`.
struct Controller {
    nodes: u32,
    node_rank: u32,
    /// `None` for `auto`.
    processes: Option<u32>,
    master_addr: String,
    master_port: u16,
}

impl Controller {
    /// The `PET_*` variables, when any is set (then all must be); `None` when none is (not on
    /// Kubernetes).
    fn from_env(var: &impl Fn(&str) -> Option<String>) -> Result<Option<Self>, VariableError> {
        const ALL: [&str; 5] = [
            kube::PET_NNODES,
            kube::PET_NODE_RANK,
            kube::PET_NPROC_PER_NODE,
            kube::PET_MASTER_ADDR,
            kube::PET_MASTER_PORT,
        ];
        if ALL.iter().all(|name| var(name).is_none()) {
            return Ok(None);
        }
        // Unset reads as empty, which no variable may be: the error names it all the same.
        let value = |name: &'static str| (name, var(name).unwrap_or_default());
        let bad = |(var, value): (&'static str, String), expected: &'static str| VariableError {
            var,
            value,
            expected: format!(
                "{expected}, as Kubeflow Trainer's torch plugin sets it for `torchrun` (every \
                 PET_* variable is set when one is)"
            )
            .into(),
        };
        let number = |name: &'static str, least: u32, expected: &'static str| {
            let (name, text) = value(name);
            match text.trim().parse::<u32>() {
                Ok(n) if n >= least => Ok(n),
                _ => Err(bad((name, text), expected)),
            }
        };
        let nodes = number(
            kube::PET_NNODES,
            1,
            "the trainer group's number of nodes, a whole number from 1 (hetgen runs a fixed \
             number of nodes, not an elastic `MIN:MAX` range)",
        )?;
        let node_rank = number(
            kube::PET_NODE_RANK,
            0,
            "this node's rank, a whole number from 0",
        )?;
        let processes = {
            let (name, text) = value(kube::PET_NPROC_PER_NODE);
            match text.trim().parse::<u32>() {
                _ if text.trim() == "auto" => None,
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(bad(
                        (name, text),
                        "`auto` or the processes per node, a whole number from 1",
                    ));
                }
            }
        };
        let master_addr = {
            let (name, text) = value(kube::PET_MASTER_ADDR);
            if text.trim().is_empty() {
                return Err(bad(
                    (name, text),
                    "the host name of the trainer group's first pod",
                ));
            }
            text.trim().to_owned()
        };
        let master_port = {
            let (name, text) = value(kube::PET_MASTER_PORT);
            match text.trim().parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(bad((name, text), "a TCP port number from 1 to 65535")),
            }
        };
        Ok(Some(Self {
            nodes,
            node_rank,
            processes,
            master_addr,
            master_port,
        }))
    }

    /// The controller's rendezvous, once it agrees with the cluster: `hosts` (this host's
    /// group, sorted) and this host's index among them.
    fn checked(
        self,
        env: &Env,
        script: &ScriptTrainer,
        hosts: &[String],
        node_rank: usize,
    ) -> Result<Plan, BoxError> {
        if self.nodes as usize != hosts.len() {
            return Err(format!(
                "{}={} but the trainer group `{}` has {} host(s) ({hosts:?}): the TrainJob's \
                 `numNodes` must be the group's `count` (render the job again rather than edit \
                 the TrainJob)",
                kube::PET_NNODES,
                self.nodes,
                env.group(),
                hosts.len()
            )
            .into());
        }
        if self.node_rank as usize != node_rank {
            return Err(format!(
                "{}={} but this host, {}, is node {node_rank} of the trainer group `{}` \
                 ({hosts:?}): every pod must compute the ranks the controller gave",
                kube::PET_NODE_RANK,
                self.node_rank,
                env.host(),
                env.group()
            )
            .into());
        }
        // `auto` is hetgen's own count: the spec's `processes_per_host` (for `"gpu"`, the GPUs
        // of the group's instance type, counted when the job was rendered), which the data
        // servers also size their memory for.
        let processes = match self.processes {
            None => script.processes_per_host,
            Some(n) => {
                if n != script.processes_per_host {
                    tracing::warn!(
                        controller = n,
                        spec = script.processes_per_host,
                        "{} differs from the spec's processes_per_host; starting the \
                         controller's count (the data servers size their memory for the \
                         spec's)",
                        kube::PET_NPROC_PER_NODE
                    );
                }
                n
            }
        };
        Ok(Plan {
            nodes: hosts.len(),
            node_rank,
            processes,
            master_host: self.master_addr,
            master_port: self.master_port,
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
        .arg(format!("--nproc-per-node={}", rendezvous.processes))
        .arg(format!("--master-addr={}", rendezvous.master.ip()))
        .arg(format!("--master-port={}", rendezvous.master.port()))
        .arg(program)
        .args(&script.args)
        .args(more_args)
        .current_dir(code_dir)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    // The platform's grace between SIGTERM and SIGKILL, for when torchrun passes a signal on
    // itself ([`stop`]); the job's own setting wins.
    if std::env::var_os(stop::TORCHRUN_GRACE_VAR).is_none() {
        command.env(stop::TORCHRUN_GRACE_VAR, stop::PLATFORM_GRACE_S.to_string());
    }
    // What the training toolkit's torchrun runner would set; the job's environment wins.
    for (var, value) in collective_environment(env) {
        if std::env::var_os(var).is_none() {
            command.env(var, value);
        }
    }
    for (var, value) in folder_environment(env) {
        if std::env::var_os(&var).is_none() {
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

/// The folders a script finds through the training toolkit's variables: every channel this
/// host receives (`SM_CHANNEL_<NAME>`), the model and the output data folder. Where the
/// toolkit runs (AWS's image) it has set them already; on hetgen's own image on SageMaker, and
/// in a Kubernetes pod, nothing else would, and a script written for SageMaker reads them.
fn folder_environment(env: &Env) -> Vec<(String, String)> {
    let path = |p: &Path| p.display().to_string();
    let mut vars: Vec<(String, String)> = env
        .channel_dirs
        .iter()
        .map(|(name, dir)| (hetgen_env::channel_var(name), path(dir)))
        .collect();
    vars.push(("SM_MODEL_DIR".to_owned(), path(&env.paths.model_dir())));
    vars.push((
        "SM_OUTPUT_DATA_DIR".to_owned(),
        path(&env.paths.output_data_dir()),
    ));
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
            kubernetes: false,
        }
    }

    /// The collective settings of a host of `instance_type` on `interface`, as `NAME=value`.
    fn collective_settings(instance_type: &str, interface: &str) -> Vec<String> {
        collective_environment(&env(instance_type, interface))
            .into_iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect()
    }

    #[test]
    fn torchrun_gets_the_toolkit_s_folders() {
        let mut env = env("ml.m5.xlarge", "eth0");
        env.channel_dirs
            .insert("test".to_owned(), PathBuf::from("/opt/ml/input/data/test"));
        assert_eq!(
            folder_environment(&env),
            [
                ("SM_CHANNEL_TEST", "/opt/ml/input/data/test"),
                ("SM_MODEL_DIR", "/opt/ml/model"),
                ("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
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

    fn script(processes_per_host: u32) -> ScriptTrainer {
        ScriptTrainer {
            script: "train.py".to_owned(),
            source_dir: ".".to_owned(),
            args: Vec::new(),
            requirements: None,
            processes_per_host,
            base_image: "pytorch".to_owned(),
            deterministic: false,
        }
    }

    /// Pod `index` of a three-pod trainer group `dnn_group` beside one data pod, in JobSet
    /// `digits`, with the torch plugin's variables `pet` (and the job's variables).
    fn pod_plan(index: u32, pet: &[(&str, &str)], spec_processes: u32) -> Result<Plan, String> {
        let groups = r#"[
            {"name":"data_group","replicated_job":"data-group","count":1,"instance_type":"ml.c5.xlarge"},
            {"name":"dnn_group","replicated_job":"node","count":3,"instance_type":"ml.g5.12xlarge"}]"#;
        let index = index.to_string();
        let vars: BTreeMap<&str, &str> = [
            (kube::GROUPS_VAR, groups),
            (kube::GROUP_VAR, "dnn_group"),
            (kube::JOBSET_VAR, "digits"),
            (kube::INDEX_VAR, index.as_str()),
        ]
        .into_iter()
        .chain(pet.iter().copied())
        .collect();
        let var = |name: &str| vars.get(name).map(|v| v.to_string());
        let env = Env::load_from(&PathBuf::from("/opt/ml"), var).unwrap();
        Plan::of(&env, &script(spec_processes), var).map_err(|e| e.to_string())
    }

    /// What the torch plugin sets on pod `rank` of `nodes`.
    fn pet(
        nodes: &'static str,
        rank: &'static str,
        nproc: &'static str,
    ) -> Vec<(&'static str, &'static str)> {
        vec![
            (kube::PET_NNODES, nodes),
            (kube::PET_NODE_RANK, rank),
            (kube::PET_NPROC_PER_NODE, nproc),
            (kube::PET_MASTER_ADDR, "digits-node-0-0.digits"),
            (kube::PET_MASTER_PORT, "29500"),
        ]
    }

    #[test]
    fn on_kubernetes_the_controller_s_rendezvous_is_taken() {
        assert_eq!(
            pod_plan(2, &pet("3", "2", "4"), 4).unwrap(),
            Plan {
                nodes: 3,
                node_rank: 2,
                processes: 4,
                master_host: "digits-node-0-0.digits".to_owned(),
                master_port: 29500,
            }
        );
        // `auto` is the spec's count (for `"gpu"`, the instance type's GPUs).
        assert_eq!(pod_plan(1, &pet("3", "1", "auto"), 4).unwrap().processes, 4);
        // A number is the controller's, even where the spec says otherwise.
        assert_eq!(pod_plan(0, &pet("3", "0", "2"), 4).unwrap().processes, 2);
        // The controller's master and port, whatever hetgen's own variable says.
        let mut other = pet("3", "0", "auto");
        other[3].1 = "elsewhere.digits";
        other[4].1 = "1234";
        other.push((hetgen_env::RENDEZVOUS_PORT_VAR, "29400"));
        let plan = pod_plan(0, &other, 1).unwrap();
        assert_eq!(
            (plan.master_host.as_str(), plan.master_port),
            ("elsewhere.digits", 1234)
        );
    }

    #[test]
    fn without_the_controller_the_cluster_says_it() {
        // A pod whose variables name no controller (and a SageMaker host, below): the group's
        // size, this host's index and the first host.
        let plan = pod_plan(1, &[], 2).unwrap();
        assert_eq!(
            (
                plan.nodes,
                plan.node_rank,
                plan.processes,
                plan.master_host.as_str()
            ),
            (3, 1, 2, "digits-node-0-0.digits")
        );
        let plan = Plan::of(&env("ml.g5.xlarge", "eth0"), &script(1), |_| None).unwrap();
        assert_eq!(
            (
                plan.nodes,
                plan.node_rank,
                plan.processes,
                plan.master_host.as_str()
            ),
            (1, 0, 1, "algo-1")
        );
    }

    #[test]
    fn a_controller_that_disagrees_with_the_cluster_is_named() {
        let err = pod_plan(1, &pet("2", "1", "auto"), 1).unwrap_err();
        assert!(
            err.starts_with("PET_NNODES=2 but the trainer group `dnn_group` has 3 host(s)")
                && err.contains("numNodes"),
            "{err}"
        );
        let err = pod_plan(1, &pet("3", "2", "auto"), 1).unwrap_err();
        assert!(
            err.starts_with("PET_NODE_RANK=2 but this host, digits-node-0-1.digits, is node 1"),
            "{err}"
        );
    }

    #[test]
    fn a_malformed_or_missing_controller_variable_is_named() {
        let cases: &[(&str, &str, &str)] = &[
            (kube::PET_NNODES, "1:3", "PET_NNODES=\"1:3\": "),
            (kube::PET_NNODES, "0", "PET_NNODES=\"0\": "),
            (kube::PET_NODE_RANK, "first", "PET_NODE_RANK=\"first\": "),
            (
                kube::PET_NPROC_PER_NODE,
                "gpu",
                "PET_NPROC_PER_NODE=\"gpu\": `auto` or",
            ),
            (kube::PET_NPROC_PER_NODE, "0", "PET_NPROC_PER_NODE=\"0\": "),
            (kube::PET_MASTER_ADDR, " ", "PET_MASTER_ADDR=\" \": "),
            (
                kube::PET_MASTER_PORT,
                "0",
                "PET_MASTER_PORT=\"0\": a TCP port",
            ),
        ];
        for &(name, value, says) in cases {
            let mut vars = pet("3", "0", "auto");
            vars.iter_mut().find(|(n, _)| *n == name).unwrap().1 = value;
            let err = pod_plan(0, &vars, 1).unwrap_err();
            assert!(err.starts_with(says), "{name}={value}: {err}");
        }
        // One of them alone: the others are named as missing.
        let err = pod_plan(0, &[(kube::PET_NNODES, "3")], 1).unwrap_err();
        assert!(
            err.starts_with("PET_NODE_RANK=\"\": ") && err.contains("every PET_* variable"),
            "{err}"
        );
    }
}
