//! A batch: which samples it holds, and its contents, which are of one of two kinds.
//!
//! The kind is decided once, where the batch is made (the built-in engine makes images, a
//! Python dataset's workers make tensors), and travels as this enum through the data service's
//! wire (the .proto's `contents` oneof) to the trainer and to Python, where it becomes one of two
//! native batch types: nothing downstream guesses it from what the bytes look like.

use crate::tensor::Tensor;

/// A batch of preprocessed samples, ready for the trainer.
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
    /// The batch's bytes, as [`Batch::contents`] describe them. `Bytes`, so that a batch
    /// received from the network (or written by a Python worker into shared memory) is handed
    /// on without copying it.
    pub data: bytes::Bytes,
    /// What `data` holds.
    pub contents: Contents,
}

/// What a batch's bytes hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Contents {
    /// The built-in pipeline's images: `data` is `[n, height, width, channels]` C-contiguous
    /// `u8` pixels, with a class index per sample.
    Images {
        /// `[height, width, channels]` of one image.
        shape: [u32; 3],
        /// Class index of every sample, in the order of the sample ids.
        labels: Vec<i64>,
    },
    /// What a Python dataset's samples collate into: named tensors of any dtype, each at its
    /// offset in `data`, nested as the dataset returned them.
    Tensors {
        /// In the order `structure`'s leaves number them.
        tensors: Vec<Tensor>,
        /// How they nest, as JSON (see the data service's .proto).
        structure: String,
    },
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
