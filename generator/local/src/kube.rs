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
//! Every pod starts at once: a trainer waits for its data servers as it does on SageMaker,
//! where JobSet would hold it back until the data pods are `Ready`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_env::{BASE_DIR_VAR, CODE_DIR_VAR, HOSTS_FILE_VAR, JOB_FILE_VAR};
use hetgen_kube::pods::{Pod, pods};
use hetgen_spec::Job;
use hetgen_spec::kube::{IMAGE_LAUNCHER, TOKEN_KEY, token_secret};
use hetgen_spec::model::{HOMOGENEOUS_GROUP, PROGRAM_VAR, Role};
use serde_json::Value;

use crate::layout::{self, Cluster, Host, Layout, MAX_HOSTS, create_dir, create_new_dir, write};
use crate::{HostCommand, LocalError, LocalJob, RunOptions, absolute, cpus, free_block};

/// Where the image mounts what the runtime reads: a volume mounted under it lands in the pod's
/// folder, at the same place.
const IMAGE_BASE: &str = "/opt/ml";

/// Sets up a run of the pods of `runtime` and `trainjob` (the rendered objects of `job`).
#[allow(
    clippy::too_many_lines,
    reason = "the twin's set-up in the order the pods need it; to be split into per-job steps with `pods`"
)]
pub fn prepare(
    job: &Job,
    runtime: &Value,
    trainjob: &Value,
    options: RunOptions,
) -> Result<LocalJob, LocalError> {
    let kube_error = |message: String| LocalError::Kube { message };
    let pods = pods(runtime, trainjob).map_err(|e| kube_error(e.to_string()))?;
    if pods.len() > MAX_HOSTS {
        return Err(LocalError::TooManyHosts { hosts: pods.len() });
    }
    let k = job.kubernetes.as_ref().ok_or_else(|| {
        kube_error("the spec has no [kubernetes] section to run the objects of".to_owned())
    })?;

    let mut inherited = layout::inherited_environment(options.caller_env.clone());
    // The image's ENV.
    let mut image_env: Vec<(String, String)> = vec![(
        JOB_FILE_VAR.to_owned(),
        absolute(&options.job_file).display().to_string(),
    )];
    if let Some(script) = job.trainer.script() {
        let code = crate::script_code(script, &options.spec_dir, &mut inherited)?;
        image_env.push((CODE_DIR_VAR.to_owned(), code.display().to_string()));
        image_env.push((PROGRAM_VAR.to_owned(), script.script.clone()));
    }

    // The data servers' port, which the pods' addresses must have free: the default, unless
    // `--env` sets another (the objects set none).
    let port = crate::data_port(&options.env, &inherited);
    let block = free_block(&mut fastrand::Rng::new(), pods.len(), port);
    let hosts: Vec<Host> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| host_of(job, pod, block, i))
        .collect();
    let channels = layout::local_channels(job, &options.spec_dir)?;
    let job_dir = absolute(&options.job_dir);
    let cluster = Cluster {
        hosts: hosts.clone(),
        groups: Vec::new(),
    };
    let layout = Layout::new(job, cluster, channels, job_dir.clone());
    let cpu_sets = cpus::allot(options.cpus, &hosts, &cpus::available())?;

    // Mounts are checked before anything is written: a run that cannot start leaves no folder.
    let mut mounts = Vec::new();
    for pod in &pods {
        mounts.push(pod_mounts(k, pod, &layout)?);
    }
    let token = hetgen_env::job_token().map_err(|e| LocalError::Random {
        message: e.to_string(),
    })?;
    let secrets = BTreeMap::from([((token_secret(&job.name), TOKEN_KEY.to_owned()), token)]);
    let launcher = absolute(&options.launcher);

    // A run never reuses another run's folder.
    create_new_dir(&job_dir)?;
    let hosts_file = layout.hosts_file();
    let table: String = pods
        .iter()
        .zip(&hosts)
        .map(|(pod, host)| format!("{} {} {}\n", host.address, pod.host, pod.name))
        .collect();
    write(&hosts_file, &table)?;

    let mut commands = Vec::new();
    for (((pod, host), links), cpus) in pods.iter().zip(&hosts).zip(mounts).zip(cpu_sets) {
        let base = layout.host_dir(host);
        for dir in ["model", "output/data", "checkpoints", "input/data"] {
            create_dir(&base.join(dir))?;
        }
        for (link, folder) in links {
            if let Some(parent) = link.parent() {
                create_dir(parent)?;
            }
            std::os::unix::fs::symlink(&folder, &link).map_err(|source| LocalError::Write {
                path: link.clone(),
                source,
            })?;
        }
        let mut env = inherited.clone();
        env.extend(image_env.iter().cloned());
        env.insert(BASE_DIR_VAR.to_owned(), base.display().to_string());
        env.insert(HOSTS_FILE_VAR.to_owned(), hosts_file.display().to_string());
        let pod_env = pod
            .environment(&secrets)
            .map_err(|e| kube_error(e.to_string()))?;
        let argv = pod.argv(&pod_env);
        env.extend(pod_env);
        env.extend(options.env.iter().cloned());
        let Some((program, args)) = argv.split_first() else {
            return Err(kube_error(format!(
                "pod {}: its container has no command, and a local run cannot read the image's entry point",
                pod.name
            )));
        };
        let program = match program.as_str() {
            IMAGE_LAUNCHER => launcher.clone(),
            other => PathBuf::from(other),
        };
        commands.push(HostCommand {
            host: host.clone(),
            program,
            args: args.to_vec(),
            env,
            base_dir: base,
            cpus,
            hosts_binding: None,
        });
    }
    Ok(LocalJob {
        name: job.name.clone(),
        layout,
        commands,
        launcher,
        limits: options.limits,
        notes: vec![
            "every pod starts at once: JobSet would start the trainer pods once the data pods are Ready".to_owned(),
        ],
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

/// `(link in the pod's folder, the local folder it stands for)` for each volume the pod mounts.
fn pod_mounts(
    k: &hetgen_spec::model::Kubernetes,
    pod: &Pod,
    layout: &Layout,
) -> Result<Vec<(PathBuf, PathBuf)>, LocalError> {
    let host_dir = crate::RunDir::at(&layout.job_dir).host_dir(&pod.name);
    pod.container
        .mounts
        .iter()
        .map(|(volume, mount)| {
            let mount_error = |why: String| LocalError::Kube {
                message: format!("pod {}: volume `{volume}` at `{mount}`: {why}", pod.name),
            };
            let claim = pod
                .claims
                .get(volume)
                .ok_or_else(|| mount_error("no PersistentVolumeClaim volume of that name".into()))?;
            let channel = k
                .claims
                .iter()
                .find(|(_, c)| *c == claim)
                .map(|(channel, _)| channel)
                .ok_or_else(|| {
                    mount_error(format!(
                        "claim `{claim}` is no channel's claim in the spec, so no local folder stands for it"
                    ))
                })?;
            let folder = layout
                .channels
                .iter()
                .find(|c| &c.channel.name == channel)
                .map(|c| c.folder.clone())
                .expect("local_channels has every channel of the job");
            let relative = Path::new(mount)
                .strip_prefix(IMAGE_BASE)
                .ok()
                .filter(|r| !r.as_os_str().is_empty())
                .ok_or_else(|| {
                    mount_error(format!(
                        "a local run places volumes under {IMAGE_BASE}, the pod's folder"
                    ))
                })?;
            Ok((host_dir.join(relative), folder))
        })
        .collect()
}
