//! The rendered `create-training-job.json`, sent as it is.
//!
//! hetgen submits exactly what `hetgen render` wrote: the JSON's members map one to one onto the
//! SDK's builders. Only what is the submission's own changes on the way: the job name (the
//! unique suffix), the job token in Environment, and the checkpoint location that goes with the
//! name (or with the job a submission continues).

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::operation::create_training_job::builders::CreateTrainingJobFluentBuilder;
use aws_sdk_sagemaker::types::{
    AlgorithmSpecification, Channel, CheckpointConfig, DataSource, InstanceGroup, MetricDefinition,
    OutputDataConfig, ResourceConfig, S3DataDistribution, S3DataSource, S3DataType,
    StoppingCondition, Tag, TrainingInputMode, TrainingInstanceType, VpcConfig,
};
use hetgen_spec::framework::{JOB_NAME_HP, SUBMIT_DIRECTORY_HP, bundle_uri, bundle_uri_parts};
use serde_json::{Map, Value};

use crate::DeployError;

/// A JSON-encoded string hyperparameter's value (`"\"s3://…\""` → `s3://…`).
fn decoded(value: Option<&Value>) -> Option<String> {
    serde_json::from_str(value?.as_str()?).ok()
}

/// A parsed `create-training-job.json`.
#[derive(Debug, Clone)]
pub struct Request(Map<String, Value>);

impl Request {
    /// Parses the rendered request.
    pub fn parse(text: &str) -> Result<Self, DeployError> {
        match serde_json::from_str(text) {
            Ok(Value::Object(map)) => Ok(Request(map)),
            Ok(_) => Err(bad("the request is not a JSON object")),
            Err(e) => Err(bad(&e.to_string())),
        }
    }

    /// The `TrainingJobName` as rendered.
    pub fn name(&self) -> &str {
        self.0
            .get("TrainingJobName")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The same request under another job name. A job on AWS's PyTorch image names itself in
    /// two hyperparameters too, as SDK 2.x writes them: `sagemaker_job_name`, and
    /// `sagemaker_submit_directory`, where the bundle goes: the bundle of the new name under the
    /// same code location ([`bundle_uri`]).
    pub fn renamed(&self, name: &str) -> Self {
        let old = self.name().to_owned();
        let mut map = self.0.clone();
        map.insert("TrainingJobName".to_owned(), Value::String(name.to_owned()));
        if let Some(Value::Object(hps)) = map.get_mut("HyperParameters") {
            let json =
                |s: &str| Value::String(serde_json::to_string(s).expect("strings serialize"));
            if hps.contains_key(JOB_NAME_HP) {
                hps.insert(JOB_NAME_HP.to_owned(), json(name));
            }
            let moved = decoded(hps.get(SUBMIT_DIRECTORY_HP)).and_then(|uri| {
                let (code_location, job) = bundle_uri_parts(&uri)?;
                (job == old).then(|| bundle_uri(code_location, name))
            });
            if let Some(uri) = moved {
                hps.insert(SUBMIT_DIRECTORY_HP.to_owned(), json(&uri));
            }
        }
        Request(map)
    }

    /// The same request with its checkpoints synced to `s3_uri` (`CheckpointConfig`, at the
    /// usual `/opt/ml/checkpoints`).
    pub fn with_checkpoint_uri(&self, s3_uri: &str) -> Self {
        let mut map = self.0.clone();
        let config = map
            .entry("CheckpointConfig".to_owned())
            .or_insert_with(|| serde_json::json!({"LocalPath": "/opt/ml/checkpoints"}));
        if let Value::Object(config) = config {
            config.insert("S3Uri".to_owned(), Value::String(s3_uri.to_owned()));
        }
        Request(map)
    }

    /// Where the source bundle of a job on AWS's PyTorch image goes (the decoded
    /// `sagemaker_submit_directory`), `None` for a job on an image of its own.
    pub fn submit_directory(&self) -> Option<String> {
        let hps = self.0.get("HyperParameters")?.as_object()?;
        decoded(hps.get(SUBMIT_DIRECTORY_HP)).filter(|uri| uri.starts_with("s3://"))
    }

    /// The same request with `key=value` added to the job's Environment (every instance's).
    ///
    /// `deploy` uses it for the job token: a secret generated per submission must not sit in a
    /// rendered file that may be committed.
    pub fn with_environment(&self, key: &str, value: &str) -> Self {
        let mut map = self.0.clone();
        let environment = map
            .entry("Environment".to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(environment) = environment {
            environment.insert(key.to_owned(), Value::String(value.to_owned()));
        }
        Request(map)
    }

    /// The request as pretty JSON (what `deploy --dry-run` prints).
    pub fn as_json(&self) -> String {
        serde_json::to_string_pretty(&self.0).expect("JSON serializes")
    }

    /// The SDK call carrying every member of the request.
    pub fn to_call(&self, client: &Client) -> Result<CreateTrainingJobFluentBuilder, DeployError> {
        let r = &self.0;
        let mut call = client
            .create_training_job()
            .training_job_name(self.name())
            .role_arn(string(r, "RoleArn")?)
            .algorithm_specification(algorithm(object(r, "AlgorithmSpecification")?)?)
            .output_data_config(
                OutputDataConfig::builder()
                    .s3_output_path(string(object(r, "OutputDataConfig")?, "S3OutputPath")?)
                    .build(),
            )
            .resource_config(resources(object(r, "ResourceConfig")?)?)
            .stopping_condition(
                StoppingCondition::builder()
                    .max_runtime_in_seconds(int(
                        object(r, "StoppingCondition")?,
                        "MaxRuntimeInSeconds",
                    )? as i32)
                    .build(),
            );
        for (k, v) in string_map(r, "HyperParameters")? {
            call = call.hyper_parameters(k, v);
        }
        for (k, v) in string_map(r, "Environment")? {
            call = call.environment(k, v);
        }
        for c in array(r, "InputDataConfig")? {
            call = call.input_data_config(channel(as_object(c)?)?);
        }
        for t in array(r, "Tags")? {
            let t = as_object(t)?;
            call = call.tags(
                Tag::builder()
                    .key(string(t, "Key")?)
                    .value(string(t, "Value")?)
                    .build(),
            );
        }
        if let Some(v) = r.get("VpcConfig") {
            let v = as_object(v)?;
            let mut vpc = VpcConfig::builder();
            for id in array(v, "SecurityGroupIds")? {
                vpc = vpc.security_group_ids(as_str(id)?);
            }
            for id in array(v, "Subnets")? {
                vpc = vpc.subnets(as_str(id)?);
            }
            call = call.vpc_config(vpc.build());
        }
        if let Some(Value::Bool(b)) = r.get("EnableInterContainerTrafficEncryption") {
            call = call.enable_inter_container_traffic_encryption(*b);
        }
        if let Some(c) = r.get("CheckpointConfig") {
            let c = as_object(c)?;
            call = call.checkpoint_config(
                CheckpointConfig::builder()
                    .s3_uri(string(c, "S3Uri")?)
                    .set_local_path(
                        c.get("LocalPath")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    )
                    .build(),
            );
        }
        Ok(call)
    }
}

fn algorithm(a: &Map<String, Value>) -> Result<AlgorithmSpecification, DeployError> {
    let mut spec = AlgorithmSpecification::builder()
        .training_image(string(a, "TrainingImage")?)
        .training_input_mode(TrainingInputMode::from(string(a, "TrainingInputMode")?));
    for m in array(a, "MetricDefinitions")? {
        let m = as_object(m)?;
        spec = spec.metric_definitions(
            MetricDefinition::builder()
                .name(string(m, "Name")?)
                .regex(string(m, "Regex")?)
                .build(),
        );
    }
    for item in array(a, "ContainerEntrypoint")? {
        spec = spec.container_entrypoint(as_str(item)?);
    }
    for item in array(a, "ContainerArguments")? {
        spec = spec.container_arguments(as_str(item)?);
    }
    if let Some(Value::Bool(on)) = a.get("EnableSageMakerMetricsTimeSeries") {
        spec = spec.enable_sage_maker_metrics_time_series(*on);
    }
    Ok(spec.build())
}

fn resources(rc: &Map<String, Value>) -> Result<ResourceConfig, DeployError> {
    let mut b = ResourceConfig::builder().volume_size_in_gb(int(rc, "VolumeSizeInGB")? as i32);
    if let Some(t) = rc.get("InstanceType") {
        b = b
            .instance_type(TrainingInstanceType::from(as_str(t)?))
            .instance_count(int(rc, "InstanceCount")? as i32);
    }
    for g in array(rc, "InstanceGroups")? {
        let g = as_object(g)?;
        b = b.instance_groups(
            InstanceGroup::builder()
                .instance_type(TrainingInstanceType::from(string(g, "InstanceType")?))
                .instance_count(int(g, "InstanceCount")? as i32)
                .instance_group_name(string(g, "InstanceGroupName")?)
                .build(),
        );
    }
    if let Some(k) = rc.get("KeepAlivePeriodInSeconds") {
        b = b.keep_alive_period_in_seconds(
            k.as_i64().ok_or_else(|| bad("KeepAlivePeriodInSeconds"))? as i32,
        );
    }
    Ok(b.build())
}

fn channel(c: &Map<String, Value>) -> Result<Channel, DeployError> {
    let s3 = object(object(c, "DataSource")?, "S3DataSource")?;
    let mut source = S3DataSource::builder()
        .s3_data_type(S3DataType::from(string(s3, "S3DataType")?))
        .s3_uri(string(s3, "S3Uri")?)
        .s3_data_distribution_type(S3DataDistribution::from(string(
            s3,
            "S3DataDistributionType",
        )?));
    for g in array(s3, "InstanceGroupNames")? {
        source = source.instance_group_names(as_str(g)?);
    }
    let mut channel = Channel::builder()
        .channel_name(string(c, "ChannelName")?)
        .data_source(DataSource::builder().s3_data_source(source.build()).build());
    if let Some(t) = c.get("ContentType") {
        channel = channel.content_type(as_str(t)?);
    }
    if let Some(m) = c.get("InputMode") {
        channel = channel.input_mode(TrainingInputMode::from(as_str(m)?));
    }
    Ok(channel.build())
}

fn bad(message: &str) -> DeployError {
    DeployError::Request {
        message: message.to_owned(),
    }
}

fn object<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a Map<String, Value>, DeployError> {
    m.get(key)
        .ok_or_else(|| bad(&format!("`{key}` is missing")))
        .and_then(as_object)
}

fn as_object(v: &Value) -> Result<&Map<String, Value>, DeployError> {
    v.as_object().ok_or_else(|| bad("expected an object"))
}

fn string<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a str, DeployError> {
    m.get(key)
        .ok_or_else(|| bad(&format!("`{key}` is missing")))
        .and_then(as_str)
}

fn as_str(v: &Value) -> Result<&str, DeployError> {
    v.as_str().ok_or_else(|| bad("expected a string"))
}

fn int(m: &Map<String, Value>, key: &str) -> Result<i64, DeployError> {
    m.get(key)
        .and_then(Value::as_i64)
        .filter(|n| i32::try_from(*n).is_ok())
        .ok_or_else(|| bad(&format!("`{key}` is not a 32-bit integer")))
}

fn array<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a [Value], DeployError> {
    match m.get(key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(bad(&format!("`{key}` is not a list"))),
    }
}

fn string_map(m: &Map<String, Value>, key: &str) -> Result<Vec<(String, String)>, DeployError> {
    match m.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), as_str(v)?.to_owned())))
            .collect(),
        Some(_) => Err(bad(&format!("`{key}` is not a map"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_is_added_without_touching_the_rest() {
        let request =
            Request::parse(r#"{"TrainingJobName": "a", "Environment": {"X": "1"}}"#).unwrap();
        let with = request.with_environment("HETGEN_JOB_TOKEN", "t0k3n");
        assert_eq!(with.0["Environment"]["X"], "1");
        assert_eq!(with.0["Environment"]["HETGEN_JOB_TOKEN"], "t0k3n");
        assert!(request.0["Environment"].get("HETGEN_JOB_TOKEN").is_none());
        let bare = Request::parse(r#"{"TrainingJobName": "a"}"#).unwrap();
        assert_eq!(bare.with_environment("K", "v").0["Environment"]["K"], "v");
    }

    #[test]
    fn renaming_a_job_on_aws_s_image_moves_its_bundle_with_it() {
        let request = Request::parse(
            r#"{"TrainingJobName": "digits", "HyperParameters": {
                "sagemaker_job_name": "\"digits\"",
                "sagemaker_submit_directory": "\"s3://b/code/digits/source/sourcedir.tar.gz\"",
                "epochs": "3"}}"#,
        )
        .unwrap();
        assert_eq!(
            request.submit_directory().as_deref(),
            Some("s3://b/code/digits/source/sourcedir.tar.gz")
        );
        let renamed = request.renamed("digits-20261204-120000-ab12");
        let hps = &renamed.0["HyperParameters"];
        assert_eq!(hps["sagemaker_job_name"], "\"digits-20261204-120000-ab12\"");
        assert_eq!(
            renamed.submit_directory().as_deref(),
            Some("s3://b/code/digits-20261204-120000-ab12/source/sourcedir.tar.gz")
        );
        assert_eq!(hps["epochs"], "3");
        assert_eq!(renamed.name(), "digits-20261204-120000-ab12");

        // A job on its own image has neither.
        let own =
            Request::parse(r#"{"TrainingJobName": "a", "HyperParameters": {"x": "1"}}"#).unwrap();
        assert_eq!(own.submit_directory(), None);
        assert_eq!(own.renamed("b").0["HyperParameters"]["x"], "1");
    }
}
