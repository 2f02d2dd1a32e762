//! What the trainer consumes: a stream of batches and where it stands in the epoch plan.
//!
//! Two implementations exist: the runtime's gRPC client (batches from the data servers,
//! heterogeneous) and [`crate::LocalInput`] (the same pipeline on the trainer's own cores,
//! homogeneous). Both honour the same [`InputConfig`] and report the same [`Position`], so a
//! checkpoint taken with one resumes with either.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Batch;

/// Boxed error of an input or a stage.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What to stream: the epoch plan's parameters for one trainer rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputConfig {
    /// The job's seed (epoch permutations and per-sample randomness).
    pub seed: u64,
    /// Samples per epoch of the source (0 for a dataset of shards: it is learned as the
    /// shards are read).
    pub samples_per_epoch: u64,
    /// A dataset of shards (`hetgen.Shards`): how many it has. Each epoch then deals the
    /// dataset's own shards ([`crate::StreamPlan`]) instead of shards of sample ids.
    #[serde(default)]
    pub shards: Option<u32>,
    /// Samples per shard.
    pub shard_size: u32,
    /// Samples per batch.
    pub batch_size: u32,
    /// Stop after this many epochs; `None` streams until dropped.
    pub epochs: Option<u32>,
    /// This trainer's rank and the number of ranks.
    pub rank: u32,
    /// Number of trainer ranks.
    pub world: u32,
    /// Yield batches in plan order (shard by shard) whatever server finishes first.
    pub deterministic: bool,
}

/// How far a consumer got: enough to resume without repeating or skipping a sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The epoch in progress.
    pub epoch: u32,
    /// Shards of that epoch whose every batch was yielded.
    pub done: Vec<u32>,
    /// Shards partly yielded: shard → batches yielded, always the shard's first batches.
    pub partial: BTreeMap<u32, u32>,
}

impl Position {
    /// Record that batch `index` of `shard` (which has `batches` batches) was yielded.
    ///
    /// Batches of one shard are yielded in index order by every input, so a count suffices.
    pub fn advance(&mut self, epoch: u32, shard: u32, index: u32, batches: u32) {
        if epoch != self.epoch {
            *self = Position {
                epoch,
                ..Position::default()
            };
        }
        if index + 1 >= batches {
            self.partial.remove(&shard);
            self.done.push(shard);
        } else {
            self.partial.insert(shard, index + 1);
        }
    }

    /// Batches of `shard` already yielded (all of them when done).
    pub fn skip(&self, shard: u32) -> Option<u32> {
        if self.done.contains(&shard) {
            None
        } else {
            Some(self.partial.get(&shard).copied().unwrap_or(0))
        }
    }
}

/// A source of training batches.
pub trait BatchStream: Send {
    /// The next batch; `None` when the configured epochs are over.
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>>;

    /// Where the consumer stands after the batches yielded so far.
    fn position(&self) -> Position;
}

impl<S: BatchStream + ?Sized> BatchStream for Box<S> {
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>> {
        (**self).next_batch()
    }

    fn position(&self) -> Position {
        (**self).position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_tracks_shards() {
        let mut p = Position::default();
        p.advance(0, 5, 0, 3);
        p.advance(0, 5, 1, 3);
        assert_eq!(p.skip(5), Some(2));
        p.advance(0, 5, 2, 3);
        assert_eq!(p.skip(5), None);
        assert_eq!(p.skip(6), Some(0));
        p.advance(1, 2, 0, 1);
        assert_eq!(
            p,
            Position {
                epoch: 1,
                done: vec![2],
                partial: BTreeMap::new()
            }
        );
    }
}
