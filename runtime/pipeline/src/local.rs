//! The homogeneous input: the pipeline on the trainer's own cores, in plan order.
//!
//! A producer thread walks the same [`EpochPlan`]s the remote client does, shard by shard, and
//! hands batches over a small bounded channel, so preprocessing of the next batches overlaps
//! training on this one. A dataset of shards walks [`StreamPlan`]s instead, reading as many
//! shards at once as there are workers (one at a time in deterministic order). Dropping the
//! input stops the producer and joins it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::{
    Batch, BatchStream, Batches, BoxError, EpochPlan, InputConfig, Position, ShardWork, StreamPlan,
    StreamWork,
};

/// Batches buffered ahead of the consumer.
const AHEAD: usize = 2;

/// A batch and the number of batches of its shard (for [`Position::advance`]).
type Item = Result<(Batch, u32), BoxError>;

/// [`BatchStream`] over an in-process maker of batches (the engine, or a Python dataset's
/// workers).
pub struct LocalInput {
    rx: Option<Receiver<Item>>,
    producer: Option<JoinHandle<()>>,
    position: Position,
}

impl LocalInput {
    /// Stream `config`'s epochs from `start` (the beginning when `None`).
    pub fn new(engine: Arc<dyn Batches>, config: InputConfig, start: Option<Position>) -> Self {
        let start = start.unwrap_or_default();
        let (tx, rx) = sync_channel(AHEAD);
        let from = start.clone();
        let producer = std::thread::Builder::new()
            .name("hetgen-local-input".to_owned())
            .spawn(move || produce(&*engine, &config, &from, &tx))
            .ok();
        Self {
            rx: Some(rx),
            producer,
            position: start,
        }
    }
}

fn produce(engine: &dyn Batches, config: &InputConfig, start: &Position, tx: &SyncSender<Item>) {
    let bs = config.batch_size.max(1);
    let mut epoch = start.epoch;
    while config.epochs.is_none_or(|n| epoch < n) {
        if let Some(shards) = config.shards {
            let from = (epoch == start.epoch).then_some(start);
            if !stream_epoch(engine, config, (epoch, shards), from, tx) {
                return;
            }
            epoch += 1;
            continue;
        }
        let plan = EpochPlan::new(
            config.seed,
            epoch,
            config.samples_per_epoch,
            config.shard_size,
            config.rank,
            config.world,
        );
        for shard in &plan.shards {
            let total = shard.batches(bs);
            let skip = if epoch == start.epoch {
                start.skip(shard.id)
            } else {
                Some(0)
            };
            let Some(skip) = skip else { continue };
            let ids = &shard.sample_ids[(skip * bs) as usize..];
            let mut open = true;
            let work = ShardWork {
                epoch,
                shard: shard.id,
                ids,
                batch_size: bs,
            };
            let result = engine.run_shard(work, &mut |mut batch| {
                batch.index += skip;
                open = tx.send(Ok((batch, total))).is_ok();
                open
            });
            if let Err(e) = result {
                let _ = tx.send(Err(Box::new(e)));
                return;
            }
            if !open {
                return;
            }
        }
        epoch += 1;
    }
}

/// Epoch `epoch` of a dataset of `shards` shards, after `start` when resuming it; `false` when
/// the consumer is gone or a shard failed (the error sent). A shard is read by one worker, so
/// as many shards are read at once as the engine has workers, each lane taking the next shard
/// of the plan when its own ends, their batches sent as they come; in deterministic order one
/// shard at a time, in plan order.
fn stream_epoch(
    engine: &dyn Batches,
    config: &InputConfig,
    (epoch, shards): (u32, u32),
    start: Option<&Position>,
    tx: &SyncSender<Item>,
) -> bool {
    let plan = StreamPlan::new(config.seed, epoch, shards, config.rank, config.world);
    let queue: Mutex<VecDeque<(u32, u32)>> = Mutex::new(
        plan.shards
            .into_iter()
            .filter_map(|shard| Some((shard, start.map_or(Some(0), |p| p.skip(shard))?)))
            .collect(),
    );
    let lanes = if config.deterministic {
        1
    } else {
        engine.threads().max(1)
    };
    let go_on = AtomicBool::new(true);
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            scope.spawn(|| {
                while go_on.load(Ordering::Relaxed) {
                    let Some((shard, skip)) = queue.lock().ok().and_then(|mut q| q.pop_front())
                    else {
                        return;
                    };
                    if !read_shard(engine, config, (epoch, shard, skip), tx, &go_on) {
                        go_on.store(false, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    go_on.load(Ordering::Relaxed)
}

/// Shard `shard` of `epoch` from batch `skip` into `tx`; `false` when the consumer is gone, a
/// shard failed (the error sent) or another lane said stop.
fn read_shard(
    engine: &dyn Batches,
    config: &InputConfig,
    (epoch, shard, skip): (u32, u32, u32),
    tx: &SyncSender<Item>,
    go_on: &AtomicBool,
) -> bool {
    let mut open = true;
    let work = StreamWork {
        epoch,
        shard,
        first_batch: skip,
        batch_size: config.batch_size.max(1),
    };
    // A batch's shard length is known with its last batch: until then "more to come".
    let result = engine.run_stream(work, &mut |batch, last| {
        let total = if last { batch.index + 1 } else { u32::MAX };
        open = go_on.load(Ordering::Relaxed) && tx.send(Ok((batch, total))).is_ok();
        open
    });
    if let Err(e) = result {
        let _ = tx.send(Err(Box::new(e)));
        return false;
    }
    open
}

impl BatchStream for LocalInput {
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>> {
        match self.rx.as_ref()?.recv().ok()? {
            Ok((batch, total)) => {
                self.position
                    .advance(batch.epoch, batch.shard, batch.index, total);
                Some(Ok(batch))
            }
            Err(e) => Some(Err(e)),
        }
    }

    fn position(&self) -> Position {
        self.position.clone()
    }
}

impl Drop for LocalInput {
    fn drop(&mut self) {
        // Closing the channel makes the producer's next send fail; it finishes at most the
        // batch in progress and exits.
        self.rx.take();
        if let Some(producer) = self.producer.take() {
            let _ = producer.join();
        }
    }
}
