//! The trainer's per-step line, `hetgen-step step=120 loss=0.4312 step_ms=85.10 wait_ms=1.20
//! samples_per_s=3008.2`, read back for the live progress line (SageMaker scrapes the same line
//! with the metric definitions of `hetgen_spec::model::builtin_metrics`).

/// One parsed `hetgen-step` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// Optimizer steps done.
    pub step: u64,
    /// Training loss.
    pub loss: f64,
    /// Wall time of the step, ms.
    pub step_ms: f64,
    /// Time of the step spent waiting for data, ms.
    pub wait_ms: f64,
    /// Throughput.
    pub samples_per_s: f64,
}

impl Step {
    /// Parses a line that starts with `hetgen-step` (after any prefix the line got in a log),
    /// ignoring keys it does not know so the trainer may add some; `None` for other lines or
    /// when a known key is missing.
    pub fn parse(line: &str) -> Option<Step> {
        let rest = &line[line.find("hetgen-step ")? + "hetgen-step ".len()..];
        let (mut step, mut loss, mut step_ms, mut wait_ms, mut samples) =
            (None, None, None, None, None);
        for pair in rest.split_whitespace() {
            let Some((key, value)) = pair.split_once('=') else {
                continue;
            };
            match key {
                "step" => step = value.parse().ok(),
                "loss" => loss = value.parse().ok(),
                "step_ms" => step_ms = value.parse().ok(),
                "wait_ms" => wait_ms = value.parse().ok(),
                "samples_per_s" => samples = value.parse().ok(),
                _ => {}
            }
        }
        Some(Step {
            step: step?,
            loss: loss?,
            step_ms: step_ms?,
            wait_ms: wait_ms?,
            samples_per_s: samples?,
        })
    }

    /// Share of the step spent waiting for data, in percent: the GPU's idle share when input
    /// is the bottleneck.
    pub fn stall_percent(&self) -> f64 {
        if self.step_ms > 0.0 {
            (100.0 * self.wait_ms / self.step_ms).clamp(0.0, 100.0)
        } else {
            0.0
        }
    }
}
