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
    /// A shard outside a dataset of shards.
    #[error("shard {shard} does not exist: the dataset has {shards} shards")]
    UnknownShard {
        /// The index asked for.
        shard: u32,
        /// Shards in the dataset.
        shards: u32,
    },
    /// A shard's samples were asked for by id from a map-style source, or by id from a
    /// dataset of shards: the trainer's plan and the host's dataset disagree.
    #[error("the host's dataset is a dataset of shards; its samples have no ids to ask for")]
    NotSamples,
    /// See [`PipelineError::NotSamples`].
    #[error("the host's source is not a dataset of shards (`hetgen.Shards`)")]
    NotShards,
    /// A shard past the 2^32 samples a shard may hold.
    #[error("shard {shard} holds more than 4294967295 samples, the most one shard may hold")]
    ShardTooLong {
        /// The shard.
        shard: u32,
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
    /// One sample kills the Python worker that makes it: its batch's, and then workers making
    /// it alone.
    #[error(
        "sample {sample} kills the Python worker that makes it: the worker died {deaths} times, making the sample's batch and then the sample alone (last: {how}); look for a crash in native code that `__getitem__` calls, or for the memory this sample takes"
    )]
    WorkerDied {
        /// Deaths in all, of the batch's worker and of those making the sample alone.
        deaths: u32,
        /// How the last one ended.
        how: String,
        /// The sample.
        sample: u64,
    },
    /// A batch kills the Python worker that makes it, though none of its samples alone does.
    #[error(
        "the Python worker died {deaths} times making the batch of samples {samples} (last: {how}), though none of them alone kills it: the batch as a whole does (its memory: a smaller `batch_size`; with SIGBUS, a bigger `/dev/shm`), or something outside the dataset kills the workers"
    )]
    BatchDied {
        /// Deaths in all.
        deaths: u32,
        /// How the last one ended.
        how: String,
        /// The batch's sample ids (the first few, with a count of the rest).
        samples: String,
    },
    /// A sample's `__getitem__` outlasted the per-sample deadline.
    #[error(
        "sample {sample}: `__getitem__` took longer than {seconds} s (`{var}`), so its worker was stopped; where it was:\n{stack}"
    )]
    SampleTimeout {
        /// The sample id.
        sample: u64,
        /// The deadline.
        seconds: f64,
        /// The variable that sets it.
        var: &'static str,
        /// The worker's Python stack at the deadline, from the user's frames.
        stack: String,
    },
    /// A worker outlasted the deadline outside any one sample (collating a batch).
    #[error(
        "{stage} took longer than {seconds} s (`{var}`), so its Python worker was stopped; where it was:\n{stack}"
    )]
    Timeout {
        /// What it was doing.
        stage: String,
        /// The deadline.
        seconds: f64,
        /// The variable that sets it.
        var: &'static str,
        /// The worker's Python stack at the deadline.
        stack: String,
    },
    /// A setting of the pipeline's environment is not valid.
    #[error("`{var}` is `{value}`; it must be {expected}")]
    Setting {
        /// The environment variable.
        var: &'static str,
        /// What it says.
        value: String,
        /// What it may say.
        expected: &'static str,
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

impl PipelineError {
    /// The sample this error blames, the stage it failed in, and why (the traceback, the stack
    /// where it was stuck, how the workers making it died), when it blames one.
    pub fn blamed_sample(&self) -> Option<(u64, &str, String)> {
        match self {
            PipelineError::Sample { sample, stage, why } => Some((*sample, stage, why.clone())),
            PipelineError::SampleTimeout { sample, .. }
            | PipelineError::WorkerDied { sample, .. } => {
                // The message less its `sample N: ` (or `sample N `) opening.
                let text = self.to_string();
                let why = text
                    .strip_prefix(&format!("sample {sample}"))
                    .map(|rest| rest.trim_start_matches(':').trim_start())
                    .unwrap_or(&text)
                    .to_owned();
                Some((*sample, "__getitem__", why))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_name_a_sample_blame_it_with_the_stage_and_why() {
        let timeout = PipelineError::SampleTimeout {
            sample: 45,
            seconds: 2.0,
            var: "HETGEN_SAMPLE_TIMEOUT_S",
            stack: "  File \"data.py\", line 9 in __getitem__".into(),
        };
        let (sample, stage, why) = timeout.blamed_sample().unwrap();
        assert_eq!((sample, stage), (45, "__getitem__"));
        assert!(
            why.starts_with("`__getitem__` took longer than 2 s"),
            "{why}"
        );
        assert!(why.ends_with("line 9 in __getitem__"), "{why}");
        let died = PipelineError::WorkerDied {
            deaths: 3,
            how: "killed by signal 11 (SIGSEGV: a crash in native code)".into(),
            sample: 7,
        };
        assert!(
            died.blamed_sample()
                .unwrap()
                .2
                .starts_with("kills the Python worker")
        );
        assert!(PipelineError::Pool("x".into()).blamed_sample().is_none());
    }
}
