//! The job token: every call carries `authorization: Bearer <token>`.
//!
//! The token is generated when the job is deployed and reaches every host through the job's
//! environment (`HETGEN_JOB_TOKEN`), so only processes of this job can pull its data or shut its
//! servers down.

use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// Why a job token is unusable.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not set.
    #[error(
        "{} is not set: the data service needs the job's token (hetgen deploy sets it for every host)",
        hetgen_env::TOKEN_VAR
    )]
    Missing,
    /// Not printable ASCII (it goes into an HTTP header).
    #[error(
        "{} must be 16 to 256 printable ASCII characters",
        hetgen_env::TOKEN_VAR
    )]
    Invalid,
}

/// Read and check the job token from the environment.
pub fn token_from_env() -> Result<String, TokenError> {
    let token = std::env::var(hetgen_env::TOKEN_VAR).map_err(|_| TokenError::Missing)?;
    check_token(&token)?;
    Ok(token)
}

/// A token must fit an HTTP header value and be long enough not to be guessed.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if (16..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(TokenError::Invalid)
    }
}

/// Comparison whose time does not depend on where the strings first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Server side: refuse a request whose bearer token is not the job's.
#[derive(Clone)]
pub struct RequireToken {
    expected: String,
}

impl RequireToken {
    /// Accept only `token`.
    pub fn new(token: String) -> Self {
        Self {
            expected: format!("Bearer {token}"),
        }
    }
}

impl tonic::service::Interceptor for RequireToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get("authorization") {
            Some(value) if same(value.as_bytes(), self.expected.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("wrong job token")),
            None => Err(Status::unauthenticated(
                "missing `authorization: Bearer <job token>` metadata",
            )),
        }
    }
}

/// Client side: attach the job's token to every request.
#[derive(Clone)]
pub struct AttachToken {
    value: MetadataValue<tonic::metadata::Ascii>,
}

impl AttachToken {
    /// Attach `token` (checked with [`check_token`]).
    pub fn new(token: &str) -> Result<Self, TokenError> {
        check_token(token)?;
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| TokenError::Invalid)?;
        Ok(Self { value })
    }
}

impl tonic::service::Interceptor for AttachToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.value.clone());
        Ok(request)
    }
}
