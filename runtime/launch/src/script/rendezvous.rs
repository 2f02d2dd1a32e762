//! Where this host meets the trainer group's others: `torchrun`'s nodes, this node's rank, its
//! processes and the master's address, from the cluster itself or, on Kubernetes, from Kubeflow
//! Trainer's torch plugin (`PET_*`), checked against the cluster.

use std::net::SocketAddr;
use std::time::Duration;

use hetgen_data::job::resolve_blocking;
use hetgen_env::{Env, VariableError};
use hetgen_pipeline::BoxError;
use hetgen_spec::kube;
use hetgen_spec::model::ScriptTrainer;

/// Where this host meets the trainer group's others.
pub(super) struct Rendezvous {
    /// Hosts of the trainer group.
    pub nodes: usize,
    /// This host's index among them (`resourceconfig.json`'s order).
    pub node_rank: usize,
    /// Processes on this host (`--nproc-per-node`).
    pub processes: u32,
    /// The first host, resolved, at the rendezvous port.
    pub master: SocketAddr,
}

impl Rendezvous {
    pub(super) fn of(env: &Env, script: &ScriptTrainer) -> Result<Self, BoxError> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;

    fn env(instance_type: &str, interface: &str) -> Env {
        super::super::test_env(instance_type, interface)
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
