//! The server's memory budgets: every byte a peer can make it hold is reserved from a
//! server-wide budget, shared by all trainers and all connections, so the sum is bounded
//! whatever the ids, streams and connections a client uses. There are two: batches built and
//! not yet sent reserve from the data budget, shard request bodies still arriving from their
//! own ([`BODIES`]). Bodies are apart so that a request never waits on the batches in flight:
//! with the data budget full (every stream stalled, say), a trainer's 100-byte request is read
//! at once, and its stream then either finds room, makes stalled streams give way, or is
//! refused with the data budget's own figures, instead of waiting 10 s to be refused for its
//! body.
//!
//! A shard stream reserves its worst case when it opens (4 batches: the two queued in its
//! channel, the one the engine made and is waiting to queue, the one being written) and gives
//! it back when its response ends or is dropped. A shard request's body reserves its bytes as
//! they arrive, never a size its frame header merely declares (a peer could declare 16 MiB and
//! send 5 bytes). A reservation that does not fit waits up to [`WAIT`] for others to end,
//! holding nothing meanwhile, then is refused with `RESOURCE_EXHAUSTED`; one too large for the
//! whole budget is refused at once.
//!
//! Grants are not first come, first served: a waiting reservation that does not fit takes no
//! bytes while it waits, and a smaller one that fits goes ahead of it. (A FIFO semaphore lets
//! its waiting head collect what others give back, so one request that could never fit,
//! repeated, held up every stream behind it.) A large reservation may therefore wait while
//! small ones keep the budget busy; it is refused after [`WAIT`], and its client retries.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// Sets the budget in MiB (default: [`for_job`]).
pub const MEMORY_VAR: &str = "HETGEN_DATA_MEMORY_MIB";

/// How long a reservation waits for the budget before it is refused: longer than a shard of
/// a healthy stream takes to drain, shorter than a client's patience with a silent server.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The budget of shard request bodies still arriving, all connections together: four of the
/// largest request (16 MiB, a million sample ids) at once, thousands of real ones (a shard's
/// ids, a few KiB). A peer that fills it with bodies it never finishes holds it only until
/// their deadline.
pub(crate) const BODIES: u64 = 64 << 20;

/// Bytes a shard stream holds at most per byte of one of its batches.
pub(crate) const BATCHES_PER_STREAM: u64 = 4;

/// Host memory assumed without a readable `/proc/meminfo`.
const FALLBACK_HOST: u64 = 8 << 30;

/// The least default budget: room for a few streams of a large batch and the request bodies
/// of a burst of connections, whatever the job.
const FLOOR: u64 = 256 << 20;

/// The budget: `bytes` in all, shared.
#[derive(Clone)]
pub(crate) struct Budget {
    shared: Arc<Shared>,
    bytes: u64,
}

struct Shared {
    /// Bytes not reserved.
    free: Mutex<u64>,
    /// Woken whenever bytes are given back.
    given_back: Notify,
}

/// Bytes reserved; given back when dropped.
pub(crate) struct Reservation {
    shared: Arc<Shared>,
    bytes: u64,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} bytes)", self.bytes)
    }
}

impl Reservation {
    /// One reservation of both, given back together.
    pub(crate) fn join(&mut self, mut other: Reservation) {
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            *self.shared.free() += self.bytes;
            self.shared.given_back.notify_waiters();
        }
    }
}

impl Shared {
    fn free(&self) -> std::sync::MutexGuard<'_, u64> {
        // Only additions and subtractions happen under it: a poisoned count is still right.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a reservation that could not be made ran into.
#[derive(Debug, PartialEq)]
pub(crate) enum Short {
    /// Larger than the whole budget: it can never fit.
    Never,
    /// Did not fit within [`WAIT`].
    Busy,
}

impl Budget {
    pub(crate) fn new(bytes: u64) -> Self {
        Budget {
            shared: Arc::new(Shared {
                free: Mutex::new(bytes),
                given_back: Notify::new(),
            }),
            bytes,
        }
    }

    /// The whole budget, in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The whole budget in MiB, as messages show it.
    pub(crate) fn mib(&self) -> u64 {
        self.bytes >> 20
    }

    /// Bytes reserved now.
    pub(crate) fn in_use(&self) -> u64 {
        self.bytes - *self.shared.free()
    }

    /// Reserve `bytes`, waiting up to `wait` for other reservations to end.
    pub(crate) async fn reserve(&self, bytes: u64, wait: Duration) -> Result<Reservation, Short> {
        if bytes > self.bytes {
            return Err(Short::Never);
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the count is looked at, so a give-back in between wakes it.
            let given_back = self.shared.given_back.notified();
            let mut given_back = std::pin::pin!(given_back);
            given_back.as_mut().enable();
            {
                let mut free = self.shared.free();
                if *free >= bytes {
                    *free -= bytes;
                    return Ok(Reservation {
                        shared: self.shared.clone(),
                        bytes,
                    });
                }
            }
            if tokio::time::timeout_at(deadline, given_back).await.is_err() {
                return Err(Short::Busy);
            }
        }
    }
}

/// Memory the budget must have had in use, above what it has now, before the heap's free pages
/// are handed back: trimming costs a walk of the heap, worth it only after a real peak.
const RELEASE_AFTER: u64 = 64 << 20;

/// Watches the bytes in use for a peak that has passed.
#[derive(Default)]
pub(crate) struct PeakWatch {
    peak: u64,
}

impl PeakWatch {
    /// With `in_use` now: the peak that has passed, if in use has fallen to half of it or less,
    /// and by [`RELEASE_AFTER`] or more. The next peak is counted from here.
    pub(crate) fn passed(&mut self, in_use: u64) -> Option<u64> {
        self.peak = self.peak.max(in_use);
        let peak = self.peak;
        (peak - in_use >= RELEASE_AFTER && in_use <= peak / 2).then(|| {
            self.peak = in_use;
            peak
        })
    }
}

/// The most a shard stream of `batch_size` samples of `sample_bytes` holds at once:
/// [`BATCHES_PER_STREAM`] batches of images, sample ids and labels.
pub(crate) fn stream_bytes(batch_size: u32, sample_bytes: usize) -> u64 {
    BATCHES_PER_STREAM * batch_size as u64 * (sample_bytes as u64 + 16)
}

/// The default budget: what the job's own trainers can make this server hold at once, twice
/// over, within half of the host's memory and not below [`FLOOR`].
///
/// `trainers` processes (the trainer hosts' ranks) may each hold `streams_per_trainer` shard
/// streams of `stream_bytes` at once; twice that leaves room for the streams a hedge starts
/// beside a slow one and for a stream still being dropped while its retry opens. Half of the
/// host is the ceiling because the rest is not the budget's to give: the pipeline's threads and
/// their decoded images, a Python dataset's worker processes, the source's page cache and the
/// HTTP/2 buffers all live beside it. (Half the host was the default before; on a 192 GiB data
/// host it let one peer with the token pin 96 GiB the job never needed.)
pub(crate) fn for_job(trainers: usize, streams_per_trainer: usize, stream_bytes: u64) -> u64 {
    let need = (trainers.max(1) as u64)
        .saturating_mul(streams_per_trainer as u64)
        .saturating_mul(stream_bytes)
        .saturating_mul(2);
    need.clamp(FLOOR, (host_memory() / 2).max(FLOOR))
}

/// The host's memory, from `/proc/meminfo`.
fn host_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(FALLBACK_HOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_share_one_budget_and_come_back_when_dropped() {
        let budget = Budget::new(10 << 20);
        let a = budget.reserve(6 << 20, WAIT).await.unwrap();
        assert_eq!(budget.in_use(), 6 << 20);
        let wait = Duration::from_millis(50);
        assert_eq!(
            budget.reserve(6 << 20, wait).await.unwrap_err(),
            Short::Busy
        );
        assert_eq!(
            budget.reserve(11 << 20, wait).await.unwrap_err(),
            Short::Never
        );
        drop(a);
        assert_eq!(budget.in_use(), 0);
        let _b = budget.reserve(6 << 20, wait).await.unwrap();
    }

    #[tokio::test]
    async fn a_waiting_reservation_gets_what_another_gives_back() {
        let budget = Budget::new(1 << 20);
        let a = budget.reserve(1 << 20, WAIT).await.unwrap();
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(512 << 10, WAIT).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn a_reservation_that_cannot_fit_holds_nothing_and_smaller_ones_go_ahead() {
        let budget = Budget::new(10 << 20);
        let held = budget.reserve(6 << 20, WAIT).await.unwrap();
        let large = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(8 << 20, Duration::from_millis(300)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A FIFO semaphore's waiting head would have taken the 4 MiB free and made these wait.
        assert_eq!(budget.in_use(), 6 << 20, "the waiting one holds nothing");
        let small = budget.reserve(3 << 20, Duration::ZERO).await.unwrap();
        let more = budget.reserve(1 << 20, Duration::ZERO).await.unwrap();
        assert_eq!(large.await.unwrap().unwrap_err(), Short::Busy);
        drop((held, small, more));
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn joined_reservations_are_given_back_together() {
        let budget = Budget::new(1 << 20);
        let mut a = budget.reserve(1000, WAIT).await.unwrap();
        a.join(budget.reserve(24, WAIT).await.unwrap());
        assert_eq!(budget.in_use(), 1024);
        drop(a);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_peak_has_passed_once_use_falls_to_half_of_it_by_a_real_amount() {
        let mib = |n: u64| n << 20;
        let mut watch = PeakWatch::default();
        assert_eq!(watch.passed(mib(10)), None);
        assert_eq!(watch.passed(0), None, "too small a peak to be worth a trim");
        assert_eq!(watch.passed(mib(400)), None);
        assert_eq!(watch.passed(mib(300)), None, "not down to half");
        assert_eq!(watch.passed(mib(150)), Some(mib(400)));
        assert_eq!(watch.passed(mib(100)), None, "counted from the last trim");
        assert_eq!(watch.passed(mib(20)), Some(mib(150)));
    }

    #[test]
    fn the_default_is_what_the_jobs_trainers_can_hold_twice_within_half_the_host() {
        let mib = |n: u64| n << 20;
        // 16 ranks with 6 streams each of 4 batches of 256 224×224×3 images (154 MB a stream).
        let stream = 4 * 256 * (224 * 224 * 3 + 16);
        let need = 2 * 16 * 6 * stream;
        let half = host_memory() / 2;
        assert_eq!(for_job(16, 6, stream), need.min(half).max(FLOOR));
        // A small job gets the floor, never less.
        assert_eq!(for_job(1, 6, 4 * 32 * 64), FLOOR);
        // However many trainers, never more than half of the host.
        assert_eq!(for_job(100_000, 6, stream), half.max(FLOOR));
        assert!(mib(1) < FLOOR);
    }
}
