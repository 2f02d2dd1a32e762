//! The resolved job: the spec with every default applied and every rule proven.
//!
//! This is what `render` turns into files and what the launcher reads back from `job.json`
//! inside every instance, so it is `Serialize + Deserialize` and holds no `Option` that
//! validation already settled.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

pub use crate::raw::{
    Device, Distribution, ImageEncoding, InputMode, Model, OptimizerName, Precision, Role,
    S3Distribution, ScheduleName,
};

/// Characters `hetgen deploy` appends to the job name unless `fixed_name` is set:
/// `-YYYYMMDD-HHMMSS-xxxx`, the middle part a [`name_timestamp`].
pub const NAME_SUFFIX_LEN: usize = 21;

/// `20250131-120005`: a UTC time to the second that sorts as it reads and fits in a job name and
/// a file name (times before 1970 count as 1970). A deployed job's name suffix and a local run's
/// folder carry it.
pub fn name_timestamp(time: SystemTime) -> String {
    // `2025-01-31T12:00:05Z` → `20250131-120005`.
    let utc = humantime::format_rfc3339_seconds(time.max(SystemTime::UNIX_EPOCH)).to_string();
    let digits: String = utc.chars().filter(char::is_ascii_digit).collect();
    format!("{}-{}", &digits[..8], &digits[8..])
}

/// The image a script-mode job's training image is built on when the spec names none: the
/// PyTorch project's own CUDA runtime image (docs/spec.md says why this one).
pub const DEFAULT_BASE_IMAGE: &str = "pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime";

/// The group name SageMaker gives the only group of a job without instance groups.
pub const HOMOGENEOUS_GROUP: &str = "homogeneousCluster";

/// `[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}`: alphanumerics, hyphens only between them.
pub fn is_job_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// A validated, resolved hetgen job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The job's name (before any unique suffix).
    pub name: String,
    /// Whether `name` is used as the TrainingJobName without a suffix.
    pub fixed_name: bool,
    /// Seed for the epoch plan and per-sample randomness.
    pub seed: u64,
    /// Instance groups, in spec order.
    pub groups: Vec<Group>,
    /// Input channels, in spec order.
    pub channels: Vec<Channel>,
    /// The data pipeline.
    pub pipeline: Pipeline,
    /// The training loop.
    pub trainer: Trainer,
    /// How the job runs on SageMaker; `None` for a local-only job.
    pub sagemaker: Option<SageMaker>,
    /// How the job runs on Kubernetes (Kubeflow Trainer); `None` without `[kubernetes]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<Kubernetes>,
}

impl Job {
    /// How SageMaker delivers `channel`: its own mode, else the job's, else `File`.
    pub fn input_mode(&self, channel: &Channel) -> InputMode {
        channel
            .input_mode
            .or(self.sagemaker.as_ref().map(|sm| sm.input_mode))
            .unwrap_or(InputMode::File)
    }

    /// The trainer group (validation proves there is exactly one).
    pub fn trainer_group(&self) -> &Group {
        self.groups
            .iter()
            .find(|g| g.role == Role::Trainer)
            .expect("a resolved job has a trainer group")
    }

    /// The data groups, in spec order.
    pub fn data_groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.role == Role::Data)
    }

    /// Whether the trainer preprocesses its own data (no data group).
    pub fn is_homogeneous(&self) -> bool {
        self.data_groups().next().is_none()
    }

    /// Pipeline threads on one trainer host that has `host_vcpus` vCPUs, for all of its
    /// processes together: what the launcher gives the local pipeline (`host_vcpus` the cores it
    /// may use) and what `hetgen plan` counts for the trainer side (`host_vcpus` the catalog's).
    /// One function, so the two cannot disagree.
    ///
    /// With data groups this is the hybrid share, `0` when off: `trainer_threads` outright, or
    /// the host's vCPUs less `reserve_vcpus` (by default [`default_reserve_vcpus`]), and `0`
    /// when the source's channel does not reach the trainer group. Without data groups the
    /// trainer is the only pipeline: `threads` when set, else the same share, at least 1.
    pub fn trainer_threads(&self, host_vcpus: u32) -> u32 {
        let gpus = self.trainer_group().gpus.unwrap_or(0);
        let share = match self.pipeline.trainer_cpus {
            TrainerCpus::Threads(n) => n,
            TrainerCpus::Reserve(r) => host_vcpus.saturating_sub(r),
            TrainerCpus::Auto => host_vcpus.saturating_sub(default_reserve_vcpus(gpus)),
        };
        if self.is_homogeneous() {
            self.pipeline.threads.unwrap_or(share).max(1)
        } else if self.trainer_reads_source() {
            share
        } else {
            0
        }
    }

    /// Whether the trainer group receives what the pipeline reads (always for a synthetic
    /// source; for a channel, when it names no groups or names the trainer's).
    pub fn trainer_reads_source(&self) -> bool {
        let Some(channel) = self.pipeline.source.channel() else {
            return true;
        };
        let trainer = &self.trainer_group().name;
        self.channels
            .iter()
            .find(|c| c.name == channel)
            .is_some_and(|c| c.reaches(trainer))
    }

    /// The groups that run the pipeline: the data groups, or the trainer without them.
    pub fn pipeline_groups(&self) -> Vec<&Group> {
        if self.is_homogeneous() {
            vec![self.trainer_group()]
        } else {
            self.data_groups().collect()
        }
    }
}

/// An instance group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The group's name.
    pub name: String,
    /// SageMaker instance type.
    pub instance_type: String,
    /// Number of instances.
    pub count: u32,
    /// What the group does.
    pub role: Role,
    /// Distribution strategy, trainer group only.
    pub distribution: Option<Distribution>,
    /// vCPUs per instance, when the type is in the catalog.
    pub vcpus: Option<u32>,
    /// GPUs per instance, when the type is in the catalog.
    pub gpus: Option<u32>,
    /// USD per instance-hour as the spec sets it (`price_per_hour`), which wins over any price
    /// source; `None` when the spec sets none (`hetgen plan` then prices the type).
    pub price_per_hour: Option<f64>,
}

/// An input channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    /// Channel name.
    pub name: String,
    /// Where SageMaker reads it from (or a local path for a local-only job).
    pub uri: String,
    /// Local folder for `deploy --local`: `local_path`, else `uri` when it is not remote.
    pub local_path: Option<String>,
    /// Groups that receive it; empty when the job names no groups on channels.
    pub instance_groups: Vec<String>,
    /// How objects are spread over instances.
    pub distribution: S3Distribution,
    /// Input mode override.
    pub input_mode: Option<InputMode>,
    /// MIME type.
    pub content_type: Option<String>,
}

impl Channel {
    /// Whether the hosts of `group` receive this channel: a channel that names groups goes only
    /// to those, one that names none to every group (SageMaker's `InstanceGroupNames`).
    pub fn reaches(&self, group: &str) -> bool {
        self.instance_groups.is_empty() || self.instance_groups.iter().any(|g| g == group)
    }
}

/// The data pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// Where samples come from.
    pub source: Source,
    /// Samples per batch.
    pub batch_size: u32,
    /// Samples per shard.
    pub shard_size: u32,
    /// Worker threads; `None` means the cores the process may use.
    pub threads: Option<u32>,
    /// How many of a trainer host's vCPUs its own pipeline uses ([`Job::trainer_threads`]).
    #[serde(default)]
    pub trainer_cpus: TrainerCpus,
    /// Stages in order, defaults applied; none for a Python source.
    pub stages: Vec<Stage>,
    /// `[height, width, channels]` of every sample the pipeline emits, or
    /// [`Pipeline::UNKNOWN_SHAPE`] for a Python source, whose samples are whatever its dataset
    /// returns (known only once it runs).
    pub output_shape: [u32; 3],
}

impl Pipeline {
    /// The `output_shape` of a pipeline whose samples hetgen cannot know before it runs.
    pub const UNKNOWN_SHAPE: [u32; 3] = [0, 0, 0];

    /// `output_shape`, where hetgen knows it.
    pub fn known_output_shape(&self) -> Option<[u32; 3]> {
        (self.output_shape != Self::UNKNOWN_SHAPE).then_some(self.output_shape)
    }
}

/// `[pipeline] reserve_vcpus` / `trainer_threads`: the trainer host's share of preprocessing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainerCpus {
    /// Keep [`default_reserve_vcpus`] for the training loop; the rest preprocess.
    #[default]
    Auto,
    /// Keep this many vCPUs for the training loop; the rest preprocess.
    Reserve(u32),
    /// Exactly this many pipeline threads (0: no hybrid input).
    Threads(u32),
}

/// The vCPUs a trainer host keeps for its own work by default: one per GPU (each drives its
/// GPU from a CPU thread: kernel launches, copies, the DDP process of script mode) and one for
/// the data client and prefetch, at least 2. docs/spec.md gives the measurements behind it.
pub fn default_reserve_vcpus(gpus: u32) -> u32 {
    gpus.saturating_add(1).max(2)
}

/// Where samples come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "kebab-case")]
pub enum Source {
    /// Class sub-folders of images.
    ImageFolder {
        /// The channel holding them.
        channel: String,
    },
    /// WebDataset tar shards.
    TarShards {
        /// The channel holding them.
        channel: String,
    },
    /// Generated images.
    Synthetic {
        /// `[height, width, channels]`.
        shape: [u32; 3],
        /// Number of classes.
        classes: u32,
        /// Samples per epoch.
        samples: u64,
        /// Encoded form, if any.
        encoding: Option<ImageEncoding>,
    },
    /// The user's own map-style dataset (`__len__`, `__getitem__`), made by Python worker
    /// processes on every host that runs the pipeline.
    Python {
        /// The function that builds the dataset from the channel's folder and the job's
        /// hyperparameters.
        dataset: PythonRef,
        /// The function that turns a list of samples into a batch; `None`: stack them field by
        /// field, as PyTorch's default collate does.
        collate: Option<PythonRef>,
        /// The channel whose local folder the dataset reads.
        channel: String,
    },
}

/// A function in a Python file of the job's code folder: `data.py:make_train_set`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonRef {
    /// The file, relative to the code folder (the script's `source_dir`), `/` between folders.
    pub file: String,
    /// The name the file binds at its top level: a function, a class or any other callable.
    pub name: String,
}

impl std::fmt::Display for PythonRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.name)
    }
}

impl Source {
    /// The channel the source reads, if any.
    pub fn channel(&self) -> Option<&str> {
        match self {
            Source::ImageFolder { channel }
            | Source::TarShards { channel }
            | Source::Python { channel, .. } => Some(channel),
            Source::Synthetic { .. } => None,
        }
    }
}

/// One pipeline stage with its defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Stage {
    /// Decode JPEG/PNG.
    Decode {
        /// 1 or 3.
        channels: u32,
    },
    /// Resize to `[height, width]`.
    Resize {
        /// `[height, width]`.
        size: [u32; 2],
    },
    /// Central crop.
    CenterCrop {
        /// `[height, width]`.
        size: [u32; 2],
    },
    /// Random crop then resize.
    RandomResizedCrop {
        /// `[height, width]`.
        size: [u32; 2],
        /// Area fraction range.
        scale: [f64; 2],
        /// Aspect ratio range.
        ratio: [f64; 2],
    },
    /// Mirror left-right.
    HorizontalFlip {
        /// Probability.
        p: f64,
    },
    /// Random colour changes.
    ColorJitter {
        /// Brightness strength.
        brightness: f64,
        /// Contrast strength.
        contrast: f64,
        /// Saturation strength.
        saturation: f64,
    },
    /// Gaussian blur.
    GaussianBlur {
        /// Odd kernel size.
        kernel: u32,
        /// Sigma range.
        sigma: [f64; 2],
    },
    /// Random rectangle erasing.
    RandomErasing {
        /// Probability.
        p: f64,
        /// Area fraction range.
        scale: [f64; 2],
        /// Aspect ratio range.
        ratio: [f64; 2],
        /// Fill value.
        value: u8,
    },
    /// Per-channel normalisation, on the trainer's device.
    Normalize {
        /// Means.
        mean: Vec<f64>,
        /// Standard deviations.
        std: Vec<f64>,
    },
    /// Float conversion, on the trainer's device.
    ToTensor,
    /// A stage registered in the launcher crate.
    Custom {
        /// Registered name.
        name: String,
        /// Parameters as JSON.
        params: BTreeMap<String, serde_json::Value>,
    },
}

/// The optimizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Optimizer {
    /// Algorithm.
    pub name: OptimizerName,
    /// Learning rate.
    pub lr: f64,
    /// Momentum (SGD).
    pub momentum: f64,
    /// Weight decay.
    pub weight_decay: f64,
}

/// The learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Kind.
    pub name: ScheduleName,
    /// Warm-up steps.
    pub warmup_steps: u64,
    /// `step`: steps between decays.
    pub step_size: Option<u64>,
    /// `step`: decay factor.
    pub gamma: f64,
    /// `cosine`: final learning rate.
    pub min_lr: f64,
}

/// How long training runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Length {
    /// A number of optimizer steps.
    Steps(u64),
    /// A number of passes over the data.
    Epochs(u32),
}

/// What the trainer group runs: hetgen's built-in libtorch trainer, or the user's own script
/// under `torchrun`. In `job.json`: `"trainer": {"builtin": {…}}` or `{"script": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trainer {
    /// `[trainer] model = …`: the built-in training loop, one trainer host.
    Builtin(BuiltinTrainer),
    /// `[trainer] script = …`: the user's script, on every host of the trainer group.
    Script(ScriptTrainer),
}

impl Trainer {
    /// The built-in trainer, if the job uses it.
    pub fn builtin(&self) -> Option<&BuiltinTrainer> {
        match self {
            Trainer::Builtin(b) => Some(b),
            Trainer::Script(_) => None,
        }
    }

    /// The user's script, if the job runs one.
    pub fn script(&self) -> Option<&ScriptTrainer> {
        match self {
            Trainer::Script(s) => Some(s),
            Trainer::Builtin(_) => None,
        }
    }

    /// Deterministic mode: kernels and batch order repeatable.
    pub fn deterministic(&self) -> bool {
        match self {
            Trainer::Builtin(b) => b.deterministic,
            Trainer::Script(s) => s.deterministic,
        }
    }
}

/// SageMaker's variable naming a script-mode job's entry point.
pub const PROGRAM_VAR: &str = "SAGEMAKER_PROGRAM";

/// The user's training script, run under `torchrun` on every host of the trainer group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptTrainer {
    /// The script, relative to `source_dir`, `/`-separated.
    pub script: String,
    /// The folder shipped with the script, as the spec wrote it, relative to the spec's
    /// folder; `"."` by default.
    pub source_dir: String,
    /// Arguments after the script's path.
    pub args: Vec<String>,
    /// A pip requirements file, relative to `source_dir`.
    pub requirements: Option<String>,
    /// Processes per trainer host (`torchrun --nproc-per-node`): the GPUs of the trainer
    /// group's instance type (at least 1) for `"gpu"`, or the number given.
    pub processes_per_host: u32,
    /// The PyTorch image the training image is built on.
    pub base_image: String,
    /// Deterministic mode.
    pub deterministic: bool,
}

/// The built-in training loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuiltinTrainer {
    /// Model.
    pub model: Model,
    /// Steps or epochs.
    pub length: Length,
    /// Classes predicted.
    pub num_classes: u32,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Schedule.
    pub lr_schedule: Schedule,
    /// Precision.
    pub precision: Precision,
    /// Device.
    pub device: Device,
    /// Checkpoint interval in steps, if any.
    pub checkpoint_every: Option<u64>,
    /// Metrics line interval in steps.
    pub log_every: u64,
    /// Deterministic mode.
    pub deterministic: bool,
}

/// A metric SageMaker scrapes from the logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Name.
    pub name: String,
    /// Regex whose first group is the value.
    pub regex: String,
}

/// VPC placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vpc {
    /// Subnet ids.
    pub subnets: Vec<String>,
    /// Security group ids.
    pub security_group_ids: Vec<String>,
}

/// How the job runs on SageMaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SageMaker {
    /// Region.
    pub region: String,
    /// Execution role.
    pub role_arn: String,
    /// Training image: the spec's `image_uri`, or AWS's PyTorch image in framework mode.
    pub image_uri: String,
    /// Framework mode: the job runs its script on AWS's PyTorch training image, uploaded as a
    /// source bundle (`None`: the image is the spec's own).
    pub framework: Option<Framework>,
    /// Model output prefix.
    pub output_path: String,
    /// Job-wide input mode.
    pub input_mode: InputMode,
    /// Volume per instance, GB.
    pub volume_gb: u32,
    /// Max runtime, seconds.
    pub max_runtime_s: u64,
    /// Warm pool keep-alive, seconds.
    pub keep_alive_s: Option<u64>,
    /// User tags (hetgen's own, [`HETGEN_TAGS`], are added at render).
    pub tags: BTreeMap<String, String>,
    /// Environment for every instance.
    pub environment: BTreeMap<String, String>,
    /// Hyperparameters as strings.
    pub hyperparameters: BTreeMap<String, String>,
    /// VPC, if any.
    pub vpc: Option<Vpc>,
    /// Inter-container traffic encryption.
    pub inter_container_encryption: bool,
    /// Checkpoint sync prefix: each job's checkpoints go under `<prefix>/<job name>/`
    /// ([`SageMaker::checkpoint_uri_of`]).
    pub checkpoint_uri: Option<String>,
    /// Metric definitions: hetgen's, then the user's.
    pub metrics: Vec<Metric>,
}

impl SageMaker {
    /// Where the job named `job_name` keeps its checkpoints: `<checkpoint_uri>/<job_name>/`.
    ///
    /// Per job, because SageMaker restores whatever the location holds into
    /// `/opt/ml/checkpoints` before the job starts: one location for every job of a spec would
    /// make each new job resume the last one's checkpoint (and one that had finished would
    /// train no further). SageMaker's own restarts of the same job (spot, retries) keep the
    /// name and so resume; continuing another job is asked for explicitly
    /// (`hetgen deploy --resume-from JOB`, which reuses that job's location).
    pub fn checkpoint_uri_of(&self, job_name: &str) -> Option<String> {
        Some(format!("{}{job_name}/", self.checkpoint_prefix()?))
    }

    /// `checkpoint_uri` ending in exactly one `/`: what a job's name follows.
    pub fn checkpoint_prefix(&self) -> Option<String> {
        let prefix = self.checkpoint_uri.as_deref()?;
        Some(format!("{}/", prefix.trim_end_matches('/')))
    }
}

/// The tag that marks jobs hetgen started, with the version that started them (`hetgen list`
/// filters on it).
pub const VERSION_TAG: &str = "hetgen:version";
/// The tag with the sha256 of the spec's bytes a job was rendered from.
pub const SPEC_TAG: &str = "hetgen:spec-sha256";
/// The tag with the spec's `[job] name`: which job a training job trains, whatever its
/// TrainingJobName (a unique suffix, `--name`). `hetgen deploy --resume-from` continues only a
/// job of the same name, so that no job starts from another job's checkpoints.
pub const JOB_TAG: &str = "hetgen:job";
/// Every tag hetgen adds to a job, in the order it adds them after the user's.
pub const HETGEN_TAGS: [&str; 3] = [VERSION_TAG, SPEC_TAG, JOB_TAG];

/// A script-mode job on AWS's prebuilt PyTorch training image (no `image_uri`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Framework {
    /// PyTorch release of the image, e.g. `2.8.0`.
    pub framework_version: String,
    /// The image's Python, e.g. `py312`.
    pub py_version: String,
    /// `gpu` or `cpu`: the image every group runs.
    pub processor: String,
    /// `s3://bucket[/prefix]` (no trailing `/`) that the source bundle goes under.
    pub code_location: String,
}

impl Framework {
    /// Where the source bundle of job `name` goes ([`crate::framework::bundle_uri`]).
    pub fn submit_directory(&self, name: &str) -> String {
        crate::framework::bundle_uri(&self.code_location, name)
    }
}

/// The metric definitions matching the trainer's per-step line ([`crate::step`]), e.g.
/// `hetgen-step step=120 loss=0.4312 step_ms=85.10 wait_ms=1.20 samples_per_s=3008.2`.
pub fn builtin_metrics() -> Vec<Metric> {
    crate::step::METRICS
        .into_iter()
        .map(|(name, key)| Metric {
            name: name.to_owned(),
            regex: crate::step::metric_regex(key),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn name_timestamps_are_utc_calendar_times() {
        let at = |secs| name_timestamp(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(1_738_324_805), "20250131-120005"); // 2025-01-31T12:00:05Z
        assert_eq!(at(0), "19700101-000000");
        assert_eq!(at(951_782_400), "20000229-000000"); // a leap day
        assert_eq!(
            name_timestamp(UNIX_EPOCH - Duration::from_secs(1)),
            "19700101-000000"
        );
        // With the two hyphens and four random digits, the suffix validation reserves.
        assert_eq!(at(1_796_237_427).len() + 6, NAME_SUFFIX_LEN);
    }
}

/// `[kubernetes]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kubernetes {
    /// The image of every pod.
    pub image: String,
    /// The namespace of the job's objects.
    pub namespace: String,
    /// The claim of every channel, by channel name.
    pub claims: BTreeMap<String, String>,
    /// Environment for every pod.
    pub environment: BTreeMap<String, String>,
    /// Tolerations of every pod, beside the GPU one hetgen adds.
    pub tolerations: Vec<crate::kube::Toleration>,
    /// Thousandths of a vCPU each node keeps from the pods (1000 by default).
    pub reserve_millicpu: u32,
    /// MiB of memory each node keeps from the pods; `None`: the pods request no memory.
    pub reserve_memory_mib: Option<u64>,
    /// Annotations of every pod.
    pub pod_annotations: BTreeMap<String, String>,
    /// Labels of every pod, beside JobSet's and hetgen's.
    pub pod_labels: BTreeMap<String, String>,
    /// The claim that keeps the trainer pods' model and checkpoints.
    pub output_claim: Option<String>,
}
