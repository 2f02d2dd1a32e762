//! The source bundle of a job on AWS's PyTorch image, uploaded where the job's
//! `sagemaker_submit_directory` says the toolkit will download it.

use std::path::Path;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;

use crate::DeployError;
use crate::connect::error_chain;

/// `s3://bucket/key` → `(bucket, key)`.
pub fn split_uri(uri: &str) -> Option<(&str, &str)> {
    let (bucket, key) = uri.strip_prefix("s3://")?.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

/// Uploads `file` to `uri` (`s3://bucket/key`).
pub async fn upload(
    client: &aws_sdk_s3::Client,
    file: &Path,
    uri: &str,
) -> Result<(), DeployError> {
    let fail = |message: String| DeployError::Upload {
        uri: uri.to_owned(),
        message,
    };
    let (bucket, key) =
        split_uri(uri).ok_or_else(|| fail("not an `s3://bucket/key` uri".to_owned()))?;
    let body = ByteStream::from_path(file)
        .await
        .map_err(|e| fail(format!("cannot read {}: {e}", file.display())))?;
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(body)
        // The object is the `.tar.gz` file itself, as SDK 2.x uploads it: no
        // `Content-Encoding: gzip`, which would invite HTTP clients that honour it (browsers,
        // `curl --compressed`, requests) to unpack it on download.
        .content_type("application/gzip")
        .send()
        .await
        .map_err(|e| match e.as_service_error() {
            Some(service) => classify(
                service.code().unwrap_or_default(),
                service.message().unwrap_or_default(),
                uri,
                client
                    .config()
                    .region()
                    .map(|r| r.as_ref())
                    .unwrap_or_default(),
            ),
            // No answer from S3 at all: the network, the endpoint, a timeout.
            None => fail(error_chain(&e)),
        })?;
    Ok(())
}

/// What S3's error `code` for a PutObject to `uri` means, in words a user can act on.
fn classify(code: &str, message: &str, uri: &str, region: &str) -> DeployError {
    let bucket = split_uri(uri)
        .map(|(b, _)| b)
        .unwrap_or_default()
        .to_owned();
    let message = message.to_owned();
    match code {
        "NoSuchBucket" => DeployError::NoBucket { bucket },
        // Wrong or unknown credentials are refused here too: S3 names them in the message.
        "AccessDenied" | "AllAccessDisabled" | "InvalidAccessKeyId" | "SignatureDoesNotMatch" => {
            DeployError::UploadDenied {
                uri: uri.to_owned(),
                message,
            }
        }
        // S3 answers a request signed for another region with one of these.
        "PermanentRedirect"
        | "AuthorizationHeaderMalformed"
        | "IllegalLocationConstraintException" => DeployError::BucketElsewhere {
            bucket,
            region: region.to_owned(),
            message,
        },
        _ => DeployError::Upload {
            uri: uri.to_owned(),
            message: if message.is_empty() {
                code.to_owned()
            } else {
                format!("{code}: {message}")
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_split_into_bucket_and_key() {
        assert_eq!(
            split_uri("s3://b/j/source/sourcedir.tar.gz"),
            Some(("b", "j/source/sourcedir.tar.gz"))
        );
        assert_eq!(split_uri("s3://b"), None);
        assert_eq!(split_uri("s3:///k"), None);
        assert_eq!(split_uri("https://b/k"), None);
    }

    const URI: &str = "s3://b/j/source/sourcedir.tar.gz";

    #[test]
    fn s3_errors_say_what_to_fix() {
        let err = classify(
            "NoSuchBucket",
            "The specified bucket does not exist",
            URI,
            "r",
        );
        assert!(
            matches!(&err, DeployError::NoBucket { bucket } if bucket == "b"),
            "{err}"
        );
        assert!(err.is_configuration());

        for code in [
            "AccessDenied",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
        ] {
            let err = classify(code, "Access Denied", URI, "r");
            assert!(
                matches!(err, DeployError::UploadDenied { .. }),
                "{code}: {err}"
            );
            assert!(err.is_configuration());
            assert_eq!(
                err.to_string(),
                format!("access to {URI} denied: Access Denied")
            );
        }

        let err = classify(
            "AuthorizationHeaderMalformed",
            "the region 'us-east-1' is wrong; expecting 'eu-west-1'",
            URI,
            "us-east-1",
        );
        assert!(
            err.to_string()
                .starts_with("S3 bucket `b` is not in the job's region `us-east-1`"),
            "{err}"
        );
        assert!(err.is_configuration());

        // Anything else is a failed call (exit 1), with S3's own words.
        let err = classify("SlowDown", "Please reduce your request rate", URI, "r");
        assert!(!err.is_configuration());
        assert_eq!(
            err.to_string(),
            format!(
                "uploading the source bundle to {URI} failed: SlowDown: Please reduce your request rate"
            )
        );
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_named_with_its_cause() {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = aws_sdk_s3::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "AKIDTEST", "secret", None, None, "test",
            ))
            .endpoint_url(format!("http://127.0.0.1:{port}"))
            .force_path_style(true)
            // One attempt: the test is about the message, not the retries.
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .build();
        let client = aws_sdk_s3::Client::from_conf(config);
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = upload(&client, file.path(), URI).await.unwrap_err();
        assert!(matches!(err, DeployError::Upload { .. }), "{err}");
        assert!(!err.is_configuration());
        let text = err.to_string();
        assert!(text.starts_with(&format!("uploading the source bundle to {URI} failed: ")));
        assert!(text.to_lowercase().contains("connect"), "{text}");
    }
}
