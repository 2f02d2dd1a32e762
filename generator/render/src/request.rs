//! The CreateTrainingJob request, typed after the SageMaker API model (`service-2.json`), so
//! the rendered JSON has exactly the service's member names and nothing else.

use std::collections::BTreeMap;

use hetgen_spec::Job;
use hetgen_spec::model::{
    Distribution, InputMode, JOB_TAG, S3Distribution, SPEC_TAG, SageMaker, VERSION_TAG,
};
use serde::Serialize;

/// The request's file in the job's folder: `hetgen render` writes it, `hetgen deploy` sends it.
pub const REQUEST_FILE: &str = "create-training-job.json";

/// Hyperparameters the SageMaker Python SDK sets for a distribution strategy; the training
/// toolkit reads them to launch the strategy on the named group only.
fn distribution_hyperparameters(job: &Job) -> BTreeMap<String, String> {
    let trainer = job.trainer_group();
    let mut hps = BTreeMap::new();
    let Some(strategy) = trainer.distribution else {
        return hps;
    };
    let enabled = match strategy {
        Distribution::TorchDistributed => "sagemaker_torch_distributed_enabled",
        Distribution::Mpi => "sagemaker_mpi_enabled",
    };
    hps.insert(enabled.to_owned(), "true".to_owned());
    if job.groups.len() > 1 {
        let groups = serde_json::to_string(&[&trainer.name]).expect("strings serialize");
        hps.insert("sagemaker_distribution_instance_groups".to_owned(), groups);
    }
    hps
}

/// The hyperparameters the job passes: the spec's, then the distribution strategy's; on AWS's
/// PyTorch image, the script-mode ones SDK 2.x's `PyTorch` estimator sets instead, every value
/// JSON-encoded as the SDK encodes it (the toolkit decodes them).
pub fn hyperparameters(job: &Job, sm: &SageMaker) -> BTreeMap<String, String> {
    let mut hps = sm.hyperparameters.clone();
    match &sm.framework {
        Some(framework) => {
            use hetgen_spec::framework::{
                JOB_NAME_HP, LOG_LEVEL_HP, PROGRAM, PROGRAM_HP, REGION_HP, SUBMIT_DIRECTORY_HP,
            };
            let json = |s: &str| serde_json::to_string(s).expect("strings serialize");
            hps.insert(PROGRAM_HP.to_owned(), json(PROGRAM));
            hps.insert(
                SUBMIT_DIRECTORY_HP.to_owned(),
                json(&framework.submit_directory(&job.name)),
            );
            // logging.INFO, the SDK's default `container_log_level`.
            hps.insert(LOG_LEVEL_HP.to_owned(), "20".to_owned());
            hps.insert(JOB_NAME_HP.to_owned(), json(&job.name));
            hps.insert(REGION_HP.to_owned(), json(&sm.region));
        }
        None => hps.extend(distribution_hyperparameters(job)),
    }
    hps
}

/// The Environment of the job: the spec's, plus, for a script in the spec's own image,
/// `SAGEMAKER_PROGRAM` (the script in `/opt/ml/code`, SageMaker's name for a script-mode entry
/// point) unless the spec sets it. On AWS's image the toolkit reads `sagemaker_program`.
pub fn environment(job: &Job, sm: &SageMaker) -> BTreeMap<String, String> {
    let mut env = sm.environment.clone();
    if let Some(script) = job.trainer.script()
        && sm.framework.is_none()
    {
        env.entry(hetgen_spec::model::PROGRAM_VAR.to_owned())
            .or_insert_with(|| script.script.clone());
    }
    env
}

/// The tags on every job: the spec's, then hetgen's ([`hetgen_spec::model::HETGEN_TAGS`]): its
/// version, the spec's hash and the spec's job name.
pub fn tags(job: &Job, sm: &SageMaker, spec_sha256: &str) -> Vec<Tag> {
    let tag = |key: &str, value: &str| Tag {
        key: key.to_owned(),
        value: value.to_owned(),
    };
    let hetgen = [
        tag(VERSION_TAG, env!("CARGO_PKG_VERSION")),
        tag(SPEC_TAG, spec_sha256),
        tag(JOB_TAG, &job.name),
    ];
    sm.tags
        .iter()
        .map(|(k, v)| tag(k, v))
        .chain(hetgen)
        .collect()
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CreateTrainingJob {
    pub training_job_name: String,
    pub role_arn: String,
    pub algorithm_specification: AlgorithmSpecification,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hyper_parameters: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub input_data_config: Vec<Channel>,
    pub output_data_config: OutputDataConfig,
    pub resource_config: ResourceConfig,
    pub stopping_condition: StoppingCondition,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpc_config: Option<VpcConfig>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub enable_inter_container_traffic_encryption: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_config: Option<CheckpointConfig>,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AlgorithmSpecification {
    pub training_image: String,
    pub training_input_mode: InputMode,
    /// Absent when there are none (a script-mode job without `[[sagemaker.metric]]`), as the
    /// SDKs send it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metric_definitions: Vec<MetricDefinition>,
    /// On AWS's PyTorch image, `true`: SDK 2.x's `PyTorch` estimator turns SageMaker Metrics'
    /// time series on for every PyTorch release since 1.3, so the request says so too.
    #[serde(
        rename = "EnableSageMakerMetricsTimeSeries",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_sagemaker_metrics_time_series: Option<bool>,
    /// On AWS's PyTorch image, hetgen's start of the image
    /// ([`hetgen_spec::framework::CONTAINER_ENTRYPOINT`]), so that a stop reaches the script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_entrypoint: Option<Vec<&'static str>>,
    /// With it, what SageMaker passes the image by default (`train`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_arguments: Option<Vec<&'static str>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct MetricDefinition {
    pub name: String,
    pub regex: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Channel {
    pub channel_name: String,
    pub data_source: DataSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_mode: Option<InputMode>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct DataSource {
    pub s3_data_source: S3DataSource,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct S3DataSource {
    pub s3_data_type: &'static str,
    pub s3_uri: String,
    pub s3_data_distribution_type: S3Distribution,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instance_group_names: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct OutputDataConfig {
    pub s3_output_path: String,
}

/// One group renders the classic `InstanceType`/`InstanceCount` form (SageMaker then names the
/// group `homogeneousCluster`); several render `InstanceGroups`, which excludes the classic
/// fields and warm pools.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResourceConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_count: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instance_groups: Vec<InstanceGroup>,
    #[serde(rename = "VolumeSizeInGB")]
    pub volume_size_in_gb: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive_period_in_seconds: Option<u64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceGroup {
    pub instance_type: String,
    pub instance_count: u32,
    pub instance_group_name: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct StoppingCondition {
    pub max_runtime_in_seconds: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct VpcConfig {
    pub security_group_ids: Vec<String>,
    pub subnets: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckpointConfig {
    pub s3_uri: String,
    pub local_path: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    pub key: String,
    pub value: String,
}

/// The request for `job`, which must have a `[sagemaker]` section.
pub fn create_training_job(job: &Job, sm: &SageMaker, spec_sha256: &str) -> CreateTrainingJob {
    CreateTrainingJob {
        training_job_name: job.name.clone(),
        role_arn: sm.role_arn.clone(),
        algorithm_specification: AlgorithmSpecification {
            training_image: sm.image_uri.clone(),
            training_input_mode: sm.input_mode,
            metric_definitions: sm
                .metrics
                .iter()
                .map(|m| MetricDefinition {
                    name: m.name.clone(),
                    regex: m.regex.clone(),
                })
                .collect(),
            enable_sagemaker_metrics_time_series: sm.framework.as_ref().map(|_| true),
            container_entrypoint: sm
                .framework
                .as_ref()
                .map(|_| hetgen_spec::framework::CONTAINER_ENTRYPOINT.to_vec()),
            container_arguments: sm
                .framework
                .as_ref()
                .map(|_| hetgen_spec::framework::CONTAINER_ARGUMENTS.to_vec()),
        },
        hyper_parameters: hyperparameters(job, sm),
        input_data_config: input_data_config(job),
        output_data_config: OutputDataConfig {
            s3_output_path: sm.output_path.clone(),
        },
        resource_config: resource_config(job, sm),
        stopping_condition: StoppingCondition {
            max_runtime_in_seconds: sm.max_runtime_s,
        },
        environment: environment(job, sm),
        vpc_config: sm.vpc.as_ref().map(|v| VpcConfig {
            security_group_ids: v.security_group_ids.clone(),
            subnets: v.subnets.clone(),
        }),
        enable_inter_container_traffic_encryption: sm.inter_container_encryption,
        checkpoint_config: sm
            .checkpoint_uri_of(&job.name)
            .map(|s3_uri| CheckpointConfig {
                s3_uri,
                local_path: "/opt/ml/checkpoints",
            }),
        tags: tags(job, sm, spec_sha256),
    }
}

/// The cluster: the InstanceGroups form for more than one group, else the single-type form
/// (the only one a warm pool's keep-alive is allowed with).
fn resource_config(job: &Job, sm: &SageMaker) -> ResourceConfig {
    if job.groups.len() > 1 {
        ResourceConfig {
            instance_type: None,
            instance_count: None,
            instance_groups: job
                .groups
                .iter()
                .map(|g| InstanceGroup {
                    instance_type: g.instance_type.clone(),
                    instance_count: g.count,
                    instance_group_name: g.name.clone(),
                })
                .collect(),
            volume_size_in_gb: sm.volume_gb,
            keep_alive_period_in_seconds: None,
        }
    } else {
        let only = &job.groups[0];
        ResourceConfig {
            instance_type: Some(only.instance_type.clone()),
            instance_count: Some(only.count),
            instance_groups: Vec::new(),
            volume_size_in_gb: sm.volume_gb,
            keep_alive_period_in_seconds: sm.keep_alive_s,
        }
    }
}

fn input_data_config(job: &Job) -> Vec<Channel> {
    let hetero = job.groups.len() > 1;
    job.channels
        .iter()
        .map(|c| Channel {
            channel_name: c.name.clone(),
            data_source: DataSource {
                s3_data_source: S3DataSource {
                    s3_data_type: "S3Prefix",
                    s3_uri: c.uri.clone(),
                    s3_data_distribution_type: c.distribution,
                    // Group names exist only in the InstanceGroups form.
                    instance_group_names: if hetero {
                        c.instance_groups.clone()
                    } else {
                        Vec::new()
                    },
                },
            },
            content_type: c.content_type.clone(),
            input_mode: c.input_mode,
        })
        .collect()
}
