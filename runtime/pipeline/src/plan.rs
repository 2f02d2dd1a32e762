//! The epoch plan: which samples an epoch visits, in which order, cut into shards.
//!
//! The plan is a pure function of (seed, epoch, samples per epoch, shard size, rank, world), so
//! the trainer side can rebuild it anywhere (after a restart, on another rank) and the servers
//! never need to agree on anything but the sample ids they are sent.

use crate::SampleRng;

/// One shard: the unit of work a trainer hands to a data server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// Shard number, unique within the epoch across all ranks.
    pub id: u32,
    /// Sample ids, in the order their batches are cut.
    pub sample_ids: Vec<u64>,
}

impl Shard {
    /// Number of batches of `batch_size` this shard yields (the last may be short).
    pub fn batches(&self, batch_size: u32) -> u32 {
        self.sample_ids.len().div_ceil(batch_size as usize) as u32
    }

    /// The sample ids of batch `index`.
    pub fn batch(&self, batch_size: u32, index: u32) -> &[u64] {
        let start = (index as usize * batch_size as usize).min(self.sample_ids.len());
        let end = (start + batch_size as usize).min(self.sample_ids.len());
        &self.sample_ids[start..end]
    }
}

/// The shards of one epoch for one trainer rank, in plan order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochPlan {
    /// The epoch.
    pub epoch: u32,
    /// Shards in the order a deterministic consumer yields them.
    pub shards: Vec<Shard>,
}

impl EpochPlan {
    /// The plan of `epoch` for `rank` of `world` trainer ranks.
    ///
    /// The epoch's permutation of `0..samples` is split into `world` equal contiguous parts (the
    /// `samples % world` last ones are left out of this epoch), so every rank gets the same
    /// number of shards and batches and no sample goes to two ranks.
    pub fn new(
        seed: u64,
        epoch: u32,
        samples: u64,
        shard_size: u32,
        rank: u32,
        world: u32,
    ) -> Self {
        assert!(world > 0 && rank < world, "rank {rank} of {world}");
        assert!(shard_size > 0, "shard size must be positive");
        let mut order: Vec<u64> = (0..samples).collect();
        // Fisher–Yates with a stream keyed by the epoch; `u64::MAX` is never a sample id, so it
        // cannot collide with any sample's own augmentation stream.
        let mut rng = SampleRng::new(seed, epoch, u64::MAX);
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let part = (samples / u64::from(world)) as usize;
        let mine = &order[rank as usize * part..(rank as usize + 1) * part];
        let per_rank = part.div_ceil(shard_size as usize) as u32;
        let shards = mine
            .chunks(shard_size as usize)
            .enumerate()
            .map(|(i, ids)| Shard {
                id: rank * per_rank + i as u32,
                sample_ids: ids.to_vec(),
            })
            .collect();
        Self { epoch, shards }
    }

    /// Samples this rank visits in the epoch.
    pub fn samples(&self) -> usize {
        self.shards.iter().map(|s| s.sample_ids.len()).sum()
    }

    /// Batches this rank yields in the epoch.
    pub fn batches(&self, batch_size: u32) -> u64 {
        self.shards
            .iter()
            .map(|s| u64::from(s.batches(batch_size)))
            .sum()
    }
}

/// The sample at `position` of shard `shard` of a dataset of shards, as batches name it: the
/// shard above 32 bits, the position below, so that ids stay unique across the epoch without
/// knowing any shard's length. `worker.py` mirrors this for its messages.
pub fn stream_sample_id(shard: u32, position: u32) -> u64 {
    (u64::from(shard) << 32) | u64::from(position)
}

/// The shard and position of a [`stream_sample_id`].
pub fn stream_sample_of(id: u64) -> (u32, u32) {
    ((id >> 32) as u32, id as u32)
}

/// The shards of one epoch of a dataset of shards (`hetgen.Shards`) for one trainer rank.
///
/// The epoch's order of the dataset's `shards` is drawn from (seed, epoch); rank `r` of
/// `world` takes the shards at places `r`, `r + world`, … of it, as WebDataset's
/// `split_by_node` does, so no shard goes to two ranks; the `shards % world` last ones of the
/// order sit this epoch out, so every rank has as many shards. A shard's samples come in the
/// shard's own order; how many there are is learned as it is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPlan {
    /// The epoch.
    pub epoch: u32,
    /// The dataset's shard indices this rank reads, in the order a deterministic consumer
    /// yields them.
    pub shards: Vec<u32>,
}

impl StreamPlan {
    /// The plan of `epoch` for `rank` of `world` trainer ranks over `shards` shards.
    pub fn new(seed: u64, epoch: u32, shards: u32, rank: u32, world: u32) -> Self {
        assert!(world > 0 && rank < world, "rank {rank} of {world}");
        let mut order: Vec<u32> = (0..shards).collect();
        // The map-style plan's stream key less one: never a sample id, nor that plan's key.
        let mut rng = SampleRng::new(seed, epoch, u64::MAX - 1);
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let rounds = (shards / world) as usize;
        let shards = order[..rounds * world as usize]
            .iter()
            .skip(rank as usize)
            .step_by(world as usize)
            .copied()
            .collect();
        StreamPlan { epoch, shards }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_plan_is_a_permutation_cut_into_shards() {
        let plan = EpochPlan::new(3, 0, 1000, 128, 0, 1);
        assert_eq!(plan.shards.len(), 8);
        assert_eq!(plan.shards[7].sample_ids.len(), 1000 - 7 * 128);
        let ids: BTreeSet<u64> = plan
            .shards
            .iter()
            .flat_map(|s| s.sample_ids.clone())
            .collect();
        assert_eq!(ids, (0..1000).collect());
        assert_ne!(plan.shards[0].sample_ids, (0..128).collect::<Vec<_>>());
    }

    #[test]
    fn epochs_differ_and_plans_repeat() {
        let a = EpochPlan::new(3, 0, 500, 64, 0, 1);
        assert_eq!(a, EpochPlan::new(3, 0, 500, 64, 0, 1));
        assert_ne!(a.shards, EpochPlan::new(3, 1, 500, 64, 0, 1).shards);
        assert_ne!(a.shards, EpochPlan::new(4, 0, 500, 64, 0, 1).shards);
    }

    #[test]
    fn ranks_are_disjoint_with_equal_batch_counts() {
        let plans: Vec<_> = (0..3)
            .map(|r| EpochPlan::new(9, 2, 1001, 100, r, 3))
            .collect();
        let batches: Vec<u64> = plans.iter().map(|p| p.batches(32)).collect();
        assert!(batches.windows(2).all(|w| w[0] == w[1]), "{batches:?}");
        let mut seen = BTreeSet::new();
        let mut shard_ids = BTreeSet::new();
        for p in &plans {
            for s in &p.shards {
                assert!(shard_ids.insert(s.id));
                for id in &s.sample_ids {
                    assert!(seen.insert(*id), "sample {id} on two ranks");
                }
            }
        }
        assert_eq!(seen.len(), 999);
    }

    #[test]
    fn a_stream_plan_deals_each_shard_to_one_rank_and_repeats() {
        let plans: Vec<_> = (0..3).map(|r| StreamPlan::new(5, 1, 11, r, 3)).collect();
        assert!(plans.iter().all(|p| p.shards.len() == 3), "{plans:?}");
        let dealt: BTreeSet<u32> = plans.iter().flat_map(|p| p.shards.clone()).collect();
        assert_eq!(dealt.len(), 9, "no shard on two ranks");
        assert_eq!(plans[1], StreamPlan::new(5, 1, 11, 1, 3));
        let epochs: Vec<_> = (0..4).map(|e| StreamPlan::new(5, e, 11, 0, 1)).collect();
        assert!(epochs.iter().all(|p| p.shards.len() == 11));
        assert!(
            epochs.windows(2).any(|w| w[0].shards != w[1].shards),
            "epochs draw their own orders"
        );
        assert_eq!(
            (0..11).collect::<BTreeSet<u32>>(),
            epochs[2].shards.iter().copied().collect()
        );
    }

    #[test]
    fn a_stream_sample_id_is_its_shard_and_position() {
        let id = stream_sample_id(7, 41);
        assert_eq!(id, (7 << 32) | 41);
        assert_eq!(stream_sample_of(id), (7, 41));
        assert_eq!(
            stream_sample_of(stream_sample_id(u32::MAX, u32::MAX)),
            (u32::MAX, u32::MAX)
        );
    }

    #[test]
    fn batches_cut_a_shard_in_order() {
        let shard = Shard {
            id: 0,
            sample_ids: (10..20).collect(),
        };
        assert_eq!(shard.batches(4), 3);
        assert_eq!(shard.batch(4, 0), &[10, 11, 12, 13]);
        assert_eq!(shard.batch(4, 2), &[18, 19]);
        assert!(shard.batch(4, 3).is_empty());
    }
}
