//! Building AWS clients the way the AWS CLI would.

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::config::ProvideCredentials;

use crate::DeployError;

/// A region where the AWS Price List API has an endpoint.
const PRICE_LIST_REGION: &str = "us-east-1";

/// Where and as whom to connect. Unset fields fall back to the standard AWS environment
/// (`AWS_PROFILE`, `AWS_REGION`, `AWS_ENDPOINT_URL`, the config and credentials files, …).
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// A named profile from the AWS config files.
    pub profile: Option<String>,
    /// The region; else the spec's, else the environment's.
    pub region: Option<String>,
    /// An endpoint to use instead of SageMaker's (an emulator, a VPC endpoint).
    pub endpoint_url: Option<String>,
}

/// One AWS configuration (credential chain, region, endpoint, retry policy) and the clients
/// built from it: SageMaker, S3 for the source bundle, CloudWatch Logs for a job's output. One
/// credentials cache serves them all, so a chain that costs a call (a role to assume, a
/// `credential_process`) is paid once.
#[derive(Debug, Clone)]
pub struct Aws {
    config: aws_config::SdkConfig,
}

impl Aws {
    /// Resolves the configuration for `conn`, with credentials resolved up front so a missing
    /// credential is reported as such rather than as a failed request.
    pub async fn connect(conn: &Connection, spec_region: Option<&str>) -> Result<Aws, DeployError> {
        Ok(Aws {
            config: config(conn, spec_region).await?,
        })
    }

    /// SageMaker.
    pub fn sagemaker(&self) -> Client {
        Client::new(&self.config)
    }

    /// S3. With an endpoint of one's own (an emulator, a VPC endpoint) buckets are addressed by
    /// path, since such an endpoint has no per-bucket host names.
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let s3 = aws_sdk_s3::config::Builder::from(&self.config)
            .force_path_style(self.config.endpoint_url().is_some())
            .build();
        aws_sdk_s3::Client::from_conf(s3)
    }

    /// CloudWatch Logs.
    pub fn logs(&self) -> aws_sdk_cloudwatchlogs::Client {
        aws_sdk_cloudwatchlogs::Client::new(&self.config)
    }

    /// The AWS Price List API. It answers in a few regions only, whatever region a job runs in
    /// (prices are filtered by region instead): its client talks to us-east-1's endpoint unless
    /// an endpoint of one's own is set.
    pub fn pricing(&self) -> aws_sdk_pricing::Client {
        let mut pricing = aws_sdk_pricing::config::Builder::from(&self.config);
        if self.config.endpoint_url().is_none() {
            pricing = pricing.region(Region::new(PRICE_LIST_REGION));
        }
        aws_sdk_pricing::Client::from_conf(pricing.build())
    }
}

async fn config(
    conn: &Connection,
    spec_region: Option<&str>,
) -> Result<aws_config::SdkConfig, DeployError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        // Throttling and transient faults are retried with exponential backoff (a followed
        // job's logs poll CloudWatch's per-account rate of GetLogEvents).
        .retry_config(RetryConfig::standard().with_max_attempts(6));
    if let Some(profile) = &conn.profile {
        loader = loader.profile_name(profile);
    }
    if let Some(region) = conn.region.as_deref().or(spec_region) {
        loader = loader.region(Region::new(region.to_owned()));
    }
    if let Some(url) = &conn.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(DeployError::NoRegion);
    }
    let provider = config
        .credentials_provider()
        .ok_or(DeployError::NoCredentials {
            detail: "no credential provider is configured".to_owned(),
        })?;
    provider
        .provide_credentials()
        .await
        .map_err(|e| DeployError::NoCredentials {
            detail: error_chain(&e),
        })?;
    Ok(config)
}

/// `e` and its sources, joined: the SDK's top-level messages alone rarely say why.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
