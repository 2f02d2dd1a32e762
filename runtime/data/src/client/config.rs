//! How the client behaves.

use std::time::Duration;

/// How the client behaves.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// This trainer's stable name, e.g. `algo-2/rank-0`.
    pub trainer_id: String,
    /// The job's token.
    pub token: String,
    /// How long to keep trying to reach a data host that does not answer yet.
    pub connect_timeout: Duration,
    /// A server that sends nothing for this long while it owes batches is treated as failed.
    pub stall_timeout: Duration,
    /// Interval of heartbeats (the servers' watchdogs count them as trainer activity).
    pub heartbeat: Duration,
}

impl ClientConfig {
    /// Defaults: 10 minutes to connect (instances boot at different speeds), 60 s stall
    /// timeout, a heartbeat per second.
    pub fn new(trainer_id: String, token: String) -> Self {
        Self {
            trainer_id,
            token,
            connect_timeout: Duration::from_secs(600),
            stall_timeout: Duration::from_secs(60),
            heartbeat: Duration::from_secs(1),
        }
    }
}
