//! Submit, describe, stop and list training jobs (the CLI follows them: `follow.rs`).

use std::collections::BTreeMap;

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::operation::describe_training_job::DescribeTrainingJobOutput;
use aws_sdk_sagemaker::primitives::{DateTime, DateTimeFormat};
use aws_sdk_sagemaker::types::{SortBy, SortOrder};
use serde::Serialize;

use crate::request::Request;
use crate::{DeployError, VERSION_TAG};

/// Submits `request`; returns the job's ARN.
pub async fn submit(client: &Client, request: &Request) -> Result<String, DeployError> {
    let name = request.name().to_owned();
    let out = request
        .to_call(client)?
        .send()
        .await
        .map_err(|e| DeployError::from_sdk("CreateTrainingJob", &name, e))?;
    Ok(text(out.training_job_arn()))
}

/// One instance group as SageMaker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupStatus {
    pub name: String,
    pub instance_type: String,
    pub count: i32,
}

/// One channel as SageMaker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChannelStatus {
    pub name: String,
    pub uri: String,
    pub instance_groups: Vec<String>,
}

/// A job as DescribeTrainingJob reports it (`hetgen status --format json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    pub name: String,
    pub arn: String,
    /// InProgress, Completed, Failed, Stopping or Stopped.
    pub status: String,
    /// Starting, Downloading, Training, Uploading, Completed, …
    pub secondary_status: Option<String>,
    pub failure_reason: Option<String>,
    pub created: Option<String>,
    pub instance_groups: Vec<GroupStatus>,
    pub channels: Vec<ChannelStatus>,
    /// Where the job's checkpoints are synced (`CheckpointConfig.S3Uri`), if anywhere.
    pub checkpoint_uri: Option<String>,
}

impl JobStatus {
    /// Completed, Failed or Stopped: the job will not change again.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "Completed" | "Failed" | "Stopped")
    }
}

/// The SDK reports every member as optional; a missing one reads as empty.
fn text(s: Option<&str>) -> String {
    s.unwrap_or_default().to_owned()
}

fn time(t: Option<&DateTime>) -> Option<String> {
    t.and_then(|t| t.fmt(DateTimeFormat::DateTime).ok())
}

impl From<DescribeTrainingJobOutput> for JobStatus {
    fn from(out: DescribeTrainingJobOutput) -> Self {
        let resources = out.resource_config();
        let mut instance_groups: Vec<GroupStatus> = resources
            .map(|r| r.instance_groups())
            .unwrap_or_default()
            .iter()
            .map(|g| GroupStatus {
                name: text(g.instance_group_name()),
                instance_type: text(g.instance_type().map(|t| t.as_str())),
                count: g.instance_count().unwrap_or_default(),
            })
            .collect();
        if instance_groups.is_empty()
            && let Some(r) = resources
            && let Some(t) = r.instance_type()
        {
            instance_groups.push(GroupStatus {
                name: "homogeneousCluster".to_owned(),
                instance_type: t.as_str().to_owned(),
                count: r.instance_count().unwrap_or(1),
            });
        }
        let channels = out
            .input_data_config()
            .iter()
            .map(|c| {
                let s3 = c.data_source().and_then(|d| d.s3_data_source());
                ChannelStatus {
                    name: text(c.channel_name()),
                    uri: text(s3.and_then(|s| s.s3_uri())),
                    instance_groups: s3
                        .map(|s| s.instance_group_names().to_vec())
                        .unwrap_or_default(),
                }
            })
            .collect();
        JobStatus {
            name: out.training_job_name().unwrap_or_default().to_owned(),
            arn: out.training_job_arn().unwrap_or_default().to_owned(),
            status: out
                .training_job_status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            secondary_status: out.secondary_status().map(|s| s.as_str().to_owned()),
            failure_reason: out.failure_reason().map(str::to_owned),
            created: time(out.creation_time()),
            instance_groups,
            channels,
            checkpoint_uri: out
                .checkpoint_config()
                .and_then(|c| c.s3_uri())
                .map(str::to_owned),
        }
    }
}

/// DescribeTrainingJob.
pub async fn describe(client: &Client, name: &str) -> Result<JobStatus, DeployError> {
    client
        .describe_training_job()
        .training_job_name(name)
        .send()
        .await
        .map(JobStatus::from)
        .map_err(|e| DeployError::from_sdk("DescribeTrainingJob", name, e))
}

/// The tags of the job `name` (ListTags of its `arn`), by key.
pub async fn tags(
    client: &Client,
    name: &str,
    arn: &str,
) -> Result<BTreeMap<String, String>, DeployError> {
    let out = client
        .list_tags()
        .resource_arn(arn)
        .send()
        .await
        .map_err(|e| DeployError::from_sdk("ListTags", name, e))?;
    Ok(out
        .tags()
        .iter()
        .map(|t| (text(t.key()), text(t.value())))
        .collect())
}

/// StopTrainingJob: SageMaker sends SIGTERM to every instance and gives them 120 s.
pub async fn stop(client: &Client, name: &str) -> Result<(), DeployError> {
    client
        .stop_training_job()
        .training_job_name(name)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| DeployError::from_sdk("StopTrainingJob", name, e))
}

/// A job in `hetgen list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobSummary {
    pub name: String,
    pub status: String,
    pub created: Option<String>,
    /// The hetgen version that started it.
    pub hetgen_version: String,
}

/// The most recent jobs (newest first, up to `max` looked at) that carry hetgen's version tag.
pub async fn list(client: &Client, max: i32) -> Result<Vec<JobSummary>, DeployError> {
    let out = client
        .list_training_jobs()
        .sort_by(SortBy::CreationTime)
        .sort_order(SortOrder::Descending)
        .max_results(max.clamp(1, 100))
        .send()
        .await
        .map_err(|e| DeployError::from_sdk("ListTrainingJobs", "", e))?;
    let mut jobs = Vec::new();
    for job in out.training_job_summaries() {
        let name = text(job.training_job_name());
        let mut tags = tags(client, &name, &text(job.training_job_arn())).await?;
        if let Some(hetgen_version) = tags.remove(VERSION_TAG) {
            jobs.push(JobSummary {
                name,
                status: text(job.training_job_status().map(|s| s.as_str())),
                created: time(job.creation_time()),
                hetgen_version,
            });
        }
    }
    Ok(jobs)
}
