//! SGD, Adam and Adadelta on plain tensors.
//!
//! Written here rather than taken from `tch::nn::Optimizer` because that one keeps its state
//! inside libtorch where it cannot be saved: a resumed run would restart momentum and Adam's
//! moments from zero and diverge from the uninterrupted one. Every update follows PyTorch's
//! `torch.optim` formulas (no dampening, no Nesterov, L2 weight decay added to the gradient).

use hetgen_spec::model::{Optimizer as OptimizerSpec, OptimizerName};
use tch::{Kind, TchError, Tensor};

use crate::saved::Saved;

/// Adam's first-moment decay.
pub const ADAM_BETA1: f64 = 0.9;
/// Adam's second-moment decay.
pub const ADAM_BETA2: f64 = 0.999;
/// Adam's denominator epsilon.
pub const ADAM_EPS: f64 = 1e-8;
/// Adadelta's running-average decay.
pub const ADADELTA_RHO: f64 = 0.9;
/// Adadelta's epsilon.
pub const ADADELTA_EPS: f64 = 1e-6;

/// Name of the step counter among [`Optimizer::state`]'s tensors.
const STEP_TENSOR: &str = "step";

/// An optimizer over a fixed, ordered list of named parameters.
#[derive(Debug)]
pub struct Optimizer {
    name: OptimizerName,
    momentum: f64,
    weight_decay: f64,
    /// Updates applied so far (Adam's bias correction needs it).
    steps: u64,
    /// Parameter names, in the order `step` receives parameters and gradients.
    names: Vec<String>,
    /// Per-parameter state tensors, indexed like `names`; which ones depends on the algorithm.
    slots: Vec<Vec<Tensor>>,
}

impl Optimizer {
    /// An optimizer for `params` (name and tensor, in the order later passed to [`Self::step`]).
    ///
    /// State tensors are created now, zeroed, on each parameter's device: PyTorch's lazily
    /// initialised buffers give the same first update (momentum `buf = g` equals
    /// `momentum * 0 + g`), and a fixed set of tensors makes checkpoints uniform.
    pub fn new(spec: &OptimizerSpec, params: &[(String, Tensor)]) -> Result<Self, TchError> {
        let per_param = Self::slot_names(spec.name, spec.momentum).len();
        let slots = params
            .iter()
            .map(|(_, p)| {
                (0..per_param)
                    .map(|_| p.f_zeros_like()?.f_detach())
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name: spec.name,
            momentum: spec.momentum,
            weight_decay: spec.weight_decay,
            steps: 0,
            names: params.iter().map(|(n, _)| n.clone()).collect(),
            slots,
        })
    }

    /// What kind of state an optimizer of `spec` keeps: `sgd`, `sgd+momentum`, `adam` or
    /// `adadelta` (a checkpoint's state only loads into an optimizer of the same kind).
    pub fn state_kind(spec: &OptimizerSpec) -> &'static str {
        match spec.name {
            OptimizerName::Sgd if spec.momentum != 0.0 => "sgd+momentum",
            OptimizerName::Sgd => "sgd",
            OptimizerName::Adam => "adam",
            OptimizerName::Adadelta => "adadelta",
        }
    }

    /// The state tensors each parameter has.
    fn slot_names(name: OptimizerName, momentum: f64) -> &'static [&'static str] {
        match name {
            OptimizerName::Sgd if momentum != 0.0 => &["momentum_buffer"],
            OptimizerName::Sgd => &[],
            OptimizerName::Adam => &["exp_avg", "exp_avg_sq"],
            OptimizerName::Adadelta => &["square_avg", "acc_delta"],
        }
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Applies one update with learning rate `lr`: `params[i] -= f(grads[i], state[i])`.
    ///
    /// Runs without gradient tracking; `params` and `grads` are in construction order.
    pub fn step(&mut self, params: &[Tensor], grads: &[Tensor], lr: f64) -> Result<(), TchError> {
        if params.len() != self.slots.len() || grads.len() != self.slots.len() {
            return Err(TchError::Shape(format!(
                "optimizer built for {} parameters, given {} parameters and {} gradients",
                self.slots.len(),
                params.len(),
                grads.len()
            )));
        }
        let _guard = tch::no_grad_guard();
        self.steps += 1;
        for ((param, grad), slots) in params.iter().zip(grads).zip(&mut self.slots) {
            let mut param = param.shallow_clone();
            let grad = if self.weight_decay != 0.0 {
                grad.f_add(&param.f_mul_scalar(self.weight_decay)?)?
            } else {
                grad.shallow_clone()
            };
            match self.name {
                OptimizerName::Sgd => {
                    let update = match slots.first_mut() {
                        Some(buf) => {
                            let _ = buf.f_mul_scalar_(self.momentum)?;
                            let _ = buf.f_add_(&grad)?;
                            buf.shallow_clone()
                        }
                        None => grad,
                    };
                    let _ = param.f_sub_(&update.f_mul_scalar(lr)?)?;
                }
                OptimizerName::Adam => {
                    let [m, v] = slots.as_mut_slice() else {
                        return Err(TchError::Shape(
                            "adam keeps two tensors per parameter".into(),
                        ));
                    };
                    let _ = m.f_mul_scalar_(ADAM_BETA1)?;
                    let _ = m.f_add_(&grad.f_mul_scalar(1.0 - ADAM_BETA1)?)?;
                    let _ = v.f_mul_scalar_(ADAM_BETA2)?;
                    let _ = v.f_add_(&grad.f_mul(&grad)?.f_mul_scalar(1.0 - ADAM_BETA2)?)?;
                    let t = i32::try_from(self.steps).unwrap_or(i32::MAX);
                    let bias1 = 1.0 - ADAM_BETA1.powi(t);
                    let bias2 = 1.0 - ADAM_BETA2.powi(t);
                    let denom = v
                        .f_sqrt()?
                        .f_div_scalar(bias2.sqrt())?
                        .f_add_scalar(ADAM_EPS)?;
                    let _ = param.f_sub_(&m.f_div(&denom)?.f_mul_scalar(lr / bias1)?)?;
                }
                OptimizerName::Adadelta => {
                    let [square_avg, acc_delta] = slots.as_mut_slice() else {
                        return Err(TchError::Shape(
                            "adadelta keeps two tensors per parameter".into(),
                        ));
                    };
                    let _ = square_avg.f_mul_scalar_(ADADELTA_RHO)?;
                    let _ =
                        square_avg.f_add_(&grad.f_mul(&grad)?.f_mul_scalar(1.0 - ADADELTA_RHO)?)?;
                    let std = square_avg.f_add_scalar(ADADELTA_EPS)?.f_sqrt()?;
                    let delta = acc_delta
                        .f_add_scalar(ADADELTA_EPS)?
                        .f_sqrt()?
                        .f_div(&std)?
                        .f_mul(&grad)?;
                    let _ = acc_delta.f_mul_scalar_(ADADELTA_RHO)?;
                    let _ = acc_delta
                        .f_add_(&delta.f_mul(&delta)?.f_mul_scalar(1.0 - ADADELTA_RHO)?)?;
                    let _ = param.f_sub_(&delta.f_mul_scalar(lr)?)?;
                }
            }
        }
        Ok(())
    }

    /// Every state tensor, named `<slot>/<parameter>`, plus the step counter: what a checkpoint
    /// saves. The tensors are shallow handles; saving them does not copy the device memory.
    pub fn state(&self) -> Result<Vec<(String, Tensor)>, TchError> {
        let slot_names = Self::slot_names(self.name, self.momentum);
        let mut out = vec![(
            STEP_TENSOR.to_owned(),
            Tensor::f_from_slice(&[i64::try_from(self.steps).unwrap_or(i64::MAX)])?,
        )];
        for (name, slots) in self.names.iter().zip(&self.slots) {
            for (slot, tensor) in slot_names.iter().zip(slots) {
                out.push((format!("{slot}/{name}"), tensor.shallow_clone()));
            }
        }
        Ok(out)
    }

    /// Restores what [`Self::state`] returned (possibly read back from a file, on any device).
    ///
    /// Fails with a description when a tensor is missing or has another shape.
    pub fn load_state(&mut self, tensors: Vec<(String, Tensor)>) -> Result<(), String> {
        let mut saved = Saved::new(tensors);
        let steps = saved
            .take(STEP_TENSOR)?
            .f_to_kind(Kind::Int64)
            .and_then(|s| s.f_int64_value(&[0]))
            .map_err(|e| format!("`{STEP_TENSOR}`: {e}"))?;
        let slot_names = Self::slot_names(self.name, self.momentum);
        let _guard = tch::no_grad_guard();
        for (name, slots) in self.names.iter().zip(&mut self.slots) {
            for (slot, tensor) in slot_names.iter().zip(slots) {
                saved.restore(&format!("{slot}/{name}"), tensor, "the parameter")?;
            }
        }
        if let Some(extra) = saved.leftover() {
            return Err(format!("unexpected tensor `{extra}`"));
        }
        self.steps = u64::try_from(steps).map_err(|_| format!("negative step count {steps}"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: OptimizerName, lr: f64, momentum: f64, weight_decay: f64) -> OptimizerSpec {
        OptimizerSpec {
            name,
            lr,
            momentum,
            weight_decay,
        }
    }

    fn values(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double)).expect("a 1-d tensor converts")
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "got {got:?}, want {want:?}");
        }
    }

    /// One parameter `p = [1, -2]` with gradient `g = [0.5, 1]`, stepped twice.
    fn run(spec: &OptimizerSpec, lr: f64) -> (Vec<f64>, Vec<f64>) {
        let p = Tensor::from_slice(&[1.0f64, -2.0]);
        let g = Tensor::from_slice(&[0.5f64, 1.0]);
        let mut opt = Optimizer::new(spec, &[("w".to_owned(), p.shallow_clone())]).unwrap();
        opt.step(&[p.shallow_clone()], &[g.shallow_clone()], lr)
            .unwrap();
        let first = values(&p);
        opt.step(&[p.shallow_clone()], &[g.shallow_clone()], lr)
            .unwrap();
        (first, values(&p))
    }

    #[test]
    fn sgd_with_momentum_and_weight_decay() {
        // d = g + 0.1 p = [0.6, 0.8]; buf = d; p -= 0.1 buf → [0.94, -2.08].
        // d = [0.5 + 0.094, 1 - 0.208] = [0.594, 0.792]; buf = 0.9 [0.6, 0.8] + d
        //   = [1.134, 1.512]; p -= 0.1 buf → [0.8266, -2.2312].
        let (first, second) = run(&spec(OptimizerName::Sgd, 0.1, 0.9, 0.1), 0.1);
        close(&first, &[0.94, -2.08]);
        close(&second, &[0.8266, -2.2312]);
    }

    #[test]
    fn plain_sgd() {
        let (first, _) = run(&spec(OptimizerName::Sgd, 0.5, 0.0, 0.0), 0.5);
        close(&first, &[0.75, -2.5]);
    }

    #[test]
    fn adam_first_steps() {
        // Step 1: m = 0.1 g, v = 0.001 g², m̂ = g, v̂ = g² → p -= lr g / (|g| + eps) ≈ lr sign(g).
        let lr = 0.01;
        let (first, second) = run(&spec(OptimizerName::Adam, lr, 0.0, 0.0), lr);
        let eps = ADAM_EPS;
        let want1 = [1.0 - lr * 0.5 / (0.5 + eps), -2.0 - lr * 1.0 / (1.0 + eps)];
        close(&first, &want1);
        // Step 2 with the same gradient: m̂ = g, v̂ = g² again.
        let want2 = [
            want1[0] - lr * 0.5 / (0.5 + eps),
            want1[1] - lr / (1.0 + eps),
        ];
        close(&second, &want2);
    }

    #[test]
    fn adam_with_weight_decay_by_hand() {
        // g' = g + 0.5 p = [1.0, 0.0]: the second coordinate does not move on step 1.
        let lr = 0.1;
        let (first, _) = run(&spec(OptimizerName::Adam, lr, 0.0, 0.5), lr);
        close(&first, &[1.0 - lr / (1.0 + ADAM_EPS), -2.0]);
    }

    #[test]
    fn adadelta_first_step() {
        // sq = 0.1 g²; delta = sqrt(eps) / sqrt(sq + eps) g; p -= lr delta.
        let lr = 1.0;
        let (first, _) = run(&spec(OptimizerName::Adadelta, lr, 0.0, 0.0), lr);
        let want: Vec<f64> = [(1.0, 0.5), (-2.0, 1.0)]
            .iter()
            .map(|&(p, g): &(f64, f64)| {
                let sq = (1.0 - ADADELTA_RHO) * g * g;
                p - lr * ADADELTA_EPS.sqrt() / (sq + ADADELTA_EPS).sqrt() * g
            })
            .collect();
        close(&first, &want);
    }

    #[test]
    fn state_round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("optimizer.ot");
        let spec = spec(OptimizerName::Adam, 0.01, 0.0, 0.0);
        let p = Tensor::from_slice(&[1.0f32, 2.0]);
        let g = Tensor::from_slice(&[0.3f32, -0.1]);
        let params = [("layer.weight".to_owned(), p.shallow_clone())];
        let mut a = Optimizer::new(&spec, &params).unwrap();
        a.step(&[p.shallow_clone()], &[g.shallow_clone()], 0.01)
            .unwrap();
        Tensor::save_multi(&a.state().unwrap(), &file).unwrap();

        let mut b = Optimizer::new(&spec, &params).unwrap();
        b.load_state(Tensor::load_multi(&file).unwrap()).unwrap();
        assert_eq!(b.steps(), 1);
        for ((na, ta), (nb, tb)) in a.state().unwrap().iter().zip(&b.state().unwrap()) {
            assert_eq!(na, nb);
            assert!(ta.equal(tb), "{na} differs");
        }

        let other = Optimizer::new(&spec, &[("other".to_owned(), p.shallow_clone())]);
        let err = other
            .unwrap()
            .load_state(Tensor::load_multi(&file).unwrap());
        assert!(err.unwrap_err().contains("other"));
    }
}
