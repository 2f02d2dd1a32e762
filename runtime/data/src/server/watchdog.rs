//! The server's watchdog: it stops the server when no trainer has been heard from for too
//! long, or when the trainers went quiet and none of the job's other data servers runs, and
//! meanwhile logs the counters and gives memory back after a peak.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::budget;
use super::state::{Shared, StopReason};
use crate::job::resolve;

/// Trainers silent this long (a live one heartbeats every second while it streams) make a
/// server ask whether the job's other data servers still run; when none does, the job is over
/// and the server stops instead of waiting out its watchdog. The other servers stopped on the
/// trainers' Shutdown; this one missed it, frozen (or cut off) when the trainers finished, and
/// the trainers, which do not wait for a server that does not answer, have gone since.
pub const ORPHAN_QUIET: Duration = Duration::from_secs(10);

/// How often a server whose trainers are quiet asks after its peers.
const PEER_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Whether any of `peers` accepts a connection within a second. A frozen peer does (its
/// kernel accepts for it), so only servers that have exited, and hosts that are gone, count
/// as not running.
async fn any_peer_answers(peers: &[(String, u16)]) -> bool {
    let Ok(table) = hetgen_env::HostsFile::from_env() else {
        return true;
    };
    for (host, port) in peers {
        let Ok(address) = resolve(&table, host, *port).await else {
            continue;
        };
        let connect = tokio::net::TcpStream::connect(address);
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), connect).await {
            return true;
        }
    }
    false
}

/// Every 200 ms: stop the server when no trainer has been heard from for the watchdog's time
/// (counted from the first trainer's contact where the trainers start later,
/// [`ServerConfig::watch_from_start`](super::ServerConfig::watch_from_start)),
/// log the counters every `log_every`, and give memory back once a peak has passed (the
/// allocator keeps freed batches for speed, [`hetgen_pipeline::tune_allocator`]).
pub(super) async fn watchdog(shared: Arc<Shared>) {
    let limit = shared.config.watchdog;
    let mut last_log = Instant::now();
    let mut peak = budget::PeakWatch::default();
    let mut peers_asked: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(200).min(limit)).await;
        let silent = shared.silent_for();
        if silent > limit && (shared.config.watch_from_start || shared.heard_from_trainers()) {
            shared.request_stop(StopReason::Watchdog(limit));
            return;
        }
        if silent >= ORPHAN_QUIET
            && shared.heard_from_trainers()
            && !shared.config.peers.is_empty()
            && peers_asked.is_none_or(|at| at.elapsed() >= PEER_CHECK_EVERY)
        {
            peers_asked = Some(Instant::now());
            if !any_peer_answers(&shared.config.peers).await {
                shared.request_stop(StopReason::Orphaned(silent));
                return;
            }
        }
        let in_use = shared.budget.in_use();
        if let Some(was) = peak.passed(in_use) {
            hetgen_pipeline::release_free_memory();
            tracing::debug!(
                peak_mib = was >> 20,
                in_use_mib = in_use >> 20,
                "returned free memory after a peak"
            );
        }
        if last_log.elapsed() >= shared.config.log_every {
            last_log = Instant::now();
            let s = shared.stats();
            tracing::info!(
                samples_per_s = format!("{:.1}", s.samples_per_s),
                queue_depth = s.queue_depth,
                busy_threads = s.busy_threads,
                samples_served = s.samples_served,
                budget_in_use_mib = in_use >> 20,
                "data server counters"
            );
        }
    }
}
