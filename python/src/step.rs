//! `hetgen._native.step_line`: the Loader's `hetgen-step` progress line, written by the type that
//! defines it ([`hetgen_spec::step::StepLine`]), which `hetgen deploy --local`, `hetgen logs` and
//! the job's metric definitions read back. The Loader knows no loss, so its lines carry none.

use hetgen_spec::step::StepLine;
use pyo3::prelude::*;

/// The line for `step` batches taken, `step_ms` between two of them, `wait_ms` of that spent
/// waiting for the batch, and the throughput.
#[pyfunction]
pub fn step_line(step: u64, step_ms: f64, wait_ms: f64, samples_per_s: f64) -> String {
    StepLine {
        step,
        loss: None,
        step_ms,
        wait_ms,
        samples_per_s,
    }
    .to_string()
}
