//! A dataset of shards (`hetgen.Shards`) read by real worker processes (`python3` on `PATH`
//! with numpy): a shard's batches in order with the last one marked, a read that starts
//! mid-shard giving the same samples, a worker killed mid-shard replaced without a sample lost
//! or doubled, and a shard that raises named with the sample's position.

use hetgen_pipeline::python::Workers;
use hetgen_pipeline::{
    Batch, Batches, Contents, PipelineError, StreamWork, stream_sample_id, stream_sample_of,
};

mod python_workers;

/// Shards named `name:length`; a sample is its shard's number and its position, and a draw
/// from numpy's global generator (seeded per sample by the worker). The object is what
/// `hetgen.Shards` is to a worker: a `shards` list and a `read` function.
const SHARDS: &str = r#"
import os, signal
import numpy as np

class Shards:
    def __init__(self, shards, read):
        self.shards, self.read = shards, read

def make(path, hyperparameters):
    def read(name):
        number, length = name.split(":")
        for position in range(int(length)):
            marker = os.path.join(path, f"die-{number}-{position}")
            if os.path.exists(marker) and not os.path.exists(marker + ".done"):
                open(marker + ".done", "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            if os.path.exists(os.path.join(path, f"raise-{number}-{position}")):
                raise ValueError(f"record {position} of {name} is truncated")
            yield {"at": np.array([int(number), position], dtype=np.int64),
                   "noise": np.random.rand(1)}
    return Shards(["0:5", "1:0", "2:7", "3:6"], read)
"#;

fn workers(threads: usize) -> (tempfile::TempDir, Workers) {
    let (dir, workers) = python_workers::workers("shards.py", SHARDS, "make", None, threads);
    (dir, workers.unwrap())
}

/// Every batch of `shard` from batch `first`, with its last-batch flag.
fn read(
    workers: &dyn Batches,
    shard: u32,
    first: u32,
    batch_size: u32,
) -> Result<Vec<(Batch, bool)>, PipelineError> {
    let mut out = Vec::new();
    workers.run_stream(
        StreamWork {
            epoch: 3,
            shard,
            first_batch: first,
            batch_size,
        },
        &mut |batch, last| {
            out.push((batch, last));
            true
        },
    )?;
    Ok(out)
}

/// Each sample of `batch` as (shard, position, noise).
fn samples(batch: &Batch) -> Vec<(i64, i64, f64)> {
    let Contents::Tensors { tensors, .. } = &batch.contents else {
        panic!("tensors were due: {batch:?}")
    };
    let field = |name: &str| {
        let t = tensors.iter().find(|t| t.name == name).unwrap();
        &batch.data[t.offset as usize..(t.offset + t.bytes().unwrap()) as usize]
    };
    let at: Vec<i64> = field("at")
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let noise: Vec<f64> = field("noise")
        .chunks(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    at.chunks(2)
        .zip(noise)
        .map(|(a, n)| (a[0], a[1], n))
        .collect()
}

#[test]
fn a_shard_streams_in_order_with_its_last_batch_marked() {
    let (_dir, workers) = workers(2);
    assert_eq!(workers.shards(), Some(4));
    assert_eq!(workers.samples_per_epoch(), 0);
    let batches = read(&workers, 2, 0, 3).unwrap();
    let sizes: Vec<usize> = batches.iter().map(|(b, _)| b.sample_ids.len()).collect();
    assert_eq!(sizes, [3, 3, 1]);
    let lasts: Vec<bool> = batches.iter().map(|(_, last)| *last).collect();
    assert_eq!(lasts, [false, false, true]);
    for (i, (batch, _)) in batches.iter().enumerate() {
        assert_eq!((batch.epoch, batch.shard, batch.index), (3, 2, i as u32));
        for (id, (shard, position, _)) in batch.sample_ids.iter().zip(samples(batch)) {
            assert_eq!(stream_sample_of(*id), (shard as u32, position as u32));
        }
    }
    let positions: Vec<i64> = batches
        .iter()
        .flat_map(|(b, _)| samples(b))
        .map(|(_, p, _)| p)
        .collect();
    assert_eq!(positions, (0..7).collect::<Vec<_>>());
    // A shard that ends on a batch's edge marks that batch, with none after it.
    let even = read(&workers, 3, 0, 3).unwrap();
    assert_eq!(even.len(), 2);
    assert!(even[1].1 && !even[0].1);
}

#[test]
fn a_read_from_a_later_batch_gives_the_same_samples_and_an_empty_shard_none() {
    let (_dir, workers) = workers(2);
    let whole = read(&workers, 2, 0, 3).unwrap();
    let tail = read(&workers, 2, 1, 3).unwrap();
    assert_eq!(tail.len(), 2);
    for ((a, a_last), (b, b_last)) in whole[1..].iter().zip(&tail) {
        assert_eq!(
            (a.index, &a.sample_ids, a_last),
            (b.index, &b.sample_ids, b_last)
        );
        // Bit for bit, the seeded draws included.
        assert_eq!(a.data, b.data);
    }
    // Another epoch draws other noise for the same samples.
    let mut other = Vec::new();
    workers
        .run_stream(
            StreamWork {
                epoch: 4,
                shard: 2,
                first_batch: 0,
                batch_size: 3,
            },
            &mut |b, _| {
                other.push(b);
                true
            },
        )
        .unwrap();
    assert_eq!(other[0].sample_ids, whole[0].0.sample_ids);
    assert_ne!(samples(&other[0]), samples(&whole[0].0));
    assert!(read(&workers, 1, 0, 3).unwrap().is_empty());
    assert!(matches!(
        read(&workers, 4, 0, 3),
        Err(PipelineError::UnknownShard {
            shard: 4,
            shards: 4
        })
    ));
    assert!(matches!(
        python_workers::all(&workers, 0, &[0, 1], 2),
        Err(PipelineError::NotSamples)
    ));
}

#[test]
fn a_worker_killed_mid_shard_is_replaced_and_no_sample_is_lost_or_doubled() {
    let (dir, workers) = workers(1);
    std::fs::write(dir.path().join("die-2-4"), "").unwrap();
    let batches = read(&workers, 2, 0, 3).unwrap();
    assert!(dir.path().join("die-2-4.done").exists(), "the worker died");
    let ids: Vec<u64> = batches
        .iter()
        .flat_map(|(b, _)| b.sample_ids.clone())
        .collect();
    let want: Vec<u64> = (0..7).map(|p| stream_sample_id(2, p)).collect();
    assert_eq!(ids, want);
    assert!(batches.last().unwrap().1);
}

#[test]
fn a_shard_that_raises_names_the_shard_and_the_position() {
    let (dir, workers) = workers(1);
    std::fs::write(dir.path().join("raise-2-4"), "").unwrap();
    let mut delivered = Vec::new();
    let error = workers
        .run_stream(
            StreamWork {
                epoch: 0,
                shard: 2,
                first_batch: 0,
                batch_size: 3,
            },
            &mut |b, _| {
                delivered.push(b.index);
                true
            },
        )
        .unwrap_err();
    // The batch before the bad sample arrived; the error is the user's, with their frame.
    assert_eq!(delivered, [0]);
    let text = error.to_string();
    assert!(
        text.contains("shard 2 (`2:7`), sample at position 4"),
        "{text}"
    );
    assert!(text.contains("record 4 of 2:7 is truncated"), "{text}");
    assert!(text.contains("shards.py"), "{text}");
}
