//! Shard streams whose client takes no data.
//!
//! A stream *progresses* while batches are made for it or its client takes them. One that does
//! neither for the stall timeout ([`STALL_VAR`], 30 s by default) is cancelled; one stalled for
//! [`GIVE_WAY`] already gives way when what it holds is wanted: a place in the trainer table,
//! a trainer's stream cap, the memory budget. A stalled stream holds no thread meanwhile (a
//! shard's batches are made on a blocking thread only while its client keeps up).
//!
//! Cancelling closes the stream's connection: hyper reads nothing from a response body whose
//! HTTP/2 window the client keeps shut, so the body cannot end the stream itself, and closing
//! the connection is what frees what hyper, the channel and the budget hold for it. A trainer
//! opens all its streams to a server on one connection and stalls them together (its consumer
//! stopped taking batches), and its client treats a stream lost this way like any other: the
//! shard is asked for again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::connections::Peer;

/// Sets the seconds a shard stream may make no progress before it is cancelled.
pub const STALL_VAR: &str = "HETGEN_DATA_STALL_S";

/// Stall timeout by default: far beyond a training step, a checkpoint save or a pause of the
/// trainer's process, so only a client that has stopped reading meets it.
pub const DEFAULT_STALL: Duration = Duration::from_secs(30);

/// A stream stalled this long gives way to a trainer that needs what it holds: a trainer's
/// consumer takes a batch every step, and a step longer than this leaves its prefetched
/// batches waiting anyway.
pub(crate) const GIVE_WAY: Duration = crate::STREAM_GIVE_WAY;

/// One open shard stream's progress, shared by its maker, its response body and the trainer
/// table.
pub(crate) struct Watch {
    /// When it last progressed, ms since `started`.
    last_ms: AtomicU64,
    started: Instant,
    /// The stream has ended or was cancelled.
    ended: AtomicBool,
    /// Cancelled when its response body is dropped: the client has all it will get.
    body_gone: CancellationToken,
    /// The connection it runs on; absent when called without one (in-process tests).
    peer: Option<Peer>,
}

impl Watch {
    pub(crate) fn new(peer: Option<Peer>) -> Arc<Self> {
        Arc::new(Watch {
            last_ms: AtomicU64::new(0),
            started: Instant::now(),
            ended: AtomicBool::new(false),
            body_gone: CancellationToken::new(),
            peer,
        })
    }

    /// A batch was made or taken.
    pub(crate) fn progressed(&self) {
        self.last_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long since it last progressed; zero once it has ended.
    pub(crate) fn stalled_for(&self) -> Duration {
        if self.ended.load(Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let now = self.started.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }

    /// The response body is gone (all sent, or the client reset the stream).
    pub(crate) fn body_dropped(&self) {
        self.ended.store(true, Ordering::Relaxed);
        self.body_gone.cancel();
    }

    /// Completes when the response body is gone.
    pub(crate) async fn body_gone(&self) {
        self.body_gone.cancelled().await
    }

    /// Cancel the stream: close its connection. Whether it was still open.
    pub(crate) fn cancel(&self) -> bool {
        if self.ended.swap(true, Ordering::Relaxed) {
            return false;
        }
        if let Some(peer) = &self.peer {
            peer.close();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_stalls_from_its_last_progress_and_not_once_ended() {
        let watch = Watch::new(None);
        std::thread::sleep(Duration::from_millis(30));
        assert!(watch.stalled_for() >= Duration::from_millis(30));
        watch.progressed();
        assert!(watch.stalled_for() < Duration::from_millis(30));
        assert!(watch.cancel());
        assert!(!watch.cancel(), "cancelled once");
        assert_eq!(watch.stalled_for(), Duration::ZERO);
    }
}
