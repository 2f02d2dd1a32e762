//! The raw spec: serde types that mirror `hetgen.toml` key for key.
//!
//! Everything a user may leave out is an `Option` here; [`crate::resolve`] applies the defaults
//! and proves the invariants, producing a [`crate::Job`]. Unknown keys are rejected
//! (`deny_unknown_fields`) so a typo never silently turns into a default. The JSON Schema in
//! `schema/hetgen.schema.json` is generated from these types: doc comments become descriptions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod kubernetes;

pub use kubernetes::{RawKubernetes, RawReserve};

/// A hetgen job: instance groups, input channels, the data pipeline, the trainer and where it
/// runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "hetgen.toml")]
pub struct RawSpec {
    /// Version of the spec format. Only `1` exists.
    pub version: i64,
    /// The job's identity.
    pub job: RawJob,
    /// The instance groups of the cluster (1 to 5). Exactly one has `role = "trainer"`.
    #[serde(default)]
    pub instance_group: Vec<RawInstanceGroup>,
    /// Input channels: where the data is and which groups receive it.
    #[serde(default)]
    pub channel: Vec<RawChannel>,
    /// The preprocessing pipeline that data groups (or, without one, the trainer) run.
    pub pipeline: RawPipeline,
    /// The training loop on the trainer group.
    pub trainer: RawTrainer,
    /// Where the job runs on Amazon SageMaker. Leave it out for a job that only runs locally
    /// (`hetgen deploy --local`).
    pub sagemaker: Option<RawSageMaker>,
    /// Where the job runs on Kubernetes, as a Kubeflow Trainer job. With it, `hetgen render`
    /// also writes the job's `TrainingRuntime` and `TrainJob` (`kubeflow/`); a spec may have
    /// both this and `[sagemaker]`.
    pub kubernetes: Option<RawKubernetes>,
}

/// `[job]`: the job's name and seed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    /// Becomes the SageMaker `TrainingJobName`. `hetgen deploy` appends a unique suffix
    /// (`-YYYYMMDD-HHMMSS-xxxx`, 21 characters) unless `fixed_name = true`, so the name must
    /// leave room for it within 63 characters.
    pub name: String,
    /// Seed for the epoch plan and every per-sample random choice. Default `0`.
    pub seed: Option<i64>,
    /// Use `name` as the TrainingJobName as it is, without a unique suffix. Default `false`.
    pub fixed_name: Option<bool>,
}

/// What an instance group does in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Preprocesses data and streams batches to the trainers.
    Data,
    /// Trains the model on the batches it receives.
    Trainer,
}

/// A distribution strategy SageMaker can apply to one instance group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Distribution {
    /// PyTorch's torchrun-style launcher.
    TorchDistributed,
    /// MPI (mpirun) launcher.
    Mpi,
}

/// `[[instance_group]]`: a set of identical instances with one role.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawInstanceGroup {
    /// Group name (1 to 64 characters), unique within the job. Becomes `InstanceGroupName`.
    pub name: String,
    /// SageMaker training instance type, e.g. `ml.c5.9xlarge`.
    pub instance_type: String,
    /// Number of instances. Default `1`.
    pub count: Option<i64>,
    /// `data` or `trainer`.
    pub role: Role,
    /// A distribution strategy for this group. Only the trainer group may have one.
    pub distribution: Option<Distribution>,
    /// On-demand price in USD per instance-hour, overriding the catalog's.
    pub price_per_hour: Option<f64>,
    /// Accept an instance type that is not in hetgen's catalog (a type newer than hetgen).
    /// hetgen then knows neither its cores nor its GPUs.
    pub allow_unknown_instance_type: Option<bool>,
}

/// How SageMaker spreads a channel's S3 objects over the instances that receive it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum S3Distribution {
    /// Every instance receives every object.
    FullyReplicated,
    /// Each instance receives a disjoint part of the objects.
    ShardedByS3Key,
}

/// How SageMaker delivers input data to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InputMode {
    /// Copied to the instance's volume before training starts.
    File,
    /// Streamed through a named pipe.
    Pipe,
    /// Mounted from S3, read on demand.
    FastFile,
}

/// `[[channel]]`: an input channel.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawChannel {
    /// Channel name (`[A-Za-z0-9.\-_]+`, at most 64 characters). Inside the container the data
    /// is at `/opt/ml/input/data/<name>`.
    pub name: String,
    /// `s3://bucket/prefix/` (or `https://`) for SageMaker. A job without `[sagemaker]` may use
    /// a local path.
    pub uri: String,
    /// A local folder used instead of `uri` by `hetgen deploy --local`.
    pub local_path: Option<String>,
    /// The groups that receive this channel. If one channel names groups, all must.
    pub instance_groups: Option<Vec<String>>,
    /// `FullyReplicated` (default) or `ShardedByS3Key`.
    pub distribution: Option<S3Distribution>,
    /// Overrides the job's input mode for this channel.
    pub input_mode: Option<InputMode>,
    /// MIME type of the channel's data, passed to SageMaker as `ContentType`.
    pub content_type: Option<String>,
}

/// `[pipeline]`: the data pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Where samples come from.
    pub source: RawSource,
    /// Samples per batch, per trainer replica.
    pub batch_size: i64,
    /// Samples per shard, the unit of work a data server is given. Default `4 × batch_size`.
    pub shard_size: Option<i64>,
    /// Worker threads per pipeline process. Default: the cores the process may use.
    pub threads: Option<i64>,
    /// vCPUs of each trainer host kept for the training loop; the rest run the pipeline there
    /// too: beside the data servers in a job with data groups (hybrid input), alone without.
    /// Default: one per GPU of the trainer's instance type plus one, at least 2. Not with
    /// `trainer_threads`.
    pub reserve_vcpus: Option<i64>,
    /// Pipeline threads on each trainer host, outright (instead of `reserve_vcpus`); `0` turns
    /// hybrid input off in a job with data groups.
    pub trainer_threads: Option<i64>,
    /// Stages applied to every sample, in order.
    #[serde(default)]
    pub stage: Vec<RawStage>,
}

/// How a synthetic source encodes its images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImageEncoding {
    /// JPEG bytes, as image datasets usually store them.
    Jpeg,
    /// PNG bytes.
    Png,
}

/// `pipeline.source`: where samples come from.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "format", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RawSource {
    /// A folder of class sub-folders of images; the label is the class's index in sorted order.
    ImageFolder {
        /// The channel holding the folder.
        channel: String,
    },
    /// WebDataset-style tar shards: `key.jpg` or `key.png` beside `key.cls`.
    TarShards {
        /// The channel holding the shards.
        channel: String,
    },
    /// Deterministic generated images, for smoke tests and benchmarks. Needs no channel.
    Synthetic {
        /// `[height, width, channels]` of every image.
        shape: [i64; 3],
        /// Number of classes. Default `10`.
        classes: Option<i64>,
        /// Samples per epoch. Default `1024`.
        samples: Option<i64>,
        /// Deliver encoded images (so the pipeline must `decode`) instead of raw pixels.
        encoding: Option<ImageEncoding>,
    },
    /// Your own map-style dataset (an object with `__len__` and `__getitem__(i)`, as for a
    /// PyTorch `DataLoader`), run by Python worker processes on the hosts that run the
    /// pipeline, one per pipeline thread. Needs a script-mode trainer (`[trainer] script`).
    /// Not with `[[pipeline.stage]]`: your dataset does its own preprocessing.
    Python {
        /// `file.py:function`: the function that builds the dataset, called as
        /// `function(path, hyperparameters)` with the channel's local folder (a `str`) and the
        /// job's hyperparameters (a `dict`). The file is relative to the trainer's
        /// `source_dir`, `/` between folders; the function is defined at its top level.
        dataset: String,
        /// `file.py:function` (as for `dataset`) that turns a list of samples into a batch.
        /// Default: samples are stacked field by field, as PyTorch's default collate does.
        collate: Option<String>,
        /// The channel holding the data.
        channel: String,
    },
}

/// `[[pipeline.stage]]`: one operation on every sample.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum RawStage {
    /// Decode JPEG or PNG bytes into pixels.
    Decode {
        /// `3` for RGB (default) or `1` for grayscale.
        channels: Option<i64>,
    },
    /// Resize to `[height, width]`.
    Resize {
        /// `[height, width]` in pixels.
        size: [i64; 2],
    },
    /// Crop the central `[height, width]` region.
    CenterCrop {
        /// `[height, width]` in pixels.
        size: [i64; 2],
    },
    /// Crop a random region of random area and aspect ratio, then resize it to `size`.
    RandomResizedCrop {
        /// Output `[height, width]` in pixels.
        size: [i64; 2],
        /// `[min, max]` fraction of the image's area to crop. Default `[0.08, 1.0]`.
        scale: Option<[f64; 2]>,
        /// `[min, max]` aspect ratio (width / height) of the crop. Default `[0.75, 1.3333]`.
        ratio: Option<[f64; 2]>,
    },
    /// Mirror left-right with probability `p`.
    HorizontalFlip {
        /// Probability in `[0, 1]`. Default `0.5`.
        p: Option<f64>,
    },
    /// Random brightness, contrast and saturation changes by a factor in `[1 - x, 1 + x]`.
    ColorJitter {
        /// In `[0, 1]`. Default `0`.
        brightness: Option<f64>,
        /// In `[0, 1]`. Default `0`.
        contrast: Option<f64>,
        /// In `[0, 1]`. Default `0`.
        saturation: Option<f64>,
    },
    /// Gaussian blur with a random sigma.
    GaussianBlur {
        /// Kernel size in pixels: odd and positive.
        kernel: i64,
        /// `[min, max]` standard deviation, `0 < min <= max`. Default `[0.1, 2.0]`.
        sigma: Option<[f64; 2]>,
    },
    /// Erase a random rectangle with probability `p`.
    RandomErasing {
        /// Probability in `[0, 1]`. Default `0.5`.
        p: Option<f64>,
        /// `[min, max]` fraction of the area to erase. Default `[0.02, 0.33]`.
        scale: Option<[f64; 2]>,
        /// `[min, max]` aspect ratio of the rectangle. Default `[0.3, 3.3]`.
        ratio: Option<[f64; 2]>,
        /// Fill value. Default `0`.
        value: Option<i64>,
    },
    /// Subtract `mean` and divide by `std` per channel (values on the 0–1 scale). Applied on the
    /// trainer's device: batches travel as uint8.
    Normalize {
        /// One value per channel.
        mean: Vec<f64>,
        /// One positive value per channel.
        std: Vec<f64>,
    },
    /// Convert to a float tensor in `[0, 1]`, channels first. Applied on the trainer's device.
    ToTensor {},
    /// A stage registered by name in the rendered launcher crate.
    Custom {
        /// The name the stage is registered under.
        name: String,
        /// Parameters handed to the stage as JSON.
        #[serde(default)]
        params: BTreeMap<String, serde_json::Value>,
    },
}

/// A model the trainer can build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    /// Two hidden layers on the flattened image; any input size.
    Mlp,
    /// conv32 → conv64 → maxpool → dropout → fc128 → fc10, on 28×28 grayscale images.
    MnistCnn,
    /// ResNet-18, on RGB images of at least 32×32.
    Resnet18,
    /// ResNet-50, on RGB images of at least 32×32.
    Resnet50,
}

/// Optimizer algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerName {
    /// Stochastic gradient descent, with optional momentum.
    Sgd,
    /// Adam.
    Adam,
    /// Adadelta.
    Adadelta,
}

/// `trainer.optimizer`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOptimizer {
    /// `sgd`, `adam` or `adadelta`.
    pub name: OptimizerName,
    /// Learning rate, positive.
    pub lr: f64,
    /// Momentum in `[0, 1)`, SGD only. Default `0`.
    pub momentum: Option<f64>,
    /// L2 weight decay, at least 0. Default `0`.
    pub weight_decay: Option<f64>,
}

/// Learning-rate schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleName {
    /// The optimizer's `lr` throughout.
    Constant,
    /// Multiply by `gamma` every `step_size` steps.
    Step,
    /// Cosine decay from `lr` to `min_lr` over the run.
    Cosine,
}

/// `trainer.lr_schedule`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSchedule {
    /// `constant`, `step` or `cosine`.
    pub name: ScheduleName,
    /// Linear warm-up from 0 over this many steps first. Default `0`.
    pub warmup_steps: Option<i64>,
    /// For `step`: steps between decays.
    pub step_size: Option<i64>,
    /// For `step`: decay factor in `(0, 1]`. Default `0.1`.
    pub gamma: Option<f64>,
    /// For `cosine`: the final learning rate. Default `0`.
    pub min_lr: Option<f64>,
}

/// Numeric precision of the forward and backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// Full precision.
    Fp32,
    /// bfloat16 autocast (CUDA only).
    Bf16,
    /// float16 autocast with loss scaling (CUDA only).
    Fp16,
}

/// Where the trainer computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    /// CUDA when available, else CPU.
    Auto,
    /// CUDA; fail when there is no GPU.
    Cuda,
    /// CPU.
    Cpu,
}

/// `[trainer]`: what the trainer group runs. Either `model` (hetgen's built-in trainer, one
/// host) or `script` (your own PyTorch script under `torchrun`, on every host of the trainer
/// group), never both.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [{"required": ["model"]}, {"required": ["script"]}]))]
pub struct RawTrainer {
    /// The built-in trainer's model: `mlp`, `mnist-cnn`, `resnet18` or `resnet50`.
    pub model: Option<Model>,
    /// Script mode: your training script, relative to `source_dir`, with `/` between folders,
    /// e.g. `"train.py"`. It runs under `torchrun` on every host of the trainer group and reads
    /// its batches through `hetgen.Loader`.
    pub script: Option<String>,
    /// Script mode: the folder shipped with the script (to `/opt/ml/code` in the image),
    /// relative to the spec's folder. Default `"."`, the spec's folder.
    pub source_dir: Option<String>,
    /// Script mode: arguments passed to the script after its path.
    pub args: Option<Vec<String>>,
    /// Script mode: a pip requirements file, relative to `source_dir`, installed into the image.
    pub requirements: Option<String>,
    /// Script mode: processes per trainer host (`torchrun --nproc-per-node`). `"gpu"` (default):
    /// one per GPU of the trainer group's instance type; or a number.
    pub processes_per_host: Option<ProcessesPerHost>,
    /// Script mode: the PyTorch image the training image is built on. Default
    /// `pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime` (the PyTorch project's CUDA runtime image).
    pub base_image: Option<String>,
    /// Number of optimizer steps. Give either `steps` or `epochs`.
    pub steps: Option<i64>,
    /// Number of passes over the data. Give either `steps` or `epochs`.
    pub epochs: Option<i64>,
    /// Number of classes the model predicts. Default: the synthetic source's `classes`, else 10.
    pub num_classes: Option<i64>,
    /// Default: SGD with `lr = 0.01`, `momentum = 0.9`.
    pub optimizer: Option<RawOptimizer>,
    /// Default: constant.
    pub lr_schedule: Option<RawSchedule>,
    /// `fp32` (default), `bf16` or `fp16`.
    pub precision: Option<Precision>,
    /// `auto` (default), `cuda` or `cpu`.
    pub device: Option<Device>,
    /// Write a checkpoint every this many steps. Default: never.
    pub checkpoint_every: Option<i64>,
    /// Print a metrics line every this many steps. Default `10`.
    pub log_every: Option<i64>,
    /// Deterministic kernels and batch order, so runs are repeatable. Default `false`.
    pub deterministic: Option<bool>,
}

/// `processes_per_host`: `"gpu"` or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ProcessesPerHost {
    /// `"gpu"`: one process per GPU of the trainer group's instance type (at least one).
    Gpus(PerGpu),
    /// This many processes on every trainer host.
    Count(i64),
}

// By hand rather than `untagged`, so that a wrong value says what fits instead of "did not match
// any variant".
impl<'de> Deserialize<'de> for ProcessesPerHost {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ProcessesPerHost;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`\"gpu\"` or a number of processes")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(ProcessesPerHost::Count(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(ProcessesPerHost::Count(
                    i64::try_from(n).unwrap_or(i64::MAX),
                ))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                if s == "gpu" {
                    Ok(ProcessesPerHost::Gpus(PerGpu::Gpu))
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(s), &self))
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The word `"gpu"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PerGpu {
    /// One process per GPU.
    Gpu,
}

/// `[sagemaker.vpc]`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawVpc {
    /// Subnet ids (1 to 16).
    pub subnets: Vec<String>,
    /// Security group ids (1 to 5).
    pub security_group_ids: Vec<String>,
}

/// `[[sagemaker.metric]]`: an extra metric SageMaker scrapes from the logs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    /// Metric name, 1 to 255 characters.
    pub name: String,
    /// A regex whose first capture group is the value.
    pub regex: String,
}

/// A hyperparameter value. SageMaker passes every value as a string.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum HyperValue {
    /// A string.
    String(String),
    /// An integer.
    Integer(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// `[sagemaker]`: how the job runs on Amazon SageMaker.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSageMaker {
    /// AWS region, e.g. `us-east-1`.
    pub region: String,
    /// IAM role SageMaker assumes, `arn:aws:iam::<account>:role/<name>`.
    pub role_arn: String,
    /// Your own training image (built from the rendered Dockerfile), at most 255 characters.
    /// Required with the built-in trainer. A script-mode job without it runs on AWS's
    /// prebuilt PyTorch training image for `framework_version` and `py_version`, with the
    /// script uploaded as a source bundle: nothing to build.
    pub image_uri: Option<String>,
    /// Script mode without `image_uri`: the PyTorch release of AWS's training image, e.g.
    /// `"2.8.0"` or `"2.8"`. Default `"2.8.0"`, the newest SageMaker Python SDK 2.x knows.
    pub framework_version: Option<String>,
    /// Script mode without `image_uri`: the image's Python, e.g. `"py312"`. Default: the
    /// one `framework_version` is published with.
    pub py_version: Option<String>,
    /// Script mode without `image_uri`: the `s3://bucket/prefix` the source bundle is uploaded
    /// under (as `<prefix>/<job name>/source/sourcedir.tar.gz`). Default: the bucket of
    /// `output_path`, as the SageMaker Python SDK does.
    pub code_location: Option<String>,
    /// `s3://` prefix for the model artifacts.
    pub output_path: String,
    /// `File` (default), `Pipe` or `FastFile`.
    pub input_mode: Option<InputMode>,
    /// Storage volume per instance in GB. Default `30`.
    pub volume_gb: Option<i64>,
    /// Stop the job after this long, e.g. `"2h"`, `"90m"`, `"1d"`. At most 28 days. Default `"1d"`.
    pub max_runtime: Option<String>,
    /// Keep instances warm for this long after the job (warm pools), e.g. `"10m"`. Not
    /// allowed with more than one instance group.
    pub keep_alive: Option<String>,
    /// Tags on the training job. hetgen adds `hetgen:version`, `hetgen:spec-sha256` and
    /// `hetgen:job`.
    pub tags: Option<BTreeMap<String, String>>,
    /// Environment variables for every instance (at most 100).
    pub environment: Option<BTreeMap<String, String>>,
    /// Hyperparameters, passed to the container as strings (at most 100).
    pub hyperparameters: Option<BTreeMap<String, HyperValue>>,
    /// Run the instances in your VPC.
    pub vpc: Option<RawVpc>,
    /// Encrypt traffic between the job's instances. Default `false`.
    pub inter_container_encryption: Option<bool>,
    /// `s3://` prefix for checkpoints: each job syncs `/opt/ml/checkpoints` with
    /// `<checkpoint_uri>/<job name>/`, so a new job starts from none unless `hetgen deploy
    /// --resume-from JOB` continues JOB.
    pub checkpoint_uri: Option<String>,
    /// Extra metrics besides the ones hetgen defines.
    pub metric: Option<Vec<RawMetric>>,
}
