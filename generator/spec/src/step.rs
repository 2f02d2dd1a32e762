//! The trainer's per-step metric line,
//! `hetgen-step step=120 loss=0.4312 step_ms=85.10 wait_ms=1.20 samples_per_s=3008.2`.
//! `hetgen.Loader` prints the same line without `loss` from a user's script (it sees the input,
//! not the model): `step` is then batches taken, `step_ms` the time between them.
//!
//! Three parties read or write it: the trainer prints it, SageMaker scrapes it with the job's
//! built-in metric definitions (the model's `builtin_metrics`, rendered into the request and
//! counted against the service's limit by validation), and `hetgen deploy --local` reads it back
//! for its progress line. It lives here, beside the metric definitions, because the spec crate is
//! the one all three depend on (the instance contract in `hetgen-env` depends on the spec, so it
//! cannot be the home of something validation needs).

use std::fmt;

/// First word of the line.
pub const PREFIX: &str = "hetgen-step";

/// The metrics SageMaker scrapes from the line: `(metric name, key on the line)`.
pub const METRICS: [(&str, &str); 4] = [
    ("train:loss", "loss"),
    ("train:step_ms", "step_ms"),
    ("train:wait_ms", "wait_ms"),
    ("train:samples_per_s", "samples_per_s"),
];

/// The metric definition's regex for `key` (SageMaker takes the first group's number).
pub fn metric_regex(key: &str) -> String {
    format!("{PREFIX}.* {key}=([0-9.eE+-]+)")
}

/// One step, as the line carries it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepLine {
    /// Optimizer steps done (counting steps before a resume).
    pub step: u64,
    /// Training loss; `None` on the loader's lines, which know no loss.
    pub loss: Option<f64>,
    /// Wall time of the step, ms.
    pub step_ms: f64,
    /// Time of the step spent waiting for data, ms.
    pub wait_ms: f64,
    /// Throughput.
    pub samples_per_s: f64,
}

impl fmt::Display for StepLine {
    /// Plain decimal numbers only, so the metric regexes match.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX} step={}", self.step)?;
        if let Some(loss) = self.loss {
            write!(f, " loss={loss:.4}")?;
        }
        write!(
            f,
            " step_ms={:.2} wait_ms={:.2} samples_per_s={:.1}",
            self.step_ms, self.wait_ms, self.samples_per_s
        )
    }
}

impl StepLine {
    /// Parses a line holding `hetgen-step ` (after any prefix the line got in a log), ignoring
    /// keys it does not know so the trainer may add some; `None` for other lines or when a
    /// key other than `loss` is missing.
    pub fn parse(line: &str) -> Option<StepLine> {
        let start = format!("{PREFIX} ");
        let rest = &line[line.find(&start)? + start.len()..];
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
        Some(StepLine {
            step: step?,
            loss,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_line_parses_back_and_matches_every_metric() {
        let step = StepLine {
            step: 120,
            loss: Some(0.43125),
            step_ms: 85.1,
            wait_ms: 1.2,
            samples_per_s: 3008.24,
        };
        let line = step.to_string();
        assert_eq!(
            line,
            "hetgen-step step=120 loss=0.4313 step_ms=85.10 wait_ms=1.20 samples_per_s=3008.2"
        );
        let back = StepLine::parse(&format!("[algo-1 dnn_group] {line} extra=1")).unwrap();
        assert_eq!((back.step, back.step_ms), (120, 85.1));
        for (_, key) in METRICS {
            let regex = metric_regex(key);
            let (head, _) = regex.split_once(".* ").unwrap();
            assert!(line.starts_with(head) && line.contains(&format!(" {key}=")));
        }
        assert_eq!(StepLine::parse("hetgen-step step=1 loss=0.5"), None);
        assert_eq!(StepLine::parse("hetgen-summary {}"), None);
    }

    #[test]
    fn the_loaders_line_has_no_loss() {
        let line = "[rank0]: hetgen-step step=50 step_ms=12.00 wait_ms=3.00 samples_per_s=2666.7";
        let step = StepLine::parse(line).unwrap();
        assert_eq!(step.loss, None);
        assert_eq!(step.stall_percent(), 25.0);
        assert_eq!(step.to_string(), &line[9..]);
    }
}
