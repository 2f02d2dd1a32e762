//! The SageMaker training environment, as one instance of a job sees it.
//!
//! SageMaker describes the cluster to every container through files under `/opt/ml` and the
//! training toolkit mirrors them into `SM_*` variables. This crate reads the files (the source of
//! truth; the variables are only used to override channel folders, as the toolkit allows) into
//! typed values. The root is `SAGEMAKER_BASE_DIR` when set, as in the AWS training toolkit, so
//! `hetgen deploy --local` can give every simulated host its own tree.
//!
//! Nothing here assumes which `algo-N` belongs to which group: SageMaker hands names out across
//! groups in any order, so groups are looked up by name from `resourceconfig.json`.
//!
//! A pod of a job rendered for Kubeflow Trainer has no `resourceconfig.json`: when
//! `HETGEN_KUBE_GROUPS` is set, the same [`Env`] is built from the `HETGEN_KUBE_*` variables
//! the rendered objects set (`kube`), its hosts the pods' stable DNS names.
//!
//! [`process`] keeps the container's other promise outside a container: a host's processes end
//! with it (process groups, the death signal, signal names), for the launcher's `torchrun` and
//! the hosts of `hetgen deploy --local` alike. [`cache_dir`] is hetgen's cache folder on the
//! machine it runs on.

mod cache;
mod error;
mod host_order;
mod hosts;
mod job_file;
mod kube;
pub mod process;
mod role_line;
mod summary;
mod token;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_spec::model::{InputMode, S3Distribution};
use serde::{Deserialize, Serialize};

pub use cache::cache_dir;
pub use error::EnvError;
pub use host_order::{HostOrder, host_order};
pub use hosts::HostsFile;
pub use job_file::{DEFAULT_JOB_FILE, JOB_FILE_NAME, JobFile, load_job};
pub use role_line::{STARTING_ROLE, starting_role_group};
pub use summary::{InputReport, SUMMARY_FILE, SUMMARY_LINE_PREFIX, Summary};
pub use token::job_token;

/// Environment variable naming the root that stands for `/opt/ml`.
pub const BASE_DIR_VAR: &str = "SAGEMAKER_BASE_DIR";
/// Environment variable holding the job's shared secret for the data service ([`job_token`]).
pub const TOKEN_VAR: &str = "HETGEN_JOB_TOKEN";
/// Environment variable naming job.json (the Dockerfile sets it to `/opt/hetgen/job.json`).
pub const JOB_FILE_VAR: &str = "HETGEN_JOB_FILE";
/// Environment variable naming a hosts file consulted before DNS (`deploy --local`).
pub const HOSTS_FILE_VAR: &str = "HETGEN_HOSTS_FILE";
/// The data service's port: its variable and default ([`hetgen_spec::data_port`], the one rule).
pub use hetgen_spec::data_port::{DATA_PORT_VAR, DEFAULT_DATA_PORT};
/// Environment variable: seconds a data server waits for a trainer before it exits.
pub const WATCHDOG_VAR: &str = "HETGEN_WATCHDOG_S";
/// Environment variable naming a file that records every sample a trainer consumed (tests).
pub const AUDIT_FILE_VAR: &str = "HETGEN_AUDIT_FILE";
/// Script mode: the folder holding the user's source (`/opt/ml/code` in the image, SageMaker's
/// convention; the spec's `source_dir` on a local run).
pub const CODE_DIR_VAR: &str = "HETGEN_CODE_DIR";
/// Where script-mode images keep the user's source.
pub const DEFAULT_CODE_DIR: &str = "/opt/ml/code";
/// The Python interpreter that runs a Python dataset's workers (the `hetgen` package sets it
/// to its own; default `python3` on `PATH`).
pub const PYTHON_VAR: &str = "HETGEN_PYTHON";
/// Script mode: the port of `torchrun`'s rendezvous on the trainer group's first host.
pub const RENDEZVOUS_PORT_VAR: &str = "HETGEN_RENDEZVOUS_PORT";
/// `hetgen profile --trainer`: the spec whose dataset `hetgen.Loader()` makes a few batches of
/// on this host and then replays from memory, so that the training loop never waits for input
/// and its step lines give the rate the trainer trains at when input costs nothing.
pub const REPLAY_VAR: &str = "HETGEN_LOADER_REPLAY";
/// With [`REPLAY_VAR`]: batches the replaying Loader yields in all, then it ends every epoch.
pub const REPLAY_STEPS_VAR: &str = "HETGEN_LOADER_REPLAY_STEPS";
/// `torchrun`'s own default rendezvous port.
pub const DEFAULT_RENDEZVOUS_PORT: u16 = 29500;

/// A variable of the job's environment has a value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{var}={value:?}: {expected}")]
pub struct VariableError {
    /// The variable.
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What it should be (some messages name what the job holds, such as its groups' names).
    pub expected: Cow<'static, str>,
}

/// A TCP port from the variable `var` (blanks around it ignored), or `default` when it is unset;
/// an error when it holds anything but 1 to 65535.
pub fn port_from_env(var: &'static str, default: u16) -> Result<u16, VariableError> {
    match std::env::var(var) {
        Ok(value) => hetgen_spec::data_port::parse_port(&value).ok_or_else(|| VariableError {
            var,
            value,
            expected: hetgen_spec::data_port::PORT_EXPECTED.into(),
        }),
        Err(_) => Ok(default),
    }
}

/// The root standing for `/opt/ml`: `SAGEMAKER_BASE_DIR` when set.
fn base_dir() -> PathBuf {
    std::env::var_os(BASE_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/ml"))
}

/// `SM_CHANNEL_<NAME>`: the variable holding channel `name`'s folder, as the training toolkit
/// names it (upper case, `-` as `_`).
pub fn channel_var(name: &str) -> String {
    format!("SM_CHANNEL_{}", name.to_uppercase().replace('-', "_"))
}

/// One instance group of `resourceconfig.json`. Fields in sorted order: SageMaker writes them
/// so, and `hetgen deploy --local` writes this type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceGroup {
    /// Host names of the group, in no particular order.
    pub hosts: Vec<String>,
    /// The group's name, as in the spec (or `homogeneousCluster`).
    pub instance_group_name: String,
    /// `ml.*` instance type.
    pub instance_type: String,
}

/// `/opt/ml/input/config/resourceconfig.json`, field for field and in SageMaker's key order;
/// the runtime reads it, `hetgen deploy --local` writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceConfig {
    /// This host's group. Jobs without instance groups may omit it: then it is
    /// `homogeneousCluster`.
    #[serde(default = "homogeneous")]
    pub current_group_name: String,
    /// This host's name, e.g. `algo-2`.
    pub current_host: String,
    /// This host's instance type (absent on some classic jobs).
    #[serde(default)]
    pub current_instance_type: String,
    /// Every host of the job, sorted.
    pub hosts: Vec<String>,
    /// The groups; absent on classic jobs, where all hosts form `homogeneousCluster`.
    #[serde(default)]
    pub instance_groups: Vec<InstanceGroup>,
    /// The network interface SageMaker set up.
    #[serde(default)]
    pub network_interface_name: String,
}

fn homogeneous() -> String {
    hetgen_spec::model::HOMOGENEOUS_GROUP.to_owned()
}

impl ResourceConfig {
    /// The groups, with the classic single-group form filled in.
    pub fn groups(&self) -> Vec<InstanceGroup> {
        if self.instance_groups.is_empty() {
            vec![InstanceGroup {
                instance_group_name: self.current_group_name.clone(),
                instance_type: self.current_instance_type.clone(),
                hosts: self.hosts.clone(),
            }]
        } else {
            self.instance_groups.clone()
        }
    }

    /// The hosts of group `name`, sorted (empty when there is no such group).
    pub fn hosts_of(&self, name: &str) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .groups()
            .into_iter()
            .filter(|g| g.instance_group_name == name)
            .flat_map(|g| g.hosts)
            .collect();
        hosts.sort_by_key(|h| host_order(h));
        hosts
    }
}

/// One channel of `inputdataconfig.json`, with SageMaker's key names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ChannelConfig {
    /// MIME type, if the channel declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `File`, `Pipe` or `FastFile`.
    #[serde(default)]
    pub training_input_mode: String,
    /// `FullyReplicated` or `ShardedByS3Key`.
    #[serde(default, rename = "S3DistributionType")]
    pub s3_distribution_type: String,
    /// `None` or `RecordIO`.
    #[serde(default)]
    pub record_wrapper_type: String,
}

impl ChannelConfig {
    /// A channel delivered as files of plain objects: copied first (`File`) or mounted and read
    /// on demand (`FastFile`), which look alike to the container. `hetgen deploy --local`
    /// delivers a channel as its folder on disk, which stands in for either.
    pub fn files(
        content_type: Option<String>,
        distribution: S3Distribution,
        mode: InputMode,
    ) -> ChannelConfig {
        let name = |value: serde_json::Value| {
            value
                .as_str()
                .map(str::to_owned)
                .expect("serializes as its name")
        };
        ChannelConfig {
            content_type,
            training_input_mode: name(serde_json::json!(mode)),
            s3_distribution_type: name(serde_json::json!(distribution)),
            record_wrapper_type: "None".to_owned(),
        }
    }
}

/// Where a job's files live on this instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `/opt/ml` or `SAGEMAKER_BASE_DIR`.
    pub base: PathBuf,
}

impl Paths {
    /// `input/config/<name>`.
    pub fn config(&self, name: &str) -> PathBuf {
        self.config_dir().join(name)
    }
    /// `input/config`: `resourceconfig.json`, `hyperparameters.json`, `inputdataconfig.json`.
    pub fn config_dir(&self) -> PathBuf {
        self.base.join("input/config")
    }
    /// `input/config/resourceconfig.json`.
    pub fn resource_config(&self) -> PathBuf {
        self.config("resourceconfig.json")
    }
    /// `input/config/hyperparameters.json`.
    pub fn hyperparameters(&self) -> PathBuf {
        self.config("hyperparameters.json")
    }
    /// `input/config/inputdataconfig.json`.
    pub fn input_data_config(&self) -> PathBuf {
        self.config("inputdataconfig.json")
    }
    /// `input/data`: where the channels are mounted.
    pub fn data_dir(&self) -> PathBuf {
        self.base.join("input/data")
    }
    /// Where SageMaker mounts channel `name`.
    pub fn channel(&self, name: &str) -> PathBuf {
        self.data_dir().join(name)
    }
    /// `SM_MODEL_DIR`: saved to the job's model artefact.
    pub fn model_dir(&self) -> PathBuf {
        self.base.join("model")
    }
    /// `SM_OUTPUT_DATA_DIR`: saved to output.tar.gz.
    pub fn output_data_dir(&self) -> PathBuf {
        self.base.join("output/data")
    }
    /// Where a failure reason goes; SageMaker shows it as the job's FailureReason.
    pub fn failure_file(&self) -> PathBuf {
        self.base.join("output/failure")
    }
    /// Checkpoints, synced to S3 when the job configures CheckpointConfig.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.base.join("checkpoints")
    }
}

/// Everything an instance knows about the job it is part of.
#[derive(Debug, Clone)]
pub struct Env {
    /// Where its files are.
    pub paths: Paths,
    /// The cluster.
    pub resources: ResourceConfig,
    /// Hyperparameters, as SageMaker delivers them (strings).
    pub hyperparameters: BTreeMap<String, String>,
    /// Channels delivered to this host, by name.
    pub channels: BTreeMap<String, ChannelConfig>,
    /// Local folder of every channel delivered to this host.
    pub channel_dirs: BTreeMap<String, PathBuf>,
    /// Whether this is a pod of a Kubernetes job ([`kube`]) rather than a SageMaker instance.
    /// The two start differently: SageMaker starts every instance at once, JobSet starts the
    /// trainer pods only once every data pod is Ready.
    pub kubernetes: bool,
}

impl Env {
    /// Read the environment of the current process: a Kubernetes pod's from its variables
    /// when `HETGEN_KUBE_GROUPS` is set, else SageMaker's files.
    pub fn load() -> Result<Env, EnvError> {
        Env::load_from(&base_dir(), |name| std::env::var(name).ok())
    }

    /// [`Env::load`] inside a job; `Ok(None)` outside one (neither `HETGEN_KUBE_GROUPS` set nor
    /// `resourceconfig.json` under the root), for code that also runs on a workstation.
    pub fn load_if_present() -> Result<Option<Env>, EnvError> {
        Env::load_if_present_from(&base_dir(), |name| std::env::var(name).ok())
    }

    /// [`Env::load_if_present`] rooted at `base`, with `var` standing for the process
    /// environment.
    fn load_if_present_from(
        base: &Path,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Env>, EnvError> {
        let paths = Paths {
            base: base.to_owned(),
        };
        if !kube::is_pod(&var) && !paths.resource_config().exists() {
            return Ok(None);
        }
        Env::load_from(base, var).map(Some)
    }

    /// Read the environment rooted at `base`, with `var` standing for the process environment.
    ///
    /// On Kubernetes (`HETGEN_KUBE_GROUPS` set) the cluster comes from the `HETGEN_KUBE_*`
    /// variables and the files under `input/config` are not read (Kubeflow Trainer writes
    /// none; one left in the image must not describe another cluster): see the module `kube`.
    pub fn load_from(base: &Path, var: impl Fn(&str) -> Option<String>) -> Result<Env, EnvError> {
        let paths = Paths {
            base: base.to_owned(),
        };
        if kube::is_pod(&var) {
            return kube::load(paths, &var);
        }
        let resources: ResourceConfig =
            read_json(&paths.resource_config(), true)?.expect("required files are present");
        if !resources.hosts.contains(&resources.current_host) {
            return Err(EnvError::Inconsistent {
                path: paths.resource_config(),
                message: format!(
                    "current_host `{}` is not among hosts {:?}",
                    resources.current_host, resources.hosts
                ),
            });
        }
        // SageMaker always writes these two, but a hand-made local tree may not: an absent
        // file means none, a present but malformed one is an error.
        let hyperparameters = read_hyperparameters(&paths.hyperparameters())?;
        let channels: BTreeMap<String, ChannelConfig> =
            read_json(&paths.input_data_config(), false)?.unwrap_or_default();
        let channel_dirs = channel_dirs(&channels, &paths, &var);
        Ok(Env {
            paths,
            resources,
            hyperparameters,
            channels,
            channel_dirs,
            kubernetes: false,
        })
    }

    /// This host's name.
    pub fn host(&self) -> &str {
        &self.resources.current_host
    }

    /// This host's group.
    pub fn group(&self) -> &str {
        &self.resources.current_group_name
    }

    /// Whether the job has more than one instance group (`SM_IS_HETERO`).
    pub fn is_hetero(&self) -> bool {
        self.resources.groups().len() > 1
    }
}

/// The folder of every channel: `SM_CHANNEL_<NAME>` where `var` has it (the toolkit's
/// override), else where the platform mounts it under `paths`.
pub(crate) fn channel_dirs(
    channels: &BTreeMap<String, ChannelConfig>,
    paths: &Paths,
    var: &impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, PathBuf> {
    channels
        .keys()
        .map(|name| {
            let dir = var(&channel_var(name))
                .map(PathBuf::from)
                .unwrap_or_else(|| paths.channel(name));
            (name.clone(), dir)
        })
        .collect()
}

/// hyperparameters.json holds strings, but values written by hand or by other tools may be
/// numbers or booleans: those are kept in their JSON spelling.
fn read_hyperparameters(path: &Path) -> Result<BTreeMap<String, String>, EnvError> {
    let raw: Option<BTreeMap<String, serde_json::Value>> = read_json(path, false)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect())
}

/// Read and parse a JSON file; `Ok(None)` when it is absent and not `required`.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    required: bool,
) -> Result<Option<T>, EnvError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        Err(source) => {
            return Err(EnvError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EnvError::Malformed {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
            message: json_error_message(&e),
        })
}

/// What serde_json says is wrong, without the " at line L column C" it appends: callers that
/// name the position themselves would otherwise say it twice.
pub fn json_error_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&position).unwrap_or(&text).to_owned()
}

/// Write `reason` where SageMaker looks for a failure reason, best effort: the caller is
/// already failing and reports the reason on stderr as well.
pub fn write_failure(paths: &Paths, reason: &str) {
    let file = paths.failure_file();
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(file, reason);
}

#[cfg(test)]
mod tests;
