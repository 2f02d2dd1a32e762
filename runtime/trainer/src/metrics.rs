//! The per-step metric line SageMaker scrapes, and the step timings behind the summary.

use std::io::Write;

use hetgen_spec::step::StepLine;

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// 1-based number of the step (counting steps before a resume).
    pub step: u64,
    /// Epoch of its batch.
    pub epoch: u32,
    /// Mean cross-entropy of its batch.
    pub loss: f64,
    /// Learning rate it used.
    pub lr: f64,
    /// Samples in its batch.
    pub samples: usize,
    /// Wall time from asking for the batch to the end of the update.
    pub step_ms: f64,
    /// Part of `step_ms` spent waiting for the batch.
    pub wait_ms: f64,
}

impl StepRecord {
    /// Samples per second of this step's wall time.
    pub fn samples_per_s(&self) -> f64 {
        if self.step_ms > 0.0 {
            self.samples as f64 * 1000.0 / self.step_ms
        } else {
            0.0
        }
    }
}

/// The metric line of a step:
/// `hetgen-step step=N loss=X.XXXX step_ms=X.XX wait_ms=X.XX samples_per_s=X.X`
/// ([`hetgen_spec::step`], which SageMaker's built-in metric definitions match).
pub fn step_line(record: &StepRecord) -> String {
    StepLine {
        step: record.step,
        loss: Some(record.loss),
        step_ms: record.step_ms,
        wait_ms: record.wait_ms,
        samples_per_s: record.samples_per_s(),
    }
    .to_string()
}

/// Prints `line` on stdout and flushes, so log scrapers see it at once.
pub(crate) fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout must not stop training; the metrics are only lost.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Step timings of this process.
#[derive(Debug, Default)]
pub(crate) struct Timings {
    /// `(step_ms, wait_ms, samples)` of every step, in order.
    steps: Vec<(f64, f64, usize)>,
}

/// Means over the measured steps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct TimingSummary {
    pub mean_step_ms: f64,
    pub mean_wait_ms: f64,
    pub stall_fraction: f64,
    pub samples_per_s: f64,
}

impl Timings {
    /// Records a step.
    pub fn push(&mut self, record: &StepRecord) {
        self.steps
            .push((record.step_ms, record.wait_ms, record.samples));
    }

    /// Means after the warm-up: the first `min(5, steps / 5)` steps are left out (allocator
    /// growth, kernel selection and the pipeline's start make them unrepresentative).
    pub fn summary(&self) -> TimingSummary {
        let skip = (self.steps.len() / 5).min(5);
        let measured = &self.steps[skip..];
        if measured.is_empty() {
            return TimingSummary::default();
        }
        let n = measured.len() as f64;
        let step: f64 = measured.iter().map(|s| s.0).sum();
        let wait: f64 = measured.iter().map(|s| s.1).sum();
        let samples: usize = measured.iter().map(|s| s.2).sum();
        TimingSummary {
            mean_step_ms: step / n,
            mean_wait_ms: wait / n,
            stall_fraction: if step > 0.0 { wait / step } else { 0.0 },
            samples_per_s: if step > 0.0 {
                samples as f64 * 1000.0 / step
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, step_ms: f64, wait_ms: f64) -> StepRecord {
        StepRecord {
            step,
            epoch: 0,
            loss: 0.43127,
            lr: 0.1,
            samples: 32,
            step_ms,
            wait_ms,
        }
    }

    #[test]
    fn the_line_has_the_documented_format() {
        assert_eq!(
            step_line(&record(120, 85.104, 1.2)),
            "hetgen-step step=120 loss=0.4313 step_ms=85.10 wait_ms=1.20 samples_per_s=376.0"
        );
    }

    #[test]
    fn warm_up_steps_are_skipped() {
        let mut t = Timings::default();
        // 10 steps: the first 2 are skipped.
        for i in 0..10 {
            let ms = if i < 2 { 1000.0 } else { 10.0 };
            t.push(&record(i + 1, ms, 2.5));
        }
        let s = t.summary();
        assert_eq!(s.mean_step_ms, 10.0);
        assert_eq!(s.mean_wait_ms, 2.5);
        assert_eq!(s.stall_fraction, 0.25);
        assert_eq!(s.samples_per_s, 3200.0);
        assert_eq!(Timings::default().summary(), TimingSummary::default());
    }
}
