//! What can go wrong talking to SageMaker, with the fix for each.

use aws_sdk_sagemaker::error::{ProvideErrorMetadata, SdkError};

use crate::connect::error_chain;

/// A deploy, status, stop or list call failed.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum DeployError {
    /// No credentials in the default chain or the chosen profile.
    #[error("no AWS credentials found ({detail})")]
    #[diagnostic(
        code("hetgen::aws::no-credentials"),
        help(
            "configure credentials (`aws configure`, `AWS_PROFILE`, or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`), or pass `--profile`"
        )
    )]
    NoCredentials { detail: String },
    /// No region anywhere.
    #[error("no AWS region is set")]
    #[diagnostic(
        code("hetgen::aws::no-region"),
        help("set `region` in `[sagemaker]`, pass `--region`, or set `AWS_REGION`")
    )]
    NoRegion,
    /// The caller may not do this.
    #[error("access denied: {message}")]
    #[diagnostic(
        code("hetgen::aws::access-denied"),
        help(
            "the caller needs `{service}:{operation}` (and `iam:PassRole` on the job's role to create jobs)"
        )
    )]
    AccessDenied {
        service: &'static str,
        operation: String,
        message: String,
    },
    /// CreateTrainingJob with a name that exists.
    #[error("a training job named `{name}` already exists")]
    #[diagnostic(
        code("hetgen::aws::name-in-use"),
        help(
            "job names are unique per account and region: drop `--name`/`fixed_name` to get a unique suffix"
        )
    )]
    NameInUse { name: String },
    /// An account quota.
    #[error("SageMaker resource limit exceeded: {message}")]
    #[diagnostic(
        code("hetgen::aws::limit"),
        help(
            "request a quota increase for these instance types in Service Quotas, or use smaller groups"
        )
    )]
    LimitExceeded { message: String },
    /// DescribeTrainingJob of a job that does not exist.
    #[error("no training job named `{name}`")]
    #[diagnostic(
        code("hetgen::aws::not-found"),
        help("check the name and region; `hetgen list` shows the jobs hetgen started")
    )]
    NotFound { name: String },
    /// The service rejected the request's content.
    #[error("SageMaker rejected the request: {message}")]
    #[diagnostic(
        code("hetgen::aws::validation"),
        help(
            "`hetgen validate` checks what SageMaker checks; if it passed, please report this spec"
        )
    )]
    Validation { message: String },
    /// The rendered request file is not what hetgen renders.
    #[error("the rendered request is malformed: {message}")]
    #[diagnostic(code("hetgen::deploy::request"), help("run `hetgen render` again"))]
    Request { message: String },
    /// The bucket for the source bundle does not exist.
    #[error("no S3 bucket `{bucket}` for the source bundle")]
    #[diagnostic(
        code("hetgen::aws::no-bucket"),
        help(
            "create it in the job's region (`aws s3 mb s3://{bucket}`), or set `[sagemaker] code_location` to a bucket of yours"
        )
    )]
    NoBucket { bucket: String },
    /// S3 refused the source bundle: the caller may not write there.
    #[error("access to {uri} denied: {message}")]
    #[diagnostic(
        code("hetgen::aws::upload-denied"),
        help(
            "the caller needs `s3:PutObject` on `{uri}` (and the bucket's policy must allow it), or set `[sagemaker] code_location` to a bucket it may write"
        )
    )]
    UploadDenied { uri: String, message: String },
    /// The bundle's bucket is in another region than the job.
    #[error("S3 bucket `{bucket}` is not in the job's region `{region}`: {message}")]
    #[diagnostic(
        code("hetgen::aws::bucket-region"),
        help(
            "SageMaker reads a job's code from its own region: set `[sagemaker] code_location` to a bucket in `{region}`, or run the job where the bucket is"
        )
    )]
    BucketElsewhere {
        bucket: String,
        region: String,
        message: String,
    },
    /// Uploading the source bundle failed.
    #[error("uploading the source bundle to {uri} failed: {message}")]
    #[diagnostic(
        code("hetgen::aws::upload"),
        help(
            "the caller needs `s3:PutObject` there; check the network, the endpoint and the region"
        )
    )]
    Upload { uri: String, message: String },
    /// Anything else the service or the network said.
    #[error("{operation} failed: {message}")]
    #[diagnostic(
        code("hetgen::aws::call"),
        help(
            "check the network, the endpoint and the region; retry if the service was unavailable"
        )
    )]
    Call { operation: String, message: String },
}

impl DeployError {
    /// Whether this is a configuration problem (exit 78) rather than a failed call (exit 1).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            DeployError::NoCredentials { .. }
                | DeployError::NoRegion
                | DeployError::AccessDenied { .. }
                | DeployError::NoBucket { .. }
                | DeployError::UploadDenied { .. }
                | DeployError::BucketElsewhere { .. }
        )
    }

    /// Classifies an SDK error of SageMaker's `operation` (on job `name`).
    pub(crate) fn from_sdk<E, R>(operation: &str, name: &str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + 'static,
    {
        Self::from_service("sagemaker", operation, name, err)
    }

    /// Classifies an SDK error of `service`'s `operation` (IAM's prefix: `sagemaker`, `logs`).
    pub(crate) fn from_service<E, R>(
        service: &'static str,
        operation: &str,
        name: &str,
        err: SdkError<E, R>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + 'static,
    {
        let (code, message) = match err.as_service_error() {
            Some(service) => (
                service.code().unwrap_or_default().to_owned(),
                service.message().unwrap_or_default().to_owned(),
            ),
            None => (String::new(), error_chain(&err)),
        };
        let operation = operation.to_owned();
        match code.as_str() {
            "AccessDeniedException" | "AccessDenied" | "UnrecognizedClientException" => {
                DeployError::AccessDenied {
                    service,
                    operation,
                    message,
                }
            }
            "ResourceInUse" => DeployError::NameInUse {
                name: name.to_owned(),
            },
            "ResourceLimitExceeded" => DeployError::LimitExceeded { message },
            "ResourceNotFound" => DeployError::NotFound {
                name: name.to_owned(),
            },
            "ValidationException" if is_not_found(&message) => DeployError::NotFound {
                name: name.to_owned(),
            },
            "ValidationException" => DeployError::Validation { message },
            _ if message.is_empty() => DeployError::Call {
                operation,
                message: code,
            },
            _ => DeployError::Call { operation, message },
        }
    }
}

fn is_not_found(message: &str) -> bool {
    let m = message.to_lowercase();
    ["not found", "could not find", "does not exist"]
        .iter()
        .any(|p| m.contains(p))
}
