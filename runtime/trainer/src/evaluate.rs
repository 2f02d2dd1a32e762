//! Scoring a trained model on a stream of batches.

use std::path::Path;

use hetgen_pipeline::BatchStream;
use hetgen_spec::model::{Device, Job, Precision};
use serde::{Deserialize, Serialize};
use tch::{Kind, Reduction, Tensor};

use crate::TrainError;
use crate::device::Placement;
use crate::input::Check;
use crate::models::ModelInfo;
use crate::replicas::Replica;

/// How well a model classifies a stream's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Samples scored.
    pub samples: u64,
    /// Samples whose highest logit is their label.
    pub correct: u64,
    /// `correct / samples` (0 without samples).
    pub accuracy: f64,
    /// Mean cross-entropy (0 without samples).
    pub mean_loss: f64,
}

/// Scores the model saved at `model_file` (the [`crate::MODEL_FILE`] a run wrote; the
/// [`ModelInfo`] beside it says how to rebuild it) on up to `max_batches` batches of `stream`.
///
/// `job` supplies the default device; `device` overrides it. The model runs in eval mode
/// (no dropout, batch-norm running statistics), in fp32, on one device. Building the model
/// before loading its weights draws from torch's process-global generator.
pub fn evaluate(
    job: &Job,
    model_file: &Path,
    device: Option<Device>,
    stream: &mut dyn BatchStream,
    max_batches: Option<u64>,
) -> Result<Evaluation, TrainError> {
    let dir = model_file.parent().unwrap_or(Path::new("."));
    let info = ModelInfo::read(dir)?;
    let placement = Placement::resolve(
        device.unwrap_or(job.trainer.builtin().map_or(Device::Auto, |t| t.device)),
        Precision::Fp32,
    )?;
    let mut replica = Replica::new(&info, placement.devices[0])?;
    replica.load(model_file).map_err(|why| TrainError::Model {
        path: model_file.to_owned(),
        why,
    })?;
    let check = Check {
        shape: info.input_shape,
        classes: info.num_classes,
        pin: false,
    };
    let _guard = tch::no_grad_guard();
    let mut samples = 0u64;
    let mut correct = 0u64;
    let mut loss_sum = 0.0;
    let mut batches = 0u64;
    while max_batches.is_none_or(|max| batches < max) {
        let Some(next) = stream.next_batch() else {
            break;
        };
        let batch = check.prepare(next.map_err(TrainError::Input)?)?;
        let logits = replica
            .logits(&batch.images, false)?
            .f_to_kind(Kind::Float)?;
        let labels = batch.labels.f_to_device(replica.device())?;
        loss_sum += logits
            .f_log_softmax(-1, Kind::Float)?
            .f_nll_loss::<Tensor>(&labels, None, Reduction::Sum, -100)?
            .f_double_value(&[])?;
        correct += logits
            .f_argmax(-1, false)?
            .f_eq_tensor(&labels)?
            .f_sum(Kind::Int64)?
            .f_int64_value(&[])? as u64;
        samples += batch.len as u64;
        batches += 1;
    }
    // Without samples both sums are 0, and so are their means.
    let per_sample = |x: f64| x / samples.max(1) as f64;
    Ok(Evaluation {
        samples,
        correct,
        accuracy: per_sample(correct as f64),
        mean_loss: per_sample(loss_sum),
    })
}
