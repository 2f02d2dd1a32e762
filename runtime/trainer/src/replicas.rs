//! Data parallelism inside one process: one model replica per GPU (one on the CPU).
//!
//! Every step splits the batch into one slice per replica, runs forward and backward on each,
//! sums the slice-weighted gradients onto replica 0, lets the optimizer update replica 0, and
//! copies replica 0's variables (weights and batch-norm statistics) to the others. Simple and
//! exactly equivalent to training on the whole batch on one device (up to float summation
//! order), which NCCL all-reduce would only make faster.

use std::path::Path;

use tch::nn::VarStore;
use tch::{Device, Kind, Reduction, TchError, Tensor};

use crate::TrainError;
use crate::device::Placement;
use crate::input::{HostBatch, Preprocess};
use crate::models::{self, ModelInfo, Net};
use crate::saved::Saved;

/// One model on one device, with its preprocessing constants.
pub(crate) struct Replica {
    device: Device,
    /// Owns the variables (`params` and `vars` are handles into it).
    _vs: VarStore,
    net: Box<dyn Net>,
    pre: Preprocess,
    /// Trainable parameters, sorted by name (the optimizer's order).
    params: Vec<(String, Tensor)>,
    /// Every variable (parameters and buffers), sorted by name.
    vars: Vec<(String, Tensor)>,
}

impl Replica {
    /// Builds `info`'s model on `device`; its initial weights come from torch's generator.
    pub fn new(info: &ModelInfo, device: Device) -> Result<Self, TrainError> {
        let vs = VarStore::new(device);
        let net = models::build(&vs.root(), info.model, info.input_shape, info.num_classes)?;
        let pre = Preprocess::new(info, device)?;
        let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let params = vars
            .iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect();
        Ok(Self {
            device,
            _vs: vs,
            net,
            pre,
            params,
            vars,
        })
    }

    /// Logits of a host batch's images (eval mode when `train` is false).
    pub fn logits(&self, images: &Tensor, train: bool) -> Result<Tensor, TrainError> {
        let x = self.pre.apply(images, self.device)?;
        Ok(self.net.forward(&x, train)?)
    }

    /// Forward and backward passes of one slice of a batch; returns its mean loss, detached.
    /// The loss is multiplied by the slice's `share` of the batch, so that the slices' summed
    /// gradients are the gradient of the whole batch's mean loss, and by `loss_scale`.
    fn backward(
        &self,
        images: &Tensor,
        labels: Tensor,
        autocast: bool,
        share: f64,
        loss_scale: f64,
    ) -> Result<Tensor, TrainError> {
        let labels = labels.f_to_device_(self.device, Kind::Int64, self.device.is_cuda(), false)?;
        let x = self.pre.apply(images, self.device)?;
        let logits = tch::autocast(autocast, || self.net.forward(&x, true))?;
        let loss = logits
            .f_to_kind(Kind::Float)?
            .f_log_softmax(-1, Kind::Float)?
            .f_nll_loss::<Tensor>(&labels, None, Reduction::Mean, -100)?;
        let scaled = if share == 1.0 && loss_scale == 1.0 {
            loss.shallow_clone()
        } else {
            loss.f_mul_scalar(share * loss_scale)?
        };
        scaled.f_backward()?;
        Ok(loss.f_detach()?)
    }

    /// The device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Writes every variable to `path`: safetensors when it ends in `.safetensors` (copied to
    /// the CPU first), else libtorch's format.
    pub fn save(&self, path: &Path) -> Result<(), TchError> {
        if path.extension().is_some_and(|e| e == "safetensors") {
            let cpu = self
                .vars
                .iter()
                .map(|(n, t)| Ok((n.as_str(), t.f_to_device(Device::Cpu)?.f_contiguous()?)))
                .collect::<Result<Vec<_>, TchError>>()?;
            Tensor::write_safetensors(&cpu, path)
        } else {
            Tensor::save_multi(&self.vars, path)
        }
    }

    /// Loads every variable from `path` (as written by [`Self::save`]); a missing tensor or one
    /// of another shape is an error naming it.
    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        let tensors = if path.extension().is_some_and(|e| e == "safetensors") {
            Tensor::read_safetensors(path)
        } else {
            Tensor::load_multi_with_device(path, self.device)
        }
        .map_err(|e| e.to_string())?;
        let mut saved = Saved::new(tensors);
        let _guard = tch::no_grad_guard();
        for (name, var) in &mut self.vars {
            saved.restore(name, var, "the model")?;
        }
        Ok(())
    }
}

/// The loss, gradients and overflow flag of one step's forward and backward passes.
pub(crate) struct Backward {
    /// Mean cross-entropy over the whole batch.
    pub loss: f64,
    /// Gradient of the mean loss for each parameter of replica 0, in the optimizer's order,
    /// already divided by the loss scale.
    pub grads: Vec<Tensor>,
    /// Whether a gradient overflowed (fp16 only; the step must then be skipped).
    pub overflow: bool,
}

/// The replicas of a run.
pub(crate) struct Replicas {
    replicas: Vec<Replica>,
    autocast: bool,
}

impl Replicas {
    /// One replica per device of `placement`, all with the weights torch's generator gives after
    /// `tch::manual_seed(seed)`.
    pub fn new(info: &ModelInfo, placement: &Placement, seed: u64) -> Result<Self, TrainError> {
        tch::manual_seed(i64::from_ne_bytes(seed.to_ne_bytes()));
        let replicas = placement
            .devices
            .iter()
            .map(|&device| Replica::new(info, device))
            .collect::<Result<Vec<_>, _>>()?;
        let mut this = Self {
            replicas,
            autocast: placement.autocast(),
        };
        this.broadcast()?;
        Ok(this)
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Replica 0, which the optimizer updates.
    pub fn primary(&self) -> &Replica {
        &self.replicas[0]
    }

    /// Replica 0's trainable parameters by name.
    pub fn named_params(&self) -> Vec<(String, Tensor)> {
        self.primary()
            .params
            .iter()
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect()
    }

    /// Replica 0's trainable parameters, in the optimizer's order.
    pub fn params(&self) -> Vec<Tensor> {
        self.primary()
            .params
            .iter()
            .map(|(_, t)| t.shallow_clone())
            .collect()
    }

    /// Loads replica 0 from `path` and copies it to the others.
    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        self.replicas[0].load(path)?;
        self.broadcast().map_err(|e| e.to_string())
    }

    /// Forward and backward passes of `batch` over the replicas, the loss multiplied by
    /// `loss_scale` before the backward pass (1 outside fp16).
    pub fn backward(&mut self, batch: &HostBatch, loss_scale: f64) -> Result<Backward, TrainError> {
        let primary = self.replicas[0].device;
        let n = batch.len as i64;
        let k = (self.replicas.len() as i64).min(n).max(1);
        let mut losses = Vec::with_capacity(k as usize);
        let mut start = 0;
        for (i, replica) in self.replicas.iter_mut().enumerate().take(k as usize) {
            zero_grads(&replica.params)?;
            // As equal as possible: the first `n % k` slices get one more sample.
            let len = n / k + i64::from((i as i64) < n % k);
            let (images, labels) = if k == 1 {
                (batch.images.shallow_clone(), batch.labels.shallow_clone())
            } else {
                (
                    batch.images.f_narrow(0, start, len)?,
                    batch.labels.f_narrow(0, start, len)?,
                )
            };
            start += len;
            let share = len as f64 / n as f64;
            let loss = replica.backward(&images, labels, self.autocast, share, loss_scale)?;
            losses.push((loss, share));
        }
        for replica in &self.replicas[k as usize..] {
            zero_grads(&replica.params)?;
        }
        let _guard = tch::no_grad_guard();
        let mut total = Tensor::f_zeros([], (Kind::Float, primary))?;
        for (loss, share) in &losses {
            let loss = loss.f_to_device(primary)?;
            total = if *share == 1.0 {
                loss
            } else {
                total.f_add(&loss.f_mul_scalar(*share)?)?
            };
        }
        let grads = self.summed_grads(k as usize, loss_scale)?;
        let overflow = loss_scale != 1.0 && !all_finite(&grads, primary)?;
        Ok(Backward {
            loss: total.f_double_value(&[])?,
            grads,
            overflow,
        })
    }

    /// Each parameter's gradient summed over the first `k` replicas on replica 0's device, and
    /// unscaled by `loss_scale`; zeros where no replica has one.
    fn summed_grads(&self, k: usize, loss_scale: f64) -> Result<Vec<Tensor>, TchError> {
        let primary = self.replicas[0].device;
        let mut grads = Vec::with_capacity(self.replicas[0].params.len());
        for j in 0..self.replicas[0].params.len() {
            let mut sum: Option<Tensor> = None;
            for replica in &self.replicas[..k] {
                let (_, param) = &replica.params[j];
                let grad = param.f_grad()?;
                if !grad.defined() {
                    continue;
                }
                let grad = grad.f_to_device(primary)?;
                sum = Some(match sum {
                    None => grad,
                    Some(s) => s.f_add(&grad)?,
                });
            }
            let grad = match sum {
                Some(g) => g,
                None => self.replicas[0].params[j].1.f_zeros_like()?,
            };
            grads.push(if loss_scale == 1.0 {
                grad
            } else {
                grad.f_div_scalar(loss_scale)?
            });
        }
        Ok(grads)
    }

    /// Copies every variable of replica 0 to the other replicas.
    pub fn broadcast(&mut self) -> Result<(), TchError> {
        let _guard = tch::no_grad_guard();
        let (first, rest) = self.replicas.split_at_mut(1);
        for replica in rest {
            for ((_, dst), (_, src)) in replica.vars.iter_mut().zip(&first[0].vars) {
                dst.f_copy_(src)?;
            }
        }
        Ok(())
    }
}

/// Whether the sum of every gradient is finite: a fp16 overflow anywhere makes it inf or NaN.
fn all_finite(grads: &[Tensor], device: Device) -> Result<bool, TchError> {
    let mut check = Tensor::f_zeros([], (Kind::Float, device))?;
    for g in grads {
        check = check.f_add(&g.f_sum(Kind::Float)?)?;
    }
    Ok(check.f_double_value(&[])?.is_finite())
}

/// Zeroes the accumulated gradients of `params` (libtorch adds to them on every backward).
fn zero_grads(params: &[(String, Tensor)]) -> Result<(), TchError> {
    let _guard = tch::no_grad_guard();
    for (_, p) in params {
        let mut grad = p.f_grad()?;
        if grad.defined() {
            let _ = grad.f_detach_()?.f_zero_()?;
        }
    }
    Ok(())
}

/// fp16's dynamic loss scale: start high, halve on overflow (skipping that step), double after
/// a run of clean steps, as `torch.cuda.amp.GradScaler` does.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LossScale {
    /// The factor the loss is multiplied by.
    pub scale: f64,
    /// Clean steps since the last change.
    pub clean_steps: u64,
}

impl LossScale {
    /// Steps without overflow before the scale doubles.
    const GROWTH_INTERVAL: u64 = 2000;

    /// The initial scale, 2^16.
    pub fn new() -> Self {
        Self {
            scale: 65536.0,
            clean_steps: 0,
        }
    }

    /// Records a step's outcome.
    pub fn update(&mut self, overflow: bool) {
        if overflow {
            self.scale = (self.scale / 2.0).max(1.0);
            self.clean_steps = 0;
        } else {
            self.clean_steps += 1;
            if self.clean_steps >= Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.clean_steps = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_scale_backs_off_and_grows() {
        let mut s = LossScale::new();
        s.update(true);
        assert_eq!(s.scale, 32768.0);
        for _ in 0..LossScale::GROWTH_INTERVAL {
            s.update(false);
        }
        assert_eq!(s.scale, 65536.0);
        assert_eq!(s.clean_steps, 0);
    }
}
