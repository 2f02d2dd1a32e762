//! Why training or evaluation failed.

use std::path::PathBuf;

use hetgen_pipeline::BoxError;

/// A training or evaluation failure.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The input stream could not be opened or yielded an error.
    #[error("input failed: {0}")]
    Input(#[source] BoxError),
    /// A batch does not have the shape the model was built for.
    #[error("batch shape {got:?} does not match the model's input {want:?}")]
    Shape {
        /// `[height, width, channels]` of the batch.
        got: [u32; 3],
        /// `[height, width, channels]` the model takes.
        want: [u32; 3],
    },
    /// A batch's byte or label count disagrees with its sample count.
    #[error("malformed batch (epoch {epoch}, shard {shard}, index {index}): {why}")]
    Malformed {
        /// Epoch of the batch.
        epoch: u32,
        /// Shard of the batch.
        shard: u32,
        /// Index within the shard.
        index: u32,
        /// What is wrong.
        why: String,
    },
    /// A label is outside `0..num_classes`.
    #[error("label {label} of sample {sample} is outside `0..{classes}` (trainer.num_classes)")]
    Label {
        /// The label.
        label: i64,
        /// The sample id.
        sample: u64,
        /// The model's number of classes.
        classes: u32,
    },
    /// The model cannot take the pipeline's output.
    #[error("`{model}` cannot take input of shape {shape:?}: {why}")]
    ModelInput {
        /// Model name.
        model: String,
        /// `[height, width, channels]` of the pipeline's output.
        shape: [u32; 3],
        /// Why.
        why: String,
    },
    /// `device = "cuda"` was asked for on a machine without a usable GPU.
    #[error(
        "device `cuda` requested but libtorch sees no CUDA device (built without CUDA, or no GPU)"
    )]
    NoCuda,
    /// The job runs the user's script, not the built-in trainer.
    #[error(
        "this job's trainer is a script (`[trainer] script = …`), run under `torchrun`, not the built-in trainer"
    )]
    NotBuiltin,
    /// A checkpoint exists but cannot be read back.
    #[error("checkpoint {} is corrupt: {why}", path.display())]
    CorruptCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What failed.
        why: String,
    },
    /// A checkpoint was written by a different model or optimizer.
    #[error("checkpoint {} does not belong to this job: {why}", path.display())]
    ForeignCheckpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// A trained model could not be loaded.
    #[error("model {} cannot be loaded: {why}", path.display())]
    Model {
        /// The model file.
        path: PathBuf,
        /// What failed.
        why: String,
    },
    /// A file or folder could not be written or read.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The loss of a step is not a finite number: training diverged (lower the learning rate).
    #[error(
        "step {step} failed: the loss is {loss} (training diverged; try a lower learning rate)"
    )]
    NonFinite {
        /// The 1-based step whose loss is not finite.
        step: u64,
        /// The loss.
        loss: f64,
    },
    /// The input prefetch thread could not be started.
    #[error("cannot start the input prefetch thread: {0}")]
    Prefetch(#[source] std::io::Error),
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl TrainError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| TrainError::Io { what, path, source }
    }
}
