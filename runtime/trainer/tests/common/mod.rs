//! Shared test fixtures: the `trainer-test` fixture job and a learnable synthetic stream.

#![allow(dead_code)]

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use hetgen_pipeline::{Batch, BatchStream, BoxError, Contents, Position};
use hetgen_spec::model::{BuiltinTrainer, Job, Length, Model, Trainer};
use hetgen_trainer::{Options, Paths, StepRecord, Summary, TrainError};

/// Image side of the fixture's samples.
pub const SIDE: u32 = 12;
/// Classes of the fixture.
pub const CLASSES: u32 = 4;
/// Samples per epoch.
pub const SAMPLES: u64 = 256;
/// Samples per shard.
pub const SHARD: u32 = 64;
/// Samples per batch.
pub const BATCH: u32 = 16;

/// The fixture's job: `model` for `steps` steps on the CPU.
pub fn job(model: Model, steps: u64) -> Job {
    let mut job = hetgen_fixtures::spec("trainer-test").job();
    assert_eq!(job.pipeline.output_shape, [SIDE, SIDE, 1]);
    assert_eq!(builtin(&mut job).num_classes, CLASSES);
    builtin(&mut job).model = model;
    builtin(&mut job).length = Length::Steps(steps);
    job
}

/// The fixture job's built-in trainer settings, to change in a test.
pub fn builtin(job: &mut Job) -> &mut BuiltinTrainer {
    match &mut job.trainer {
        Trainer::Builtin(trainer) => trainer,
        Trainer::Script(_) => panic!("the fixture job uses the built-in trainer"),
    }
}

/// Output folders of one run, under `root`.
pub fn paths(root: &Path) -> Paths {
    Paths {
        model_dir: root.join("model"),
        checkpoint_dir: root.join("checkpoints"),
        output_data_dir: root.join("output"),
    }
}

/// Class `k` is a bright 4x4 square in quadrant `k` of a dark, noisy 12x12 grayscale image.
///
/// Batches follow the epoch plan's structure (shards of [`SHARD`] samples cut into batches of
/// [`BATCH`]) in order, so a [`Position`] resumes the stream exactly.
pub struct Squares {
    /// Varies the noise and the squares' jitter (labels depend on the sample id only).
    pub seed: u64,
    /// Stop after this many epochs; `None`: never.
    pub epochs: Option<u32>,
    /// Reported (and generated) image shape, to provoke shape errors.
    pub shape: [u32; 3],
    /// Fail with an input error instead of yielding this many-th batch (0-based).
    pub fail_at: Option<u64>,
    yielded: u64,
    epoch: u32,
    shard: u32,
    index: u32,
    position: Position,
}

impl Squares {
    /// A stream starting after `start` (at the beginning when `None`).
    pub fn new(seed: u64, epochs: Option<u32>, start: Option<Position>) -> Self {
        let position = start.unwrap_or_default();
        let mut this = Self {
            seed,
            epochs,
            shape: [SIDE, SIDE, 1],
            fail_at: None,
            yielded: 0,
            epoch: position.epoch,
            shard: 0,
            index: 0,
            position: position.clone(),
        };
        // The first batch of the position's epoch not yet yielded.
        loop {
            if this.shard >= shards() {
                this.epoch += 1;
                this.shard = 0;
                this.index = 0;
                break;
            }
            match position.skip(this.shard) {
                Some(k) if k < batches(this.shard) => {
                    this.index = k;
                    break;
                }
                _ => this.shard += 1,
            }
        }
        this
    }
}

fn shards() -> u32 {
    SAMPLES.div_ceil(u64::from(SHARD)) as u32
}

fn shard_len(shard: u32) -> u64 {
    (SAMPLES - u64::from(shard) * u64::from(SHARD)).min(u64::from(SHARD))
}

fn batches(shard: u32) -> u32 {
    shard_len(shard).div_ceil(u64::from(BATCH)) as u32
}

/// A tiny deterministic generator (SplitMix64).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Label of sample `id`.
pub fn label(id: u64) -> i64 {
    (mix(id ^ 0xABCD) % u64::from(CLASSES)) as i64
}

/// Pixels of sample `id` of `epoch` (`[h, w, c]` of `shape`).
pub fn image(seed: u64, epoch: u32, id: u64, shape: [u32; 3]) -> Vec<u8> {
    let [h, w, c] = shape.map(|d| d as usize);
    let mut state = mix(seed ^ mix(u64::from(epoch) ^ mix(id)));
    let mut next = move || {
        state = mix(state);
        state
    };
    let k = label(id) as usize;
    let (top, left) = (
        (k / 2) * h / 2 + (next() % 2) as usize,
        (k % 2) * w / 2 + (next() % 2) as usize,
    );
    let mut px = vec![0u8; h * w * c];
    for y in 0..h {
        for x in 0..w {
            let lit = (top..top + 4).contains(&y) && (left..left + 4).contains(&x);
            for ch in 0..c {
                let noise = (next() % 50) as u8;
                px[(y * w + x) * c + ch] = if lit { 200 + noise } else { noise };
            }
        }
    }
    px
}

impl BatchStream for Squares {
    fn next_batch(&mut self) -> Option<Result<Batch, BoxError>> {
        if self.epochs.is_some_and(|e| self.epoch >= e) {
            return None;
        }
        if self.fail_at == Some(self.yielded) {
            return Some(Err("the test stream failed on purpose".into()));
        }
        let start =
            u64::from(self.shard) * u64::from(SHARD) + u64::from(self.index) * u64::from(BATCH);
        let end = (start + u64::from(BATCH))
            .min(u64::from(self.shard) * u64::from(SHARD) + shard_len(self.shard));
        let ids: Vec<u64> = (start..end).collect();
        let batch = Batch {
            epoch: self.epoch,
            shard: self.shard,
            index: self.index,
            contents: Contents::Images {
                shape: self.shape,
                labels: ids.iter().map(|&i| label(i)).collect(),
            },
            data: ids
                .iter()
                .flat_map(|&i| image(self.seed, self.epoch, i, self.shape))
                .collect(),
            sample_ids: ids,
        };
        self.position
            .advance(self.epoch, self.shard, self.index, batches(self.shard));
        self.yielded += 1;
        self.index += 1;
        if self.index >= batches(self.shard) {
            self.index = 0;
            self.shard += 1;
            if self.shard >= shards() {
                self.shard = 0;
                self.epoch += 1;
            }
        }
        Some(Ok(batch))
    }

    fn position(&self) -> Position {
        self.position.clone()
    }
}

/// What a test run returns: the summary, every step's loss, and the positions `open` got.
pub type Run = (Summary, Vec<f64>, Vec<Option<Position>>);

/// Trains `job` on a [`Squares`] stream of `seed` into `paths`, returning the summary, every
/// step's loss and the positions `open` was called with.
pub fn run(job: &Job, paths: &Paths, seed: u64) -> Result<Run, TrainError> {
    run_with(job, paths, &mut |start| {
        Squares::new(seed, epochs_of(job), start)
    })
}

/// Torch's generator is process-global and the test harness runs tests on parallel threads:
/// runs that must be reproducible hold this lock so no other run reseeds or draws meanwhile.
static TORCH_RNG: Mutex<()> = Mutex::new(());

/// Takes [`TORCH_RNG`] (a failed test poisoning it does not matter to the others).
pub fn exclusive() -> MutexGuard<'static, ()> {
    TORCH_RNG
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// [`run`] with a custom stream factory.
pub fn run_with(
    job: &Job,
    paths: &Paths,
    make: &mut dyn FnMut(Option<Position>) -> Squares,
) -> Result<Run, TrainError> {
    let _exclusive = exclusive();
    let mut opened = Vec::new();
    let mut open = |start: Option<Position>| -> Result<Box<dyn BatchStream>, BoxError> {
        opened.push(start.clone());
        Ok(Box::new(make(start)))
    };
    let mut losses = Vec::new();
    let mut observe = |r: &StepRecord| losses.push(r.loss);
    let summary =
        hetgen_trainer::train_observed(job, paths, &Options::default(), &mut open, &mut observe)?;
    Ok((summary, losses, opened))
}

/// The stream's epoch limit for `job`.
pub fn epochs_of(job: &Job) -> Option<u32> {
    match job.trainer.builtin().expect("a built-in trainer").length {
        Length::Epochs(e) => Some(e),
        Length::Steps(_) => None,
    }
}
