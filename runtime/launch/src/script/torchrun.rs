//! The `torchrun` command of this host, and the environment it adds to the job's: what AWS's
//! training toolkit would set for its collectives and folders.

use std::path::Path;
use std::process::{Command, Stdio};

use hetgen_env::Env;
use hetgen_spec::model::ScriptTrainer;
use hetgen_spec::{Catalog, Efa};

use super::rendezvous::Rendezvous;
use super::stop;

/// `torchrun` for this host's share of `program`, run in `code_dir`, in a process group of its
/// own that dies with the launcher; its stderr piped.
pub(super) fn torchrun(
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn env(instance_type: &str, interface: &str) -> Env {
        super::super::test_env(instance_type, interface)
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
}
