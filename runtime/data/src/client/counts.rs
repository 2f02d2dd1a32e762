//! What the client's streams yielded, per source, for the run's summary.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Batches yielded per source since the client was made, over all its streams, and what
/// hedging cost: backup copies started, and batches dropped because another copy had
/// delivered them.
pub(crate) struct SourceCounts {
    names: Vec<String>,
    counts: Vec<AtomicU64>,
    backups: AtomicU64,
    duplicates: AtomicU64,
}

impl SourceCounts {
    pub(super) fn new(names: Vec<String>) -> Self {
        let counts = names.iter().map(|_| AtomicU64::new(0)).collect();
        Self {
            names,
            counts,
            backups: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    /// A backup copy of a shard was started.
    pub(crate) fn backup(&self) {
        self.backups.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch that had arrived already was dropped.
    pub(crate) fn duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
    }

    /// One more batch of `source` yielded.
    pub(crate) fn add(&self, source: usize) {
        if let Some(count) = self.counts.get(source) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Backup copies started.
    pub(super) fn backups(&self) -> u64 {
        self.backups.load(Ordering::Relaxed)
    }

    /// Batches dropped as duplicates.
    pub(super) fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }

    /// Batches yielded per source name.
    pub(super) fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (name, count) in self.names.iter().zip(&self.counts) {
            *out.entry(name.clone()).or_default() += count.load(Ordering::Relaxed);
        }
        out
    }
}
