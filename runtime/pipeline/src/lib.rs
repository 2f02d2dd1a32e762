//! hetgen's data pipeline: what a data server (or a homogeneous trainer) runs on its CPU cores.
//!
//! The path of a sample: a [`source`] reads sample `id` of the epoch (encoded bytes or generated
//! pixels) with its label; the [`Stage`]s of the spec turn it into an HWC `u8` image of the
//! pipeline's output shape; the [`Engine`] runs a shard's samples on a thread pool and packs them,
//! in shard order, into [`Batch`]es. `normalize` and `to_tensor` are not run here: they run on the
//! trainer's device, so batches travel as compact `u8`.
//!
//! Randomness comes from [`SampleRng`], seeded by (job seed, epoch, sample id) alone, so a
//! sample comes out the same whichever server or thread produced it.

mod alloc;
mod batches;
pub mod codec;
pub mod engine;
mod error;
pub mod image;
pub mod input;
mod local;
pub mod ops;
pub mod plan;
pub mod profile;
pub mod python;
pub mod rng;
pub mod source;
pub mod stage;
pub mod tensor;

pub use alloc::{release_free_memory, tune_allocator};
pub use batches::{Batches, open};
pub use engine::{Engine, ShardWork, available_cores};
pub use error::PipelineError;
pub use image::Image;
pub use input::{BatchStream, BoxError, InputConfig, Position};
pub use local::LocalInput;
pub use plan::{EpochPlan, Shard};
pub use rng::SampleRng;
pub use stage::{Params, Stage, StageFactory, StageRegistry};
pub use tensor::{DType, Tensor};

/// A batch of preprocessed samples, ready for the trainer: the built-in pipeline's `u8` images
/// with a label each (`tensors` empty), or the tensors a Python dataset's samples collate into.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Epoch the samples belong to.
    pub epoch: u32,
    /// Shard of the epoch plan they came from.
    pub shard: u32,
    /// Index of the batch within its shard.
    pub index: u32,
    /// Sample ids, in order.
    pub sample_ids: Vec<u64>,
    /// Class index of every sample (built-in images; empty for a Python dataset).
    pub labels: Vec<i64>,
    /// The batch's bytes: `[n, height, width, channels]` C-contiguous `u8` pixels, or every
    /// tensor's bytes at its offset. `Bytes`, so that a batch received from the network (or
    /// written by a Python worker into shared memory) is handed on without copying it.
    pub data: bytes::Bytes,
    /// `[height, width, channels]` of one image (built-in images; zeros otherwise).
    pub shape: [u32; 3],
    /// A Python dataset's tensors, in `data`; empty for built-in images.
    pub tensors: Vec<Tensor>,
    /// How `tensors` nest, as JSON (see the data service's .proto); empty for built-in images.
    pub structure: String,
}

impl Batch {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.sample_ids.len()
    }

    /// Whether the batch holds no sample.
    pub fn is_empty(&self) -> bool {
        self.sample_ids.is_empty()
    }
}
