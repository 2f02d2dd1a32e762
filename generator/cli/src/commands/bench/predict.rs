//! `hetgen bench --profile`: what a profile's rates predict for each local configuration, by
//! the arithmetic `hetgen plan` sizes a cluster with ([`hetgen_plan::cap`]: the trainer is
//! busy at most available / needed of the time).
//!
//! From the profile (`hetgen profile`): `r` = `samples_per_s / threads`, what one pipeline
//! core makes; `p` = `cpu_seconds_per_sample`, what a sample costs the pipeline; `g` =
//! `gpu_samples_per_s`, what one trainer process trains at when input costs nothing.
//!
//! On this machine the trainer processes' "GPU" is their cores: a process's model costs
//! `m = TORCH_THREADS / g` CPU-seconds per sample, so `P` processes on `k` trainer cores
//! consume at most `C = min(P × g, k / m)` samples/s (`P × g` where every process has the
//! cores its threads use, as on a GPU host). With `d` data cores, `D = d × r` is what the
//! data hosts produce. Production is then
//!
//! - remote-only: `D`;
//! - homogeneous: `k / (m + p)`: the model and the pipeline share the trainer cores, each
//!   sample costing both (the DataLoader case on a CPU-only machine);
//! - hybrid: `D + max(0, k − D × m) / (m + p)`: the data hosts' samples, plus what the trainer
//!   cores have left after training those, spent on samples they both make and train
//!   (homogeneous is the case `D = 0`).
//!
//! Predicted samples/s is `min(C, production)`, predicted stall `1 − cap(production, C)`.
//!
//! What the model assumes: the cores are the only shared resource (no memory bandwidth or
//! cache contention), CPU time splits perfectly among the processes on a core, a Python
//! dataset's cost is its CPU time (`cpu_seconds_per_sample`; a `__getitem__` that waits on
//! files costs a core more than that), and every sample costs the same. On shared cores the
//! Loader sees part of the pipeline's share as slower steps rather than as waits, so there
//! the measured stall can be lower than predicted while samples/s agree.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::exit::Failure;

/// CPU threads one trainer process's model uses on a CPU-only machine: the examples' scripts
/// set `torch.set_num_threads(1)` there. A model on more threads costs the cores more than
/// predicted.
pub const TORCH_THREADS: f64 = 1.0;

/// What bench reads of a profile file.
#[derive(Debug, Clone, Deserialize)]
struct ProfileFile {
    samples_per_s: f64,
    threads: usize,
    cpu_seconds_per_sample: f64,
    gpu_samples_per_s: Option<f64>,
}

/// The rates a prediction starts from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Samples/s one pipeline core makes (`r`).
    pub per_core: f64,
    /// CPU-seconds a sample costs the pipeline (`p`).
    pub cpu_seconds_per_sample: f64,
    /// Samples/s one trainer process trains at when input costs nothing (`g`); infinite for a
    /// trainer that runs no model (`--input-only`).
    pub trainer_samples_per_s: f64,
}

impl Rates {
    /// The rates of the profile at `path`; `input_only`: the trainer runs no model, so the
    /// profile needs no trainer rate.
    pub fn read(path: &Path, input_only: bool) -> Result<Rates, Failure> {
        let bad = |why: String, hint: &str| Failure::Profile {
            path: path.to_owned(),
            why,
            hint: hint.to_owned(),
        };
        let profile: ProfileFile = super::super::read_profile_as(path)?;
        let trainer_samples_per_s = match (input_only, profile.gpu_samples_per_s) {
            (true, _) => f64::INFINITY,
            (false, Some(g)) if g > 0.0 => g,
            (false, _) => {
                return Err(bad(
                    "it has no `gpu_samples_per_s`: the rate one trainer process trains at"
                        .to_owned(),
                    "profile again with `hetgen profile --trainer` (the job's script timed) or \
                     `--gpu-samples-per-s N`",
                ));
            }
        };
        Ok(Rates {
            per_core: profile.samples_per_s / profile.threads.max(1) as f64,
            cpu_seconds_per_sample: profile.cpu_seconds_per_sample,
            trainer_samples_per_s,
        })
    }
}

/// One configuration as the arithmetic sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Cores the trainer hosts share (`k`).
    pub trainer_cores: usize,
    /// Cores the data hosts share (`d`; 0 without data hosts).
    pub data_cores: usize,
    /// Training processes (`P`).
    pub trainer_processes: u32,
    /// The trainer hosts run a pipeline of their own (homogeneous, hybrid).
    pub trainer_pipeline: bool,
}

/// A configuration's predicted figures, beside its measured ones in `bench.json`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Predicted {
    pub samples_per_s: f64,
    pub stall_fraction: f64,
}

/// What `rates` predict for `shape` (the module's arithmetic).
pub fn predict(rates: &Rates, shape: &Shape) -> Predicted {
    let k = shape.trainer_cores as f64;
    let g = rates.trainer_samples_per_s;
    let p = rates.cpu_seconds_per_sample;
    let m = TORCH_THREADS / g;
    let consumption = (f64::from(shape.trainer_processes) * g).min(k / m);
    let data = shape.data_cores as f64 * rates.per_core;
    let production = if shape.trainer_pipeline {
        data + (k - data * m).max(0.0) / (m + p)
    } else {
        data
    };
    Predicted {
        samples_per_s: consumption.min(production),
        stall_fraction: 1.0 - hetgen_plan::cap(production, consumption),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipeline core makes 100 samples/s at 10 ms each; a trainer process trains 200/s.
    const RATES: Rates = Rates {
        per_core: 100.0,
        cpu_seconds_per_sample: 0.01,
        trainer_samples_per_s: 200.0,
    };

    fn shape(trainer_cores: usize, data_cores: usize, trainer_pipeline: bool) -> Shape {
        Shape {
            trainer_cores,
            data_cores,
            trainer_processes: 1,
            trainer_pipeline,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn remote_only_is_plan_s_cap_of_the_data_cores_against_the_trainer() {
        let one = predict(&RATES, &shape(1, 1, false));
        assert!(close(one.samples_per_s, 100.0) && close(one.stall_fraction, 0.5));
        let three = predict(&RATES, &shape(1, 3, false));
        assert!(close(three.samples_per_s, 200.0) && close(three.stall_fraction, 0.0));
    }

    #[test]
    fn homogeneous_shares_the_trainer_cores_between_model_and_pipeline() {
        // 5 ms of model and 10 ms of pipeline per sample on one core: 66.7 samples/s, the
        // trainer busy a third of the time.
        let alone = predict(&RATES, &shape(1, 0, true));
        assert!(close(alone.samples_per_s, 1.0 / 0.015));
        assert!(close(alone.stall_fraction, 2.0 / 3.0));
    }

    #[test]
    fn hybrid_adds_what_the_trainer_cores_have_left() {
        // 100/s from the data core costs the trainer core 0.5 s/s of model; the other half
        // makes and trains 0.5 / 0.015 = 33.3 more.
        let hybrid = predict(&RATES, &shape(1, 1, true));
        assert!(close(hybrid.samples_per_s, 100.0 + 0.5 / 0.015));
        // Two processes on one core train at most one core's worth: 200/s, not 400.
        let two = Shape {
            trainer_processes: 2,
            ..shape(1, 3, false)
        };
        let p = predict(&RATES, &two);
        assert!(close(p.samples_per_s, 200.0) && close(p.stall_fraction, 0.0));
    }

    #[test]
    fn without_a_model_the_trainer_only_waits() {
        let rates = Rates {
            trainer_samples_per_s: f64::INFINITY,
            ..RATES
        };
        let p = predict(&rates, &shape(1, 1, false));
        assert!(close(p.samples_per_s, 100.0) && close(p.stall_fraction, 1.0));
    }
}
