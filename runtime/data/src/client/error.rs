//! Why the client failed.

use std::time::Duration;

/// Why the client failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The job token is unusable.
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    /// No data host was given.
    #[error("no data hosts to connect to: the job has no data group hosts in resourceconfig.json")]
    NoHosts,
    /// A host never answered.
    #[error("data host {host} could not be reached within {timeout:?}: {last_error}")]
    Unreachable {
        /// The host.
        host: String,
        /// How long it was tried.
        timeout: Duration,
        /// The last error seen.
        last_error: String,
    },
    /// A host was still building its dataset when the connect timeout ran out.
    #[error(
        "data host {host} was still building its dataset ({seconds} s so far) when the trainer's connect timeout ({timeout:?}) ran out: the dataset's factory is slow (its log says how long it has taken); raise `connect_timeout` or make the factory do less at start"
    )]
    StillBuilding {
        /// The host.
        host: String,
        /// How long it was waited for.
        timeout: Duration,
        /// How long it had been building, by its own count.
        seconds: u64,
    },
    /// A host refused the handshake.
    #[error("data host {host} refused the handshake: {status}")]
    Handshake {
        /// The host.
        host: String,
        /// What it said.
        status: String,
    },
    /// Hosts disagree with each other or with the job.
    #[error("data host {host}: {message}")]
    Mismatch {
        /// The host.
        host: String,
        /// What differs.
        message: String,
    },
    /// A data server's pipeline failed in a way any server's would: a sample the user's code
    /// fails on, a request no server can serve.
    #[error("data host {host}: {message}")]
    Data {
        /// The host.
        host: String,
        /// What it said.
        message: String,
        /// The sample the user's code failed on, when that is why.
        sample: Option<crate::failure::SampleFailure>,
    },
    /// Every data server failed while the epoch still had shards.
    #[error("every data server failed; last error: {0}")]
    AllServersFailed(String),
    /// The local pipeline (hybrid input) failed on a sample, as any server would.
    #[error("the local pipeline failed: {message}")]
    Local {
        /// What failed.
        message: String,
        /// The sample the user's code failed on, when that is why.
        sample: Option<crate::failure::SampleFailure>,
    },
    /// The async runtime could not start.
    #[error("cannot start the client's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}
