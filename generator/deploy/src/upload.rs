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
        .content_type("application/x-tar")
        .content_encoding("gzip")
        .send()
        .await
        .map_err(|e| match e.as_service_error().and_then(|s| s.code()) {
            Some("NoSuchBucket") => DeployError::NoBucket {
                bucket: bucket.to_owned(),
            },
            Some(code) => fail(format!(
                "{code}: {}",
                e.as_service_error()
                    .and_then(|s| s.message())
                    .unwrap_or_default()
            )),
            None => fail(error_chain(&e)),
        })?;
    Ok(())
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
}
