//! The models a spec can name, built into a `VarStore`, and the description saved beside a
//! trained model so that scoring it later (`evaluate`) can rebuild it without the job.

use std::path::Path;

use hetgen_spec::model::{BuiltinTrainer, Job, Model, Stage};
use serde::{Deserialize, Serialize};
use tch::nn::{self, ModuleT};
use tch::{TchError, Tensor};

use crate::TrainError;

/// The trained weights in `model_dir` (safetensors: readable without libtorch).
pub const MODEL_FILE: &str = "model.safetensors";

/// The [`ModelInfo`] in `model_dir`.
pub const MODEL_INFO_FILE: &str = "model.json";

/// Everything needed to rebuild a trained model and feed it: written as [`MODEL_INFO_FILE`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The architecture.
    pub model: Model,
    /// Classes it predicts.
    pub num_classes: u32,
    /// `[height, width, channels]` of one `u8` input image.
    pub input_shape: [u32; 3],
    /// The `normalize` stages applied after scaling to `[0, 1]`, in order.
    pub normalize: Vec<Normalization>,
}

/// One per-channel normalisation: `(x - mean) / std`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    /// Per-channel (or one shared) mean.
    pub mean: Vec<f64>,
    /// Per-channel (or one shared) standard deviation.
    pub std: Vec<f64>,
}

impl ModelInfo {
    /// The model a job's built-in trainer trains.
    pub fn of_job(job: &Job, trainer: &BuiltinTrainer) -> Self {
        let normalize = job
            .pipeline
            .stages
            .iter()
            .filter_map(|stage| match stage {
                Stage::Normalize { mean, std } => Some(Normalization {
                    mean: mean.clone(),
                    std: std.clone(),
                }),
                _ => None,
            })
            .collect();
        Self {
            model: trainer.model,
            num_classes: trainer.num_classes,
            input_shape: job.pipeline.output_shape,
            normalize,
        }
    }

    /// Reads [`MODEL_INFO_FILE`] from `dir`.
    pub fn read(dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join(MODEL_INFO_FILE);
        let text = std::fs::read_to_string(&path).map_err(TrainError::io("read", &path))?;
        serde_json::from_str(&text).map_err(|e| TrainError::Model {
            path,
            why: e.to_string(),
        })
    }

    /// Writes [`MODEL_INFO_FILE`] into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), TrainError> {
        let path = dir.join(MODEL_INFO_FILE);
        let text = serde_json::to_string_pretty(self).map_err(|e| TrainError::Model {
            path: path.clone(),
            why: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(TrainError::io("write", &path))
    }
}

/// The spec's name of a model.
pub(crate) fn model_name(model: Model) -> &'static str {
    match model {
        Model::Mlp => "mlp",
        Model::MnistCnn => "mnist-cnn",
        Model::Resnet18 => "resnet18",
        Model::Resnet50 => "resnet50",
    }
}

/// A network mapping an NCHW float batch to logits.
///
/// Our own trait rather than `ModuleT` so that the forward pass reports libtorch errors instead
/// of panicking.
pub(crate) trait Net {
    /// Logits of `xs`; `train` enables dropout and batch-norm statistics updates.
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, TchError>;
}

/// Builds `model` under `root` for `[height, width, channels]` images and `classes` classes.
///
/// Initialisation draws from torch's generator: seed it first for reproducible weights.
pub(crate) fn build(
    root: &nn::Path,
    model: Model,
    shape: [u32; 3],
    classes: u32,
) -> Result<Box<dyn Net>, TrainError> {
    let [h, w, c] = shape.map(i64::from);
    let classes = i64::from(classes);
    let refuse = |why: String| TrainError::ModelInput {
        model: model_name(model).to_owned(),
        shape,
        why,
    };
    if h < 1 || w < 1 || c < 1 {
        return Err(refuse("every dimension must be at least 1".to_owned()));
    }
    if classes < 1 {
        return Err(refuse("num_classes must be at least 1".to_owned()));
    }
    Ok(match model {
        Model::Mlp => Box::new(Mlp::new(root, h * w * c, classes)),
        Model::MnistCnn => {
            // Two unpadded 3x3 convolutions take 4 pixels off each side, the pool halves.
            if h < 6 || w < 6 {
                return Err(refuse(
                    "mnist-cnn needs images of at least 6x6 (two 3x3 convolutions, then a 2x2 pool)"
                        .to_owned(),
                ));
            }
            let flat = 64 * ((h - 4) / 2) * ((w - 4) / 2);
            Box::new(MnistCnn::new(root, c, flat, classes))
        }
        Model::Resnet18 | Model::Resnet50 => {
            if c != 3 {
                return Err(refuse(format!(
                    "ResNets take 3-channel (RGB) images, the pipeline emits {c} channel(s); add a \
                     `decode` stage with `channels = 3`"
                )));
            }
            let net: Box<dyn ModuleT> = if model == Model::Resnet18 {
                Box::new(tch::vision::resnet::resnet18(root, classes))
            } else {
                Box::new(tch::vision::resnet::resnet50(root, classes))
            };
            Box::new(Guarded(net))
        }
    })
}

/// flatten → 256 → relu → 128 → relu → classes.
struct Mlp {
    fc1: nn::Linear,
    fc2: nn::Linear,
    fc3: nn::Linear,
}

impl Mlp {
    fn new(root: &nn::Path, inputs: i64, classes: i64) -> Self {
        Self {
            fc1: nn::linear(root / "fc1", inputs, 256, Default::default()),
            fc2: nn::linear(root / "fc2", 256, 128, Default::default()),
            fc3: nn::linear(root / "fc3", 128, classes, Default::default()),
        }
    }
}

impl Net for Mlp {
    fn forward(&self, xs: &Tensor, _train: bool) -> Result<Tensor, TchError> {
        let xs = xs.f_flatten(1, -1)?;
        let xs = linear(&xs, &self.fc1)?.f_relu()?;
        let xs = linear(&xs, &self.fc2)?.f_relu()?;
        linear(&xs, &self.fc3)
    }
}

/// conv3x3(32) → relu → conv3x3(64) → relu → maxpool 2 → dropout 0.25 → flatten → fc128 →
/// relu → dropout 0.5 → fc classes (the Keras/PyTorch MNIST example network).
struct MnistCnn {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

impl MnistCnn {
    fn new(root: &nn::Path, channels: i64, flat: i64, classes: i64) -> Self {
        Self {
            conv1: nn::conv2d(root / "conv1", channels, 32, 3, Default::default()),
            conv2: nn::conv2d(root / "conv2", 32, 64, 3, Default::default()),
            fc1: nn::linear(root / "fc1", flat, 128, Default::default()),
            fc2: nn::linear(root / "fc2", 128, classes, Default::default()),
        }
    }
}

impl Net for MnistCnn {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, TchError> {
        let xs = conv3x3(xs, &self.conv1)?.f_relu()?;
        let xs = conv3x3(&xs, &self.conv2)?.f_relu()?;
        let xs = xs
            .f_max_pool2d([2, 2], [2, 2], [0, 0], [1, 1], false)?
            .f_dropout(0.25, train)?
            .f_flatten(1, -1)?;
        let xs = linear(&xs, &self.fc1)?.f_relu()?.f_dropout(0.5, train)?;
        linear(&xs, &self.fc2)
    }
}

fn linear(xs: &Tensor, layer: &nn::Linear) -> Result<Tensor, TchError> {
    xs.f_linear(&layer.ws, layer.bs.as_ref())
}

/// A stride-1, unpadded convolution (how [`MnistCnn`] builds its layers).
fn conv3x3(xs: &Tensor, layer: &nn::Conv2D) -> Result<Tensor, TchError> {
    xs.f_conv2d(&layer.ws, layer.bs.as_ref(), [1, 1], [0, 0], [1, 1], 1)
}

/// A tch module whose libtorch failures (tch panics on them) become errors.
struct Guarded(Box<dyn ModuleT>);

impl Net for Guarded {
    fn forward(&self, xs: &Tensor, train: bool) -> Result<Tensor, TchError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.0.forward_t(xs, train)))
            .map_err(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "the forward pass panicked".to_owned());
                TchError::Torch(why)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits_shape(model: Model, shape: [u32; 3]) -> Result<Vec<i64>, TrainError> {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let net = build(&vs.root(), model, shape, 5)?;
        let [h, w, c] = shape.map(i64::from);
        let xs = Tensor::f_zeros([2, c, h, w], (tch::Kind::Float, tch::Device::Cpu))?;
        Ok(net.forward(&xs, true)?.size())
    }

    #[test]
    fn models_produce_logits() {
        assert_eq!(logits_shape(Model::Mlp, [12, 12, 1]).unwrap(), vec![2, 5]);
        assert_eq!(
            logits_shape(Model::MnistCnn, [12, 12, 1]).unwrap(),
            vec![2, 5]
        );
        assert_eq!(
            logits_shape(Model::MnistCnn, [28, 20, 3]).unwrap(),
            vec![2, 5]
        );
        assert_eq!(
            logits_shape(Model::Resnet18, [32, 32, 3]).unwrap(),
            vec![2, 5]
        );
    }

    #[test]
    fn resnet_refuses_grayscale_and_cnn_tiny_images() {
        assert!(matches!(
            logits_shape(Model::Resnet50, [32, 32, 1]),
            Err(TrainError::ModelInput { .. })
        ));
        assert!(matches!(
            logits_shape(Model::MnistCnn, [5, 28, 1]),
            Err(TrainError::ModelInput { .. })
        ));
    }
}
