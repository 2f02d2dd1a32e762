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
mod batch;
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
pub use batch::{Batch, Contents};
pub use batches::{Batches, StreamWork, open};
pub use engine::{Engine, ShardWork, available_cores};
pub use error::PipelineError;
pub use image::Image;
pub use input::{BatchStream, BoxError, InputConfig, Position};
pub use local::LocalInput;
pub use plan::{EpochPlan, Shard, StreamPlan, stream_sample_id, stream_sample_of};
pub use rng::SampleRng;
pub use stage::{Params, Stage, StageFactory, StageRegistry};
pub use tensor::{DType, Tensor};
