//! The simulated cluster on disk: host names and addresses, one `/opt/ml` tree per host, the
//! hosts file, and the environment every host process starts with.
//!
//! Everything here is decided before any process starts, so it is plain data and tested without
//! running anything.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

use hetgen_env::{
    ChannelConfig, HOSTS_FILE_VAR, InstanceGroup, JOB_FILE_VAR, Paths, ResourceConfig, TOKEN_VAR,
};
use hetgen_spec::Job;
use hetgen_spec::model::{Channel, HOMOGENEOUS_GROUP, InputMode, Role, S3Distribution};
use serde::Serialize;

use crate::{LocalError, RunDir};

/// The interface the simulated hosts reach each other on: every host's address is on the
/// loopback interface. SageMaker reports its own (`eth0`) the same way, and from it AWS's
/// training toolkit and hetgen's launcher set gloo's and NCCL's `*_SOCKET_IFNAME`, which must
/// name the interface the hosts' addresses are on.
pub const NETWORK_INTERFACE: &str = "lo";

/// Most hosts one run can have: each takes one address of a `127.x.y.0/24` block.
pub const MAX_HOSTS: usize = 254;

/// One simulated instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Host {
    /// `algo-N`.
    pub name: String,
    /// The spec's group name (what people read in logs).
    pub group: String,
    /// The group name SageMaker reports: the spec's, or `homogeneousCluster` for a one-group job.
    pub instance_group: String,
    /// `ml.*` instance type.
    pub instance_type: String,
    /// What the group does.
    pub role: Role,
    /// This host's loopback address; its name resolves to it through the hosts file.
    pub address: Ipv4Addr,
    /// vCPUs of the instance type, when the catalog knows it.
    pub vcpus: Option<u32>,
}

/// Host names, groups and addresses of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Every host, in `algo-1`, `algo-2`, … order.
    pub hosts: Vec<Host>,
    /// The groups in spec order, each with its hosts in hand-out order.
    pub groups: Vec<InstanceGroup>,
}

impl Cluster {
    /// Hands out `algo-1..N` over the job's groups in shuffled order, as SageMaker does, so that
    /// nothing downstream can come to rely on `algo-1` being in a particular group. Host `algo-k`
    /// gets address `base + k`.
    pub fn assign(
        job: &Job,
        rng: &mut fastrand::Rng,
        base: Ipv4Addr,
    ) -> Result<Cluster, LocalError> {
        let total: usize = job.groups.iter().map(|g| g.count as usize).sum();
        if total > MAX_HOSTS {
            return Err(LocalError::TooManyHosts { hosts: total });
        }
        let mut numbers: Vec<usize> = (1..=total).collect();
        rng.shuffle(&mut numbers);
        let one_group = job.groups.len() == 1;
        let mut hosts = Vec::with_capacity(total);
        let mut groups = Vec::with_capacity(job.groups.len());
        let mut next = numbers.into_iter();
        for group in &job.groups {
            let instance_group = if one_group {
                HOMOGENEOUS_GROUP.to_owned()
            } else {
                group.name.clone()
            };
            let mut names = Vec::with_capacity(group.count as usize);
            for n in next.by_ref().take(group.count as usize) {
                let name = format!("algo-{n}");
                names.push(name.clone());
                hosts.push(Host {
                    name,
                    group: group.name.clone(),
                    instance_group: instance_group.clone(),
                    instance_type: group.instance_type.clone(),
                    role: group.role,
                    address: offset(base, n),
                    vcpus: group.vcpus,
                });
            }
            groups.push(InstanceGroup {
                hosts: names,
                instance_group_name: instance_group,
                instance_type: group.instance_type.clone(),
            });
        }
        hosts.sort_by_key(|h| host_number(&h.name));
        Ok(Cluster { hosts, groups })
    }

    /// Whether the job has more than one group (`SM_IS_HETERO`).
    pub fn is_hetero(&self) -> bool {
        self.groups.len() > 1
    }

    /// Every host name, sorted.
    pub fn host_names(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.name.clone()).collect()
    }

    /// What SageMaker writes to `resourceconfig.json` on `host`.
    pub fn resource_config(&self, host: &Host) -> ResourceConfig {
        ResourceConfig {
            current_group_name: host.instance_group.clone(),
            current_host: host.name.clone(),
            current_instance_type: host.instance_type.clone(),
            hosts: self.host_names(),
            instance_groups: self.groups.clone(),
            network_interface_name: NETWORK_INTERFACE.to_owned(),
        }
    }

    /// `/etc/hosts` lines, `ADDRESS NAME`, read by the runtime before DNS.
    pub fn hosts_file(&self) -> String {
        let mut out =
            String::from("# generated by hetgen deploy --local: one loopback address per host\n");
        for host in &self.hosts {
            out.push_str(&format!("{} {}\n", host.address, host.name));
        }
        out
    }
}

/// The `n` in `algo-n`, for numeric order (`algo-2` before `algo-10`).
pub fn host_number(name: &str) -> usize {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

fn offset(base: Ipv4Addr, n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + n as u32)
}

/// Whether `host` receives `channel`: channels that name groups go only to those groups'
/// hosts, channels that name none go everywhere (SageMaker's `InstanceGroupNames`).
pub fn receives(channel: &Channel, host: &Host) -> bool {
    channel.reaches(&host.group)
}

/// A channel with the folder that stands for its S3 prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalChannel {
    /// The channel as the spec resolved it.
    pub channel: Channel,
    /// How SageMaker would deliver it: `File` or `FastFile`, both files, which its folder
    /// stands in for.
    pub mode: InputMode,
    /// Its local folder, absolute.
    pub folder: PathBuf,
}

/// Finds every channel's local folder; relative paths are relative to the spec's folder.
pub fn local_channels(job: &Job, spec_dir: &Path) -> Result<Vec<LocalChannel>, LocalError> {
    job.channels
        .iter()
        .map(|channel| {
            let mode = job.input_mode(channel);
            if mode == InputMode::Pipe {
                return Err(LocalError::PipeChannel {
                    channel: channel.name.clone(),
                });
            }
            let Some(path) = &channel.local_path else {
                return Err(LocalError::RemoteChannel {
                    channel: channel.name.clone(),
                    uri: channel.uri.clone(),
                });
            };
            let folder = spec_dir.join(path);
            let folder = folder
                .canonicalize()
                .map_err(|source| LocalError::ChannelFolder {
                    channel: channel.name.clone(),
                    path: folder.clone(),
                    source,
                })?;
            Ok(LocalChannel {
                channel: channel.clone(),
                mode,
                folder,
            })
        })
        .collect()
}

/// The files and folders of one run, under its job folder.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<out>/<job>/local/<job>-<timestamp>`.
    pub job_dir: PathBuf,
    /// Host names and addresses.
    pub cluster: Cluster,
    /// Channels with their local folders.
    pub channels: Vec<LocalChannel>,
    /// `hyperparameters.json`: the spec's, as strings.
    pub hyperparameters: BTreeMap<String, String>,
}

impl Layout {
    /// The layout of `job` in `job_dir`.
    pub fn new(
        job: &Job,
        cluster: Cluster,
        channels: Vec<LocalChannel>,
        job_dir: PathBuf,
    ) -> Layout {
        let hyperparameters = job
            .sagemaker
            .as_ref()
            .map(|sm| sm.hyperparameters.clone())
            .unwrap_or_default();
        Layout {
            job_dir,
            cluster,
            channels,
            hyperparameters,
        }
    }

    /// The host's `/opt/ml`.
    pub fn host_dir(&self, host: &Host) -> PathBuf {
        RunDir::at(&self.job_dir).host_dir(&host.name)
    }

    /// The files of the host's `/opt/ml`, as the runtime finds them.
    pub fn host_paths(&self, host: &Host) -> Paths {
        Paths {
            base: self.host_dir(host),
        }
    }

    /// `hosts.txt`, named by [`HOSTS_FILE_VAR`].
    pub fn hosts_file(&self) -> PathBuf {
        self.job_dir.join("hosts.txt")
    }

    /// The channels `host` receives, in spec order.
    pub fn channels_of<'a>(&'a self, host: &'a Host) -> impl Iterator<Item = &'a LocalChannel> {
        self.channels
            .iter()
            .filter(move |c| receives(&c.channel, host))
    }

    /// What SageMaker writes to `inputdataconfig.json` on `host`.
    pub fn input_data_config(&self, host: &Host) -> BTreeMap<String, ChannelConfig> {
        self.channels_of(host)
            .map(|c| {
                (
                    c.channel.name.clone(),
                    ChannelConfig::files(
                        c.channel.content_type.clone(),
                        c.channel.distribution,
                        c.mode,
                    ),
                )
            })
            .collect()
    }

    /// Writes every host's tree and the hosts file. The job folder must not exist yet: a run
    /// never reuses another run's files.
    pub fn write(&self) -> Result<(), LocalError> {
        create_new_dir(&self.job_dir)?;
        write(&self.hosts_file(), &self.cluster.hosts_file())?;
        for host in &self.cluster.hosts {
            let paths = self.host_paths(host);
            for dir in [
                paths.config_dir(),
                paths.data_dir(),
                paths.model_dir(),
                paths.output_data_dir(),
                paths.checkpoint_dir(),
            ] {
                create_dir(&dir)?;
            }
            write(
                &paths.resource_config(),
                &to_json(&self.cluster.resource_config(host)),
            )?;
            write(&paths.hyperparameters(), &to_json(&self.hyperparameters))?;
            write(
                &paths.input_data_config(),
                &to_json(&self.input_data_config(host)),
            )?;
            for channel in self.channels_of(host) {
                self.mount(channel, host, &paths.channel(&channel.channel.name))?;
            }
        }
        Ok(())
    }

    /// Puts `files` (from [`checkpoints_of`]) into every host's `/opt/ml/checkpoints`.
    pub fn restore_checkpoints(&self, files: &[(PathBuf, PathBuf)]) -> Result<(), LocalError> {
        for host in &self.cluster.hosts {
            let dir = self.host_paths(host).checkpoint_dir();
            for (relative, from) in files {
                let to = dir.join(relative);
                if let Some(parent) = to.parent() {
                    create_dir(parent)?;
                }
                std::fs::copy(from, &to)
                    .map_err(|source| LocalError::Write { path: to, source })?;
            }
        }
        Ok(())
    }

    /// Makes `target` show the channel as SageMaker would on `host`: the whole folder when the
    /// channel is replicated, every n-th file when it is sharded by key.
    fn mount(&self, channel: &LocalChannel, host: &Host, target: &Path) -> Result<(), LocalError> {
        if channel.channel.distribution == S3Distribution::FullyReplicated {
            return symlink(&channel.folder, target);
        }
        // ShardedByS3Key: SageMaker spreads the prefix's objects over the receiving hosts, so
        // each gets a disjoint part; here sorted paths are dealt round-robin by host rank.
        let receivers: Vec<&Host> = self
            .cluster
            .hosts
            .iter()
            .filter(|h| receives(&channel.channel, h))
            .collect();
        let rank = receivers
            .iter()
            .position(|h| h.name == host.name)
            .expect("mount is only called for receiving hosts");
        let mut files = Vec::new();
        list_files(&channel.folder, &mut files).map_err(|source| LocalError::ChannelFolder {
            channel: channel.channel.name.clone(),
            path: channel.folder.clone(),
            source,
        })?;
        files.sort();
        create_dir(target)?;
        for file in files.iter().skip(rank).step_by(receivers.len()) {
            let relative = file
                .strip_prefix(&channel.folder)
                .expect("listed under the channel folder");
            let link = target.join(relative);
            if let Some(parent) = link.parent() {
                create_dir(parent)?;
            }
            symlink(file, &link)?;
        }
        Ok(())
    }

    /// The environment of `host`'s process, as the SageMaker training toolkit would set it, on
    /// top of `job`'s variables.
    pub fn environment(&self, host: &Host, job: &JobEnvironment) -> BTreeMap<String, String> {
        let paths = self.host_paths(host);
        let base = &paths.base;
        let path = |p: PathBuf| p.display().to_string();
        let mut env = job.inherited.clone();
        env.extend(job.variables.iter().map(|(k, v)| (k.clone(), v.clone())));

        let group = self
            .cluster
            .groups
            .iter()
            .find(|g| g.instance_group_name == host.instance_group)
            .expect("every host belongs to a group");
        let groups_dict: BTreeMap<&str, &InstanceGroup> = self
            .cluster
            .groups
            .iter()
            .map(|g| (g.instance_group_name.as_str(), g))
            .collect();
        let group_names: Vec<&str> = self
            .cluster
            .groups
            .iter()
            .map(|g| g.instance_group_name.as_str())
            .collect();
        let channels: Vec<&str> = self
            .channels_of(host)
            .map(|c| c.channel.name.as_str())
            .collect();

        let mut set = |k: &str, v: String| {
            env.insert(k.to_owned(), v);
        };
        set(hetgen_env::BASE_DIR_VAR, path(base.clone()));
        set("SM_CURRENT_HOST", host.name.clone());
        set("SM_CURRENT_INSTANCE_TYPE", host.instance_type.clone());
        set("SM_CURRENT_INSTANCE_GROUP", host.instance_group.clone());
        set("SM_CURRENT_INSTANCE_GROUP_HOSTS", to_json(&group.hosts));
        set("SM_INSTANCE_GROUPS", to_json(&group_names));
        set("SM_INSTANCE_GROUPS_DICT", to_json(&groups_dict));
        set("SM_IS_HETERO", self.cluster.is_hetero().to_string());
        set("SM_HOSTS", to_json(&self.cluster.host_names()));
        set("SM_NETWORK_INTERFACE_NAME", NETWORK_INTERFACE.to_owned());
        set("SM_INPUT_DIR", path(base.join("input")));
        set("SM_INPUT_CONFIG_DIR", path(paths.config_dir()));
        set(
            "SM_INPUT_DATA_CONFIG",
            to_json(&self.input_data_config(host)),
        );
        set("SM_OUTPUT_DIR", path(base.join("output")));
        set("SM_OUTPUT_DATA_DIR", path(paths.output_data_dir()));
        set("SM_MODEL_DIR", path(paths.model_dir()));
        set("SM_HPS", to_json(&self.hyperparameters));
        set("SM_CHANNELS", to_json(&channels));
        for name in &channels {
            set(&hetgen_env::channel_var(name), path(paths.channel(name)));
        }
        if let Some(file) = &job.job_file {
            set(JOB_FILE_VAR, path(file.clone()));
        }
        set(TOKEN_VAR, job.token.clone());
        set(HOSTS_FILE_VAR, path(self.hosts_file()));
        env
    }
}

/// The checkpoint files the hosts of the earlier run in `run_dir` left, each by its path under
/// `/opt/ml/checkpoints` and where it is: what a job continuing that run starts from (as
/// SageMaker syncs every host's folder to one location; where two hosts wrote one name, the
/// later host's copy is taken).
pub fn checkpoints_of(run_dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, LocalError> {
    let dirs = RunDir::at(run_dir)
        .host_dirs()
        .map_err(|source| LocalError::NotARun {
            path: run_dir.to_owned(),
            source,
        })?;
    let mut found = BTreeMap::new();
    for host in dirs {
        let base = Paths { base: host }.checkpoint_dir();
        let mut files = Vec::new();
        if base.is_dir() {
            list_files(&base, &mut files).map_err(|source| LocalError::NotARun {
                path: run_dir.to_owned(),
                source,
            })?;
        }
        for file in files {
            let relative = file.strip_prefix(&base).unwrap_or(&file).to_owned();
            found.insert(relative, file);
        }
    }
    Ok(found.into_iter().collect())
}

/// What every host of one run shares in its environment.
#[derive(Debug, Clone, Default)]
pub struct JobEnvironment {
    /// From the caller's environment (see [`inherited_environment`]).
    pub inherited: BTreeMap<String, String>,
    /// The spec's `[sagemaker] environment`, then `--env` flags (later ones win).
    pub variables: Vec<(String, String)>,
    /// The rendered job.json, as `HETGEN_JOB_FILE`; `None` where the hosts find their own (a
    /// job on AWS's image: the bundle's entry point names the copy inside the bundle).
    pub job_file: Option<PathBuf>,
    /// The data service's shared secret.
    pub token: String,
}

/// Variables kept from the caller's environment.
///
/// A host's environment is built, not inherited: a caller inside a SageMaker notebook or with
/// AWS credentials exported must not see its own `SM_*` or `AWS_*` reach the hosts and make the
/// local run differ from the real one. Kept are what running a program on this machine needs
/// (`PATH`, `HOME`, locale, the dynamic loader's and libtorch's paths, the GPU selection) and the
/// variables meant for hetgen (`HETGEN_*`, `RUST_LOG`, `RUST_BACKTRACE`); the per-run
/// `HETGEN_*` variables are set afterwards, so the caller's never win.
pub fn inherited_environment(
    vars: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    const EXACT: [&str; 11] = [
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "TMPDIR",
        "TZ",
        "LD_LIBRARY_PATH",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "NO_COLOR",
        "VIRTUAL_ENV",
    ];
    const PREFIXES: [&str; 5] = ["HETGEN_", "LC_", "LIBTORCH", "CUDA_", "NVIDIA_"];
    vars.into_iter()
        .filter(|(k, _)| EXACT.contains(&k.as_str()) || PREFIXES.iter().any(|p| k.starts_with(p)))
        .collect()
}

/// `KEY=VALUE` from `--env`.
pub fn parse_env_flag(flag: &str) -> Result<(String, String), LocalError> {
    match flag.split_once('=') {
        Some((key, value)) if !key.is_empty() && !key.contains(char::is_whitespace) => {
            Ok((key.to_owned(), value.to_owned()))
        }
        _ => Err(LocalError::BadEnvFlag {
            flag: flag.to_owned(),
        }),
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("layout values serialize")
}

fn list_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        // Follow links, as SageMaker copies what an S3 prefix holds, not how it got there.
        if path.is_dir() {
            list_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

pub(crate) fn create_new_dir(path: &Path) -> Result<(), LocalError> {
    if let Some(parent) = path.parent() {
        create_dir(parent)?;
    }
    std::fs::create_dir(path).map_err(|source| LocalError::Write {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn create_dir(path: &Path) -> Result<(), LocalError> {
    std::fs::create_dir_all(path).map_err(|source| LocalError::Write {
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn write(path: &Path, text: &str) -> Result<(), LocalError> {
    std::fs::write(path, text).map_err(|source| LocalError::Write {
        path: path.to_owned(),
        source,
    })
}

fn symlink(original: &Path, link: &Path) -> Result<(), LocalError> {
    std::os::unix::fs::symlink(original, link).map_err(|source| LocalError::Write {
        path: link.to_owned(),
        source,
    })
}

/// The data servers' port, which the hosts' loopback block must leave free: the last
/// `HETGEN_DATA_PORT` the job sets, else the caller's, else the default.
pub(crate) fn data_port(
    variables: &[(String, String)],
    inherited: &BTreeMap<String, String>,
) -> u16 {
    let set = variables
        .iter()
        .rev()
        .map(|(k, v)| (k.as_str(), v.as_str()));
    let inherited = inherited.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    hetgen_spec::data_port::data_port_in(set.chain(inherited))
}

/// `path` made absolute against the current folder (as it is, when that cannot be read).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A `127.x.y.0` block whose first `hosts` addresses have `port` free, so that runs in
/// parallel (tests, two terminals) do not take each other's data servers. `127.0.0.0/16` is
/// left out: other programs listen on `127.0.0.1`.
pub(crate) fn free_block(rng: &mut fastrand::Rng, hosts: usize, port: u16) -> Ipv4Addr {
    let candidate = |rng: &mut fastrand::Rng| Ipv4Addr::new(127, rng.u8(1..=254), rng.u8(..), 0);
    let mut base = candidate(rng);
    for _ in 0..16 {
        let free = (1..=hosts as u32)
            .all(|k| TcpListener::bind((Ipv4Addr::from(u32::from(base) + k), port)).is_ok());
        if free {
            break;
        }
        base = candidate(rng);
    }
    base
}
