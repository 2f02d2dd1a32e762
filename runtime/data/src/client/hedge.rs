//! Hedged shards: when a source falls behind its peers, another source streams the rest of
//! its shard too, and the first copy of each batch wins (the scheduler's exactly-once rule
//! drops the other). MapReduce's backup tasks and "The Tail at Scale"'s hedged requests, for
//! shards.
//!
//! - **When a shard is overdue.** Per source [`Hedge`] keeps a moving average of the time
//!   between a shard's batches ([`Pace`]). A shard is overdue when nothing of it arrived for
//!   [`FACTOR`] times the live sources' median of those averages (and at least [`FLOOR`]):
//!   relative to the rate the job runs at, not a fixed timeout. A slow consumer slows every
//!   source alike, so it moves the median, not the verdict.
//! - **When it is hedged.** An overdue shard gets one backup copy, from its first batch not yet
//!   received, on a source with a free credit that is not behind itself, when the shard is in
//!   the way: at the epoch's tail (nothing left in the queue for idle sources to take: one slow
//!   source would otherwise hold the epoch), or, in deterministic mode, when it blocks the
//!   shard being yielded.
//! - **What it may cost.** At most one backup per shard at a time, and per epoch at most
//!   [`SHARE`] of its shards plus one per credit of all sources (the tail). A backup streams
//!   only what was not yet received, and the copy that loses is dropped as soon as the shard
//!   is whole, which ends its work on the server.
//! - **Behind, not lost.** The source of an overdue shard is *behind*: it gets no new shards
//!   until it answers a heartbeat or delivers a batch again, and keeps its credits. A frozen
//!   and resumed host is a source again; only a failed stream (or the stall timeout) loses it.
//!   This host's own pipeline is never behind: it cannot be frozen apart from the trainer,
//!   only slow, so it takes new shards at once while its overdue ones are still backed up.
//!
//! [`Hedge`] carries the rule out for the scheduler: it hears of every batch that arrives, and
//! looks for overdue shards every [`TICK`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::counts::SourceCounts;
use super::deal::{Dealer, free_source};
use super::plan::{Epoch, ShardState};
use super::source::{Source, SourceState};

/// How often overdue shards are looked for.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// A shard is overdue after this many times the typical gap between its batches.
pub(super) const FACTOR: f64 = 4.0;
/// ... and never before this: below it, scheduling noise would start backups.
pub(super) const FLOOR: Duration = Duration::from_millis(300);
/// Backups an epoch may start, as a share of its shards (plus one per credit).
pub(super) const SHARE: f64 = 0.1;

/// Weight of the newest gap in a source's moving average.
const WEIGHT: f64 = 0.2;

/// The pace of each source: the moving average of the gaps between a shard's batches.
#[derive(Debug)]
pub(super) struct Pace {
    gaps: Vec<Option<f64>>,
}

impl Pace {
    pub(super) fn new(sources: usize) -> Self {
        Pace {
            gaps: vec![None; sources],
        }
    }

    /// A batch of a shard arrived from `source`, `gap` after the shard's previous one (or
    /// after the shard was asked for).
    pub(super) fn observe(&mut self, source: usize, gap: Duration) {
        let gap = gap.as_secs_f64();
        if let Some(slot) = self.gaps.get_mut(source) {
            *slot = Some(match *slot {
                Some(avg) => avg + WEIGHT * (gap - avg),
                None => gap,
            });
        }
    }

    /// How long a shard may be quiet before it is overdue: [`FACTOR`] times the median pace
    /// of the sources `counted`, at least [`FLOOR`]; `None` until one has a pace.
    pub(super) fn patience(&self, counted: impl Fn(usize) -> bool) -> Option<Duration> {
        let mut paces: Vec<f64> = (0..self.gaps.len())
            .filter(|&i| counted(i))
            .filter_map(|i| self.gaps[i])
            .collect();
        if paces.is_empty() {
            return None;
        }
        paces.sort_by(f64::total_cmp);
        let median = paces[paces.len() / 2];
        Some(Duration::from_secs_f64(median * FACTOR).max(FLOOR))
    }
}

/// Backups an epoch of `shards` shards may start, with `credits` credits over all sources.
pub(super) fn allowance(shards: usize, credits: u32) -> u32 {
    (shards as f64 * SHARE).ceil() as u32 + credits
}

/// The rule's state for one trainer rank's stream.
pub(super) struct Hedge {
    pace: Pace,
    /// Backups the current epoch may still start.
    backups_left: u32,
    /// Per source, when a server last answered a heartbeat (ms since `started`).
    answered: Arc<Vec<AtomicU64>>,
    started: Instant,
}

impl Hedge {
    pub(super) fn new(sources: usize) -> Self {
        Hedge {
            pace: Pace::new(sources),
            backups_left: 0,
            answered: Arc::new((0..sources).map(|_| AtomicU64::new(0)).collect()),
            started: Instant::now(),
        }
    }

    /// Where the heartbeats write when each server answered (ms since the instant returned).
    pub(super) fn answered(&self) -> (Arc<Vec<AtomicU64>>, Instant) {
        (self.answered.clone(), self.started)
    }

    /// An epoch of `shards` shards starts, with `credits` credits over all sources.
    pub(super) fn start_epoch(&mut self, shards: usize, credits: u32) {
        self.backups_left = allowance(shards, credits);
    }

    /// A batch of `state` arrived from `source` at `now`.
    pub(super) fn delivered(
        &mut self,
        sources: &mut [SourceState],
        source: usize,
        state: &mut ShardState,
        now: Instant,
    ) {
        // A source that delivers is not behind, whatever it delivers, and its pace is that of
        // its own copy.
        sources[source].behind = None;
        if let Some(copy) = state.copies.iter_mut().find(|c| c.source == source) {
            self.pace.observe(source, now - copy.last);
            copy.last = now;
        }
    }

    /// Back up the overdue shards that are in the way: at the epoch's tail (nothing left in
    /// the queue) any of them, in deterministic mode the one being yielded. Their sources are
    /// marked behind (never this host's own pipeline); a source behind that answered a
    /// heartbeat since is not any more.
    pub(super) fn tick(
        &mut self,
        sources: &mut [SourceState],
        epoch: &mut Epoch,
        deterministic: bool,
        dealer: &Dealer,
        counts: &SourceCounts,
    ) {
        for (i, source) in sources.iter_mut().enumerate() {
            let answered = Duration::from_millis(self.answered[i].load(Ordering::Relaxed));
            if source
                .behind
                .is_some_and(|since| self.started + answered > since)
            {
                source.behind = None;
            }
        }
        // Outside the epoch's tail only deterministic order has a shard in the way: the one
        // being yielded.
        let shards = epoch.shards.len();
        let in_the_way = match (epoch.queue.is_empty(), deterministic) {
            (true, _) => 0..shards,
            (false, true) => epoch.cursor..(epoch.cursor + 1).min(shards),
            (false, false) => return,
        };
        let counted = |i: usize| sources[i].alive && sources[i].behind.is_none();
        let Some(patience) = self.pace.patience(counted) else {
            return;
        };
        let now = Instant::now();
        for next in in_the_way {
            let state = &epoch.shards[next];
            if state.copies.len() != 1
                || state.received == state.total
                || now - state.last_progress < patience
            {
                continue;
            }
            let late = state.copies[0].source;
            if sources[late].behind.is_none() && matches!(sources[late].source, Source::Remote(_)) {
                sources[late].behind = Some(now);
            }
            if self.backups_left == 0 {
                continue;
            }
            let Some(backup) = free_source(sources, state) else {
                continue;
            };
            tracing::info!(
                shard = state.id,
                behind = sources[late].name(),
                backup = sources[backup].name(),
                quiet_ms = (now - state.last_progress).as_millis() as u64,
                "shard overdue; streaming the rest from another source too"
            );
            self.backups_left -= 1;
            counts.backup();
            dealer.start_copy(sources, backup, &mut epoch.shards[next], next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patience_is_a_multiple_of_the_median_pace_of_the_sources_counted() {
        let mut pace = Pace::new(3);
        assert_eq!(pace.patience(|_| true), None);
        let ms = Duration::from_millis;
        for _ in 0..20 {
            pace.observe(0, ms(100));
            pace.observe(1, ms(120));
            pace.observe(2, ms(5_000)); // the straggler
        }
        // The median of 100, 120 and 5000 ms is 120: a straggler does not set the rule.
        let patience = pace.patience(|_| true).unwrap();
        assert!((patience.as_secs_f64() - 0.48).abs() < 0.01, "{patience:?}");
        // Fast sources never make it shorter than the floor.
        let mut quick = Pace::new(1);
        quick.observe(0, ms(1));
        assert_eq!(quick.patience(|_| true), Some(FLOOR));
        // Only the sources counted (the live ones) count.
        assert!(pace.patience(|i| i == 2).unwrap() > Duration::from_secs(10));
    }

    #[test]
    fn an_epoch_may_back_up_a_tenth_of_its_shards_and_its_tail() {
        assert_eq!(allowance(100, 6), 16);
        assert_eq!(allowance(3, 2), 3);
    }
}
