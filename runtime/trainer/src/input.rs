//! Batches from the stream to the device: validation, a bounded prefetch thread that overlaps
//! input with compute, and the on-device `to_tensor` / `normalize` stages.
//!
//! Batches travel as `u8` NHWC (four times smaller than float) and become float only on the
//! device, where the conversion is nearly free.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use hetgen_pipeline::{Batch, BatchStream, Contents, Position};
use tch::{Device, Kind, Tensor};

use crate::TrainError;
use crate::models::{ModelInfo, Normalization};

/// Batches the prefetch thread may hold ready: enough to hide one slow batch, few enough that
/// memory stays small and the stream's position stays close to the trainer's.
pub(crate) const PREFETCH_DEPTH: usize = 3;

/// A validated batch as host tensors (pinned when bound for a GPU).
#[derive(Debug)]
pub(crate) struct HostBatch {
    /// `[n, height, width, channels]` `u8`.
    pub images: Tensor,
    /// `[n]` int64 class indices.
    pub labels: Tensor,
    /// Number of samples.
    pub len: usize,
    /// Epoch of the samples.
    pub epoch: u32,
}

/// A batch with the stream position right after it: the position a checkpoint taken after
/// training on this batch must record (the stream itself may already be further ahead).
#[derive(Debug)]
pub(crate) struct Item {
    pub batch: HostBatch,
    pub position: Position,
}

/// What every batch must satisfy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check {
    /// `[height, width, channels]` the model takes.
    pub shape: [u32; 3],
    /// Labels must be below this.
    pub classes: u32,
    /// Copy the pixels into page-locked memory (for asynchronous copies to a GPU).
    pub pin: bool,
}

impl Check {
    /// Validates `batch` and turns it into host tensors.
    pub fn prepare(&self, batch: Batch) -> Result<HostBatch, TrainError> {
        let labels = self.validate(&batch)?;
        let [h, w, c] = self.shape.map(i64::from);
        let n = batch.len() as i64;
        let mut images = Tensor::f_from_slice(&batch.data)?.f_view([n, h, w, c])?;
        let mut labels = Tensor::f_from_slice(labels)?;
        if self.pin {
            images = images.f_pin_memory(Device::Cuda(0))?;
            labels = labels.f_pin_memory(Device::Cuda(0))?;
        }
        Ok(HostBatch {
            images,
            labels,
            len: batch.len(),
            epoch: batch.epoch,
        })
    }

    /// Kind, shape, sizes and labels of `batch`; its labels when they all hold.
    pub fn validate<'a>(&self, batch: &'a Batch) -> Result<&'a [i64], TrainError> {
        let malformed = |why: String| TrainError::Malformed {
            epoch: batch.epoch,
            shard: batch.shard,
            index: batch.index,
            why,
        };
        let (shape, labels) = match &batch.contents {
            Contents::Images { shape, labels } => (*shape, labels),
            Contents::Tensors { .. } => {
                return Err(malformed(
                    "a Python dataset's tensors: this trainer trains on the built-in pipeline's images"
                        .to_owned(),
                ));
            }
        };
        if shape != self.shape {
            return Err(TrainError::Shape {
                got: shape,
                want: self.shape,
            });
        }
        let n = batch.len();
        if n == 0 {
            return Err(malformed("the batch holds no sample".to_owned()));
        }
        let pixels = shape.iter().map(|&d| d as usize).product::<usize>();
        if Some(batch.data.len()) != n.checked_mul(pixels) {
            return Err(malformed(format!(
                "{} pixel bytes for {n} samples of {shape:?} (want {})",
                batch.data.len(),
                n.saturating_mul(pixels)
            )));
        }
        if labels.len() != n {
            return Err(malformed(format!(
                "{} labels for {n} samples",
                labels.len()
            )));
        }
        let classes = i64::from(self.classes);
        if let Some((label, sample)) = labels
            .iter()
            .zip(&batch.sample_ids)
            .find(|(label, _)| !(0..classes).contains(*label))
        {
            return Err(TrainError::Label {
                label: *label,
                sample: *sample,
                classes: self.classes,
            });
        }
        Ok(labels)
    }
}

/// A background thread pulling batches from the stream into a bounded channel.
///
/// The trainer blocks on [`Prefetcher::next`] only when the input is slower than the step: that
/// blocked time is the step's `wait_ms`.
pub(crate) struct Prefetcher {
    rx: Option<Receiver<Result<Item, TrainError>>>,
    handle: Option<JoinHandle<()>>,
}

impl Prefetcher {
    /// Starts pulling from `stream`, validating each batch with `check`.
    pub fn spawn(stream: Box<dyn BatchStream>, check: Check) -> Result<Self, TrainError> {
        let (tx, rx) = sync_channel(PREFETCH_DEPTH);
        let handle = std::thread::Builder::new()
            .name("hetgen-prefetch".to_owned())
            .spawn(move || pull(stream, check, tx))
            .map_err(TrainError::Prefetch)?;
        Ok(Self {
            rx: Some(rx),
            handle: Some(handle),
        })
    }

    /// The next batch; `None` when the stream ended.
    pub fn next(&mut self) -> Option<Result<Item, TrainError>> {
        match self.rx.as_ref()?.recv() {
            Ok(item) => Some(item),
            Err(_) => {
                // The thread hung up: the stream ended, or the thread died.
                self.rx = None;
                match self.join() {
                    Ok(()) => None,
                    Err(e) => Some(Err(e)),
                }
            }
        }
    }

    /// Stops the thread: closes the channel so its next send fails, then waits for it (it may
    /// finish pulling one more batch first).
    pub fn stop(mut self) -> Result<(), TrainError> {
        self.rx = None;
        self.join()
    }

    fn join(&mut self) -> Result<(), TrainError> {
        match self.handle.take() {
            Some(handle) => handle.join().map_err(|_| {
                TrainError::Input("the input prefetch thread panicked".to_owned().into())
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.rx = None;
        // A panic of the thread was already reported by the panic hook; nothing to add here.
        let _ = self.join();
    }
}

/// The prefetch thread: pull, validate, send; stop at the stream's end, its first error, or when
/// the trainer closes the channel.
fn pull(mut stream: Box<dyn BatchStream>, check: Check, tx: SyncSender<Result<Item, TrainError>>) {
    while let Some(next) = stream.next_batch() {
        let item = match next {
            Ok(batch) => {
                let position = stream.position();
                check.prepare(batch).map(|batch| Item { batch, position })
            }
            Err(e) => Err(TrainError::Input(e)),
        };
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return;
        }
    }
}

/// The on-device stages: `u8` NHWC → float NCHW in `[0, 1]` (`to_tensor`), then each
/// `normalize` in spec order.
#[derive(Debug)]
pub(crate) struct Preprocess {
    /// `(mean, std)`, each `[1, channels, 1, 1]` on the device.
    normalize: Vec<(Tensor, Tensor)>,
}

impl Preprocess {
    /// The stages of `info`, with their constants on `device`.
    pub fn new(info: &ModelInfo, device: Device) -> Result<Self, TrainError> {
        let channels = info.input_shape[2] as usize;
        let normalize = info
            .normalize
            .iter()
            .map(|n| {
                Ok((
                    channel_constant(info, n, &n.mean, channels, device)?,
                    channel_constant(info, n, &n.std, channels, device)?,
                ))
            })
            .collect::<Result<Vec<_>, TrainError>>()?;
        Ok(Self { normalize })
    }

    /// Copies `images` (`u8` NHWC on the host) to `device` and applies the stages.
    pub fn apply(&self, images: &Tensor, device: Device) -> Result<Tensor, TrainError> {
        let images = images.f_to_device_(device, Kind::Uint8, device.is_cuda(), false)?;
        let mut x = images
            .f_to_kind(Kind::Float)?
            .f_permute([0, 3, 1, 2])?
            .f_div_scalar(255.0)?;
        for (mean, std) in &self.normalize {
            x = x.f_sub(mean)?.f_div(std)?;
        }
        Ok(x)
    }
}

/// One normalisation constant as `[1, channels, 1, 1]`, broadcasting a single value.
fn channel_constant(
    info: &ModelInfo,
    n: &Normalization,
    values: &[f64],
    channels: usize,
    device: Device,
) -> Result<Tensor, TrainError> {
    let values: Vec<f32> = match values.len() {
        1 => vec![values[0] as f32; channels],
        len if len == channels => values.iter().map(|&v| v as f32).collect(),
        len => {
            return Err(TrainError::ModelInput {
                model: crate::models::model_name(info.model).to_owned(),
                shape: info.input_shape,
                why: format!(
                    "normalize has {len} values (mean {:?}, std {:?}) for {channels} channel(s)",
                    n.mean, n.std
                ),
            });
        }
    };
    Ok(Tensor::f_from_slice(&values)?
        .f_view([1, channels as i64, 1, 1])?
        .f_to_device(device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetgen_spec::model::Model;

    fn batch(shape: [u32; 3], n: usize) -> Batch {
        let pixels = shape.iter().map(|&d| d as usize).product::<usize>();
        Batch {
            epoch: 0,
            shard: 1,
            index: 2,
            sample_ids: (0..n as u64).collect(),
            data: vec![0; n * pixels].into(),
            contents: Contents::Images {
                shape,
                labels: vec![0; n],
            },
        }
    }

    const CHECK: Check = Check {
        shape: [4, 4, 1],
        classes: 3,
        pin: false,
    };

    #[test]
    fn validation_names_what_is_wrong() {
        assert!(CHECK.validate(&batch([4, 4, 1], 2)).is_ok());
        assert!(matches!(
            CHECK.validate(&batch([4, 5, 1], 2)),
            Err(TrainError::Shape {
                got: [4, 5, 1],
                want: [4, 4, 1]
            })
        ));
        let mut short = batch([4, 4, 1], 2);
        short.data.truncate(short.data.len() - 1);
        assert!(matches!(
            CHECK.validate(&short),
            Err(TrainError::Malformed { .. })
        ));
        let mut labels = batch([4, 4, 1], 2);
        labels_of(&mut labels).push(1);
        assert!(matches!(
            CHECK.validate(&labels),
            Err(TrainError::Malformed { .. })
        ));
        let mut label = batch([4, 4, 1], 2);
        labels_of(&mut label)[1] = 3;
        assert!(matches!(
            CHECK.validate(&label),
            Err(TrainError::Label {
                label: 3,
                sample: 1,
                classes: 3
            })
        ));
        assert!(matches!(
            CHECK.validate(&batch([4, 4, 1], 0)),
            Err(TrainError::Malformed { .. })
        ));
        let tensors = Batch {
            contents: Contents::Tensors {
                tensors: Vec::new(),
                structure: String::new(),
            },
            ..batch([4, 4, 1], 2)
        };
        assert!(matches!(
            CHECK.validate(&tensors),
            Err(TrainError::Malformed { why, .. }) if why.contains("Python dataset")
        ));
    }

    fn labels_of(batch: &mut Batch) -> &mut Vec<i64> {
        match &mut batch.contents {
            Contents::Images { labels, .. } => labels,
            Contents::Tensors { .. } => unreachable!(),
        }
    }

    #[test]
    fn preprocess_scales_permutes_and_normalizes() {
        let info = ModelInfo {
            model: Model::Mlp,
            num_classes: 2,
            input_shape: [1, 2, 2],
            normalize: vec![Normalization {
                mean: vec![0.5, 0.0],
                std: vec![0.5],
            }],
        };
        let pre = Preprocess::new(&info, Device::Cpu).unwrap();
        // One sample, one row, two pixels of two channels: NHWC [[[[255, 0], [0, 255]]]].
        let images = Tensor::from_slice(&[255u8, 0, 0, 255]).view([1, 1, 2, 2]);
        let x = pre.apply(&images, Device::Cpu).unwrap();
        assert_eq!(x.size(), vec![1, 2, 1, 2]);
        let got = Vec::<f32>::try_from(x.flatten(0, -1)).unwrap();
        // Channel 0: [1, 0] → [(1-.5)/.5, (0-.5)/.5]; channel 1: [0, 1] → [0, 2].
        assert_eq!(got, vec![1.0, -1.0, 0.0, 2.0]);

        let bad = ModelInfo {
            normalize: vec![Normalization {
                mean: vec![0.5; 3],
                std: vec![0.5],
            }],
            ..info
        };
        assert!(matches!(
            Preprocess::new(&bad, Device::Cpu),
            Err(TrainError::ModelInput { .. })
        ));
    }
}
