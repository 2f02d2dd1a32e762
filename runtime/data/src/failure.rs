//! A sample the user's code failed on, as it crosses the wire.
//!
//! A data server whose pipeline fails on a sample ends the shard's stream with `DataLoss`
//! and this in the status's details (JSON, gRPC's `grpc-status-details-bin`), so that the
//! trainer's client reads the sample, the stage and the reason back as they were, not out of
//! the message's text; `hetgen.DataError` hands them to the script as attributes. The same
//! failure in this host's own pipeline (hybrid or local input) is read from the error itself.

use hetgen_pipeline::PipelineError;
use serde::{Deserialize, Serialize};

/// One sample's failure in the pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleFailure {
    /// The sample id.
    pub sample: u64,
    /// Where it failed: `__getitem__`, `collate`, a built-in stage's name, `source`.
    pub stage: String,
    /// Why: for a Python dataset, the traceback from the user's frames.
    pub why: String,
}

impl SampleFailure {
    /// The sample failure `error` is, if it blames one.
    pub fn of(error: &PipelineError) -> Option<SampleFailure> {
        // Whatever the error blames a sample for: an exception, a deadline, a crash.
        error
            .blamed_sample()
            .map(|(sample, stage, why)| SampleFailure {
                sample,
                stage: stage.to_owned(),
                why,
            })
    }

    /// As a status's details.
    pub fn to_details(&self) -> bytes::Bytes {
        serde_json::to_vec(self)
            .expect("a sample failure serializes")
            .into()
    }

    /// From a status's details; `None` when they are not a sample failure.
    pub fn from_details(details: &[u8]) -> Option<SampleFailure> {
        serde_json::from_slice(details).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_failure_round_trips_through_status_details() {
        let error = PipelineError::Sample {
            sample: 93,
            stage: "__getitem__".into(),
            why: "Traceback (most recent call last):\n  File \"data.py\"\nKeyError: 'label'".into(),
        };
        let failure = SampleFailure::of(&error).unwrap();
        assert_eq!(failure.sample, 93);
        assert_eq!(
            SampleFailure::from_details(&failure.to_details()),
            Some(failure)
        );
        assert_eq!(SampleFailure::from_details(b""), None);
        assert_eq!(SampleFailure::of(&PipelineError::Pool("x".into())), None);
    }
}
