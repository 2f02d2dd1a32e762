//! Why the pipeline could not be built or could not produce a sample.

use std::path::PathBuf;

use crate::BoxError;

/// A pipeline failure.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The source's channel has no local folder.
    #[error(
        "the source reads channel `{0}`, but this instance has no data for it (is the channel delivered to this instance group?)"
    )]
    NoChannel(String),
    /// The source's folder could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The source holds no samples.
    #[error("{}: {why}", path.display())]
    EmptySource {
        /// The channel folder.
        path: PathBuf,
        /// What was expected.
        why: String,
    },
    /// A tar shard or label file is malformed.
    #[error("{}: {why}", path.display())]
    BadData {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A custom stage is not registered in the launcher.
    #[error(
        "custom stage `{name}` is not registered (known: {known}); register it in the launcher crate's main.rs"
    )]
    UnknownStage {
        /// The stage name.
        name: String,
        /// Registered names.
        known: String,
    },
    /// A custom stage refused its parameters.
    #[error("custom stage `{name}`: {source}")]
    StageParams {
        /// The stage name.
        name: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A sample failed in a stage.
    #[error("sample {sample}: {stage}: {why}")]
    Sample {
        /// The sample id.
        sample: u64,
        /// The stage (or `source`).
        stage: String,
        /// What failed.
        why: String,
    },
    /// A sample came out of the last stage with the wrong shape.
    #[error(
        "sample {sample} came out as {got:?}, not the pipeline's output shape {want:?}; add a resize or crop stage so every sample has one size"
    )]
    Shape {
        /// The sample id.
        sample: u64,
        /// Its `[height, width, channels]`.
        got: [u32; 3],
        /// `pipeline.output_shape`.
        want: [u32; 3],
    },
    /// A sample id outside the source.
    #[error("sample {sample} does not exist: the source has {samples} samples")]
    UnknownSample {
        /// The id.
        sample: u64,
        /// Samples in the source.
        samples: u64,
    },
    /// The Python dataset could not be built on this host (its import, the factory, `len`).
    #[error("the Python dataset `{dataset}` could not be built:\n{message}")]
    PythonSetup {
        /// `file.py:factory`.
        dataset: String,
        /// The traceback or the reason.
        message: String,
    },
    /// The user's Python code failed on a batch with no one sample to blame.
    #[error("{stage}: {message}")]
    Python {
        /// `collate`, …
        stage: String,
        /// The traceback or the reason.
        message: String,
    },
    /// A batch killed the worker making it, time after time.
    #[error(
        "the Python worker died {deaths} times making the batch of samples {first}..={last} (last: {how}); a sample of it crashes the process (memory? native code?)"
    )]
    WorkerDied {
        /// Deaths in a row.
        deaths: u32,
        /// How the last one ended.
        how: String,
        /// The batch's first sample id.
        first: u64,
        /// Its last.
        last: u64,
    },
    /// The image engine was asked to run a Python dataset.
    #[error(
        "the source is the Python dataset `{0}`: it runs in Python worker processes (`hetgen_pipeline::open`), not in hetgen's image engine"
    )]
    NotImages(String),
    /// The thread pool could not start.
    #[error("cannot start the pipeline's thread pool: {0}")]
    Pool(String),
}
