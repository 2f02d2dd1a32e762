//! `hetgen deploy --local --engine kubeflow`: the job's Kubernetes rendering run here, pod by
//! pod, so that the commands and environment that ship are the ones that run.
//!
//! The pods are what `hetgen_kube::pods` makes of the rendered `TrainingRuntime` and `TrainJob`
//! as Kubeflow Trainer, JobSet and the kubelet would: each runs its container's `command` and
//! `args` with its `env` as the objects write them (values, `fieldRef`s, the token from the
//! job's Secret, Trainer's `PET_*`). What this machine stands in for:
//!
//! - **The image.** Its launcher (`/usr/local/bin/launcher`) is the one built from the rendered
//!   crate; its `ENV` (the job file, the script's name and folder) points at the rendered
//!   `job.json` and the spec's `source_dir`; its `/opt/ml` is the pod's folder in the run
//!   (`SAGEMAKER_BASE_DIR`).
//! - **The cluster.** Each pod gets a loopback address, and its stable DNS name resolves to it
//!   through the run's hosts file; a fresh token stands in for the job's Secret; a channel's
//!   claim is the channel's `local_path`, mounted where the pod mounts the claim.
//!
//! Pods start in JobSet's order: a replicatedJob that `dependsOn` others being `Ready` (the
//! trainer's `node`) starts once every pod of those answers its readiness probe, the data
//! port's gRPC health check, SERVING (`supervise::ready`). So the trainers arrive as late as
//! they would on a cluster, after every data pod has built its dataset.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use hetgen_env::{BASE_DIR_VAR, CODE_DIR_VAR, HOSTS_FILE_VAR, JOB_FILE_VAR};
use hetgen_kube::pods::{Pod, pods};
use hetgen_spec::Job;
use hetgen_spec::data_port::{DATA_PORT_VAR, data_port_in};
use hetgen_spec::kube::{IMAGE_LAUNCHER, TOKEN_KEY, token_secret};
use hetgen_spec::model::{HOMOGENEOUS_GROUP, PROGRAM_VAR, Role};
use serde_json::Value;

use crate::layout::{self, Cluster, Host, Layout, MAX_HOSTS, create_dir, create_new_dir, write};
use crate::layout::{absolute, data_port, free_block};
use crate::script::script_code;
use crate::{HostCommand, LocalError, LocalJob, RunOptions, cpus};

/// Where the image mounts what the runtime reads: a volume mounted under it lands in the pod's
/// folder, at the same place.
const IMAGE_BASE: &str = "/opt/ml";

/// Sets up a run of the pods of `runtime` and `trainjob` (the rendered objects of `job`).
/// Everything is worked out and checked before anything is written: a run that cannot start
/// leaves no folder.
pub fn prepare(
    job: &Job,
    runtime: &Value,
    trainjob: &Value,
    options: RunOptions,
) -> Result<LocalJob, LocalError> {
    let pods = pods(runtime, trainjob).map_err(|e| kube_error(e.to_string()))?;
    if pods.len() > MAX_HOSTS {
        return Err(LocalError::TooManyHosts { hosts: pods.len() });
    }
    let k = job.kubernetes.as_ref().ok_or_else(|| {
        kube_error("the spec has no [kubernetes] section to run the objects of".to_owned())
    })?;
    let mut inherited = layout::inherited_environment(options.caller_env.clone());
    let image_env = image_environment(job, &options, &mut inherited)?;

    // The data servers' port, which the pods' addresses must have free: the default, unless
    // `--env` sets another.
    let port = data_port(&options.env, &inherited);
    let block = free_block(&mut fastrand::Rng::new(), pods.len(), port);
    let hosts: Vec<Host> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| host_of(job, pod, block, i))
        .collect();
    let channels = layout::local_channels(job, &options.spec_dir)?;
    let cluster = Cluster {
        hosts: hosts.clone(),
        groups: Vec::new(),
    };
    let layout = Layout::new(job, cluster, channels, absolute(&options.job_dir));
    let cpu_sets = cpus::allot(options.cpus, &hosts, &cpus::available())?;
    let mounts = pods
        .iter()
        .map(|pod| pod_mounts(k, pod, &layout))
        .collect::<Result<Vec<_>, _>>()?;
    let token = hetgen_env::job_token().map_err(|e| LocalError::Random {
        message: e.to_string(),
    })?;
    let image = ImageStandIn {
        env: image_env,
        launcher: absolute(&options.launcher),
        secrets: BTreeMap::from([((token_secret(&job.name), TOKEN_KEY.to_owned()), token)]),
    };
    let mut commands = Vec::new();
    for ((pod, host), cpus) in pods.iter().zip(&hosts).zip(cpu_sets) {
        let mut command = image.command(pod, host, &layout, &inherited, &options.env)?;
        command.cpus = cpus;
        command.waits_for = waits_for(&pods, &hosts, pod)?;
        commands.push(command);
    }

    write_run(&layout, &pods, &hosts, mounts)?;
    Ok(LocalJob {
        name: job.name.clone(),
        layout,
        commands,
        launcher: image.launcher,
        limits: options.limits,
        notes: Vec::new(),
    })
}

fn kube_error(message: String) -> LocalError {
    LocalError::Kube { message }
}

/// The image's `ENV`: the job file, and for a script the code folder and the script's name.
fn image_environment(
    job: &Job,
    options: &RunOptions,
    inherited: &mut BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, LocalError> {
    let mut env = vec![(
        JOB_FILE_VAR.to_owned(),
        absolute(&options.job_file).display().to_string(),
    )];
    if let Some(script) = job.trainer.script() {
        let code = script_code(script, &options.spec_dir, inherited)?;
        env.push((CODE_DIR_VAR.to_owned(), code.display().to_string()));
        env.push((PROGRAM_VAR.to_owned(), script.script.clone()));
    }
    Ok(env)
}

/// What this machine stands in for of the image and the cluster, for every pod alike.
struct ImageStandIn {
    /// The image's `ENV`.
    env: Vec<(String, String)>,
    /// Its launcher (`/usr/local/bin/launcher` in the image).
    launcher: PathBuf,
    /// The job's Secret: `(secret, key)` → value.
    secrets: BTreeMap<(String, String), String>,
}

impl ImageStandIn {
    /// What `pod` runs as `host`: its container's command and args with its environment over
    /// the image's (and `--env` over both), in the pod's folder.
    fn command(
        &self,
        pod: &Pod,
        host: &Host,
        layout: &Layout,
        inherited: &BTreeMap<String, String>,
        flags: &[(String, String)],
    ) -> Result<HostCommand, LocalError> {
        let base = layout.host_dir(host);
        let mut env = inherited.clone();
        env.extend(self.env.iter().cloned());
        env.insert(BASE_DIR_VAR.to_owned(), base.display().to_string());
        env.insert(
            HOSTS_FILE_VAR.to_owned(),
            layout.hosts_file().display().to_string(),
        );
        let pod_env = pod
            .environment(&self.secrets)
            .map_err(|e| kube_error(e.to_string()))?;
        let argv = pod.argv(&pod_env);
        env.extend(pod_env);
        env.extend(flags.iter().cloned());
        probe_matches_port(pod, &env)?;
        let Some((program, args)) = argv.split_first() else {
            return Err(kube_error(format!(
                "pod {}: its container has no command, and a local run cannot read the image's entry point",
                pod.name
            )));
        };
        let program = match program.as_str() {
            IMAGE_LAUNCHER => self.launcher.clone(),
            other => PathBuf::from(other),
        };
        Ok(HostCommand {
            host: host.clone(),
            program,
            args: args.to_vec(),
            env,
            base_dir: base,
            cpus: None,
            hosts_binding: None,
            waits_for: Vec::new(),
        })
    }
}

/// Writes the run's folder: the hosts file that stands for the cluster's DNS, and each pod's
/// `/opt/ml` with its volumes linked in. A run never reuses another run's folder.
fn write_run(
    layout: &Layout,
    pods: &[Pod],
    hosts: &[Host],
    mounts: Vec<Vec<Link>>,
) -> Result<(), LocalError> {
    create_new_dir(&layout.job_dir)?;
    let table: String = pods
        .iter()
        .zip(hosts)
        .map(|(pod, host)| format!("{} {} {}\n", host.address, pod.host, pod.name))
        .collect();
    write(&layout.hosts_file(), &table)?;
    for (host, links) in hosts.iter().zip(mounts) {
        let base = layout.host_dir(host);
        for dir in ["model", "output/data", "checkpoints", "input/data"] {
            // A folder a volume is mounted at is the volume's.
            if !links.iter().any(|l| l.link == base.join(dir)) {
                create_dir(&base.join(dir))?;
            }
        }
        for Link { link, folder, made } in links {
            if let Some(parent) = link.parent() {
                create_dir(parent)?;
            }
            if made {
                create_dir(&folder)?;
            }
            std::os::unix::fs::symlink(&folder, &link).map_err(|source| LocalError::Write {
                path: link.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// The addresses `pod` waits for before it starts: the readiness probe of every pod of each
/// replicatedJob it `dependsOn` being `Ready`. A pod without a readiness probe is Ready once it
/// runs, so it is not waited for.
fn waits_for(pods: &[Pod], hosts: &[Host], pod: &Pod) -> Result<Vec<SocketAddr>, LocalError> {
    let mut addresses = Vec::new();
    for (replicated_job, status) in &pod.depends_on {
        if status != "Ready" {
            return Err(LocalError::Kube {
                message: format!(
                    "pod {}: dependsOn `{replicated_job}` with status `{status}`: a local run starts pods in the order `Ready` asks for only (hetgen renders no other)",
                    pod.name
                ),
            });
        }
        for (other, host) in pods.iter().zip(hosts) {
            if &other.replicated_job == replicated_job
                && let Some(port) = other.container.grpc_ready_port
            {
                addresses.push(SocketAddr::new(IpAddr::V4(host.address), port));
            }
        }
    }
    Ok(addresses)
}

/// A pod's readiness probe must ask the port its data server listens on (by the rule the
/// server reads it with, `hetgen_spec::data_port`), or it is never Ready and the pods that
/// wait for it never start. The objects keep the two together; `--env` could pull them apart.
fn probe_matches_port(pod: &Pod, env: &BTreeMap<String, String>) -> Result<(), LocalError> {
    let Some(probe) = pod.container.grpc_ready_port else {
        return Ok(());
    };
    let port = data_port_in(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if port == probe {
        return Ok(());
    }
    Err(LocalError::Kube {
        message: format!(
            "pod {}: its data server would listen on port {port} ({DATA_PORT_VAR}) while its readiness probe asks port {probe}, so it would never be Ready and the pods that wait for it would never start; set {DATA_PORT_VAR} in the spec's [kubernetes] environment, which moves both",
            pod.name
        ),
    })
}

/// The host a pod stands for: its name, its group (the spec's, from its replicatedJob's label),
/// and its address in the run's loopback block.
fn host_of(job: &Job, pod: &Pod, block: std::net::Ipv4Addr, i: usize) -> Host {
    let group_name = pod
        .group
        .clone()
        .unwrap_or_else(|| pod.replicated_job.clone());
    let group = job.groups.iter().find(|g| g.name == group_name);
    Host {
        name: pod.name.clone(),
        instance_group: if job.groups.len() == 1 {
            HOMOGENEOUS_GROUP.to_owned()
        } else {
            group_name.clone()
        },
        group: group_name,
        instance_type: group.map(|g| g.instance_type.clone()).unwrap_or_default(),
        role: group.map_or(Role::Data, |g| g.role),
        address: std::net::Ipv4Addr::from(u32::from(block) + i as u32 + 1),
        vcpus: group.and_then(|g| g.vcpus),
    }
}

/// A volume a pod mounts, as this machine stands in for it.
struct Link {
    /// Where the pod sees it, in the pod's folder.
    link: PathBuf,
    /// The local folder that stands for the volume (or its `subPath`).
    folder: PathBuf,
    /// Whether the run makes the folder: a claim of the run's own (the output claim), which
    /// starts empty, as against a channel's folder, which must be there.
    made: bool,
}

/// Where each volume the pod mounts is: a channel's claim is the channel's folder, the output
/// claim a folder of the run (`claims/<claim>`).
fn pod_mounts(
    k: &hetgen_spec::model::Kubernetes,
    pod: &Pod,
    layout: &Layout,
) -> Result<Vec<Link>, LocalError> {
    let host_dir = crate::RunDir::at(&layout.job_dir).host_dir(&pod.name);
    pod.container
        .mounts
        .iter()
        .map(|mount| {
            let (volume, path) = (&mount.volume, &mount.path);
            let mount_error = |why: String| LocalError::Kube {
                message: format!("pod {}: volume `{volume}` at `{path}`: {why}", pod.name),
            };
            let claim = pod
                .claims
                .get(volume)
                .ok_or_else(|| mount_error("no PersistentVolumeClaim volume of that name".into()))?;
            let channel = k.claims.iter().find(|(_, c)| *c == claim).map(|(channel, _)| channel);
            let (volume_folder, made) = match channel {
                Some(channel) => (
                    layout
                        .channels
                        .iter()
                        .find(|c| &c.channel.name == channel)
                        .map(|c| c.folder.clone())
                        .expect("local_channels has every channel of the job"),
                    false,
                ),
                None if k.output_claim.as_ref() == Some(claim) => {
                    (layout.job_dir.join("claims").join(claim), true)
                }
                None => {
                    return Err(mount_error(format!(
                        "claim `{claim}` is neither a channel's claim nor the output claim in the spec, so no local folder stands for it"
                    )));
                }
            };
            let folder = if mount.sub_path.is_empty() {
                volume_folder
            } else {
                volume_folder.join(&mount.sub_path)
            };
            let relative = Path::new(path)
                .strip_prefix(IMAGE_BASE)
                .ok()
                .filter(|r| !r.as_os_str().is_empty())
                .ok_or_else(|| {
                    mount_error(format!(
                        "a local run places volumes under {IMAGE_BASE}, the pod's folder"
                    ))
                })?;
            Ok(Link {
                link: host_dir.join(relative),
                folder,
                made,
            })
        })
        .collect()
}
