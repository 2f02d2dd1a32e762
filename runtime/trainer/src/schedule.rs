//! The learning rate of every step.
//!
//! Steps are counted from 0. The first `warmup_steps` steps ramp linearly from `lr / warmup` to
//! `lr` (step `i` gets `lr * (i + 1) / warmup`); afterwards:
//!
//! - `constant`: `lr`;
//! - `step`: `lr * gamma^k` with `k = (step - warmup) / step_size`, i.e. the decays count from the
//!   end of the warm-up;
//! - `cosine`: from `lr` at the decay's start to `min_lr` at the run's last step,
//!   `min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2`, `t` the fraction of the decay done.
//!
//! Cosine needs the run's length. With `steps = N` it is `N`. With `epochs = E` it is
//! `E × batches per epoch`, known up front only for a synthetic source (whose sample count is in
//! the spec). For other sources the batches per epoch are learnt by counting epoch 0: the rate
//! holds at `lr` until epoch 0 ends, then decays from there, so it stays continuous. The count is
//! checkpointed, so a resumed run decays exactly like an uninterrupted one.

use hetgen_spec::model::{BuiltinTrainer, Job, Length, Schedule, ScheduleName, Source};

/// A learning-rate schedule with its run length, when known.
#[derive(Debug, Clone, PartialEq)]
pub struct LrSchedule {
    lr: f64,
    schedule: Schedule,
    /// Steps of the whole run; `None` until known (cosine over epochs of a non-synthetic source).
    total: Option<u64>,
    /// First step of the cosine decay.
    decay_start: u64,
}

impl LrSchedule {
    /// A schedule of base rate `lr` over `total` steps (`None`: not known yet).
    pub fn new(lr: f64, schedule: Schedule, total: Option<u64>) -> Self {
        let decay_start = schedule.warmup_steps;
        Self {
            lr,
            schedule,
            total,
            decay_start,
        }
    }

    /// The schedule of a job, with the run length it can know before training.
    pub fn for_job(job: &Job, trainer: &BuiltinTrainer) -> Self {
        let total = match trainer.length {
            Length::Steps(n) => Some(n),
            Length::Epochs(epochs) => {
                batches_per_epoch(job).map(|batches| u64::from(epochs) * batches)
            }
        };
        Self::new(trainer.optimizer.lr, trainer.lr_schedule.clone(), total)
    }

    /// Whether the run length is known.
    pub fn knows_total(&self) -> bool {
        self.total.is_some()
    }

    /// Learns the run length once epoch 0 is over: `epoch0_batches` steps per epoch, `epochs`
    /// epochs. The decay starts at the end of epoch 0 (or of the warm-up, if later).
    pub fn learn_epoch_length(&mut self, epoch0_batches: u64, epochs: u32) {
        if self.total.is_none() {
            self.total = Some(epoch0_batches * u64::from(epochs));
            self.decay_start = self.schedule.warmup_steps.max(epoch0_batches);
        }
    }

    /// The learning rate of step `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        let warmup = self.schedule.warmup_steps;
        if step < warmup {
            return self.lr * (step + 1) as f64 / warmup as f64;
        }
        match self.schedule.name {
            ScheduleName::Constant => self.lr,
            ScheduleName::Step => {
                let size = self.schedule.step_size.unwrap_or(u64::MAX).max(1);
                let decays = (step - warmup) / size;
                self.lr * self.schedule.gamma.powf(decays as f64)
            }
            ScheduleName::Cosine => match self.total {
                None => self.lr,
                Some(total) => {
                    let start = self.decay_start;
                    if step < start || total <= start {
                        return if total <= start && step >= start {
                            self.schedule.min_lr
                        } else {
                            self.lr
                        };
                    }
                    let t = ((step - start) as f64 / (total - start) as f64).min(1.0);
                    let min = self.schedule.min_lr;
                    min + (self.lr - min) * (1.0 + (std::f64::consts::PI * t).cos()) / 2.0
                }
            },
        }
    }
}

/// Batches per epoch of a synthetic source for a single trainer rank: the epoch is cut into
/// shards of `shard_size`, each into batches of `batch_size` (the last of each shard may be
/// short). `None` for sources whose size the spec does not state.
pub fn batches_per_epoch(job: &Job) -> Option<u64> {
    let Source::Synthetic { samples, .. } = job.pipeline.source else {
        return None;
    };
    let shard = u64::from(job.pipeline.shard_size.max(1));
    let batch = u64::from(job.pipeline.batch_size.max(1));
    let full = samples / shard;
    let rest = samples % shard;
    Some(full * shard.div_ceil(batch) + rest.div_ceil(batch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(name: ScheduleName, warmup: u64) -> Schedule {
        Schedule {
            name,
            warmup_steps: warmup,
            step_size: Some(10),
            gamma: 0.5,
            min_lr: 0.01,
        }
    }

    /// Asserts the rate at each `(step, lr)`, naming the step whose rate differs.
    fn expect(s: &LrSchedule, want: &[(u64, f64)]) {
        for &(step, lr) in want {
            let got = s.lr(step);
            assert!(
                (got - lr).abs() < 1e-12,
                "step {step}: lr {got}, expected {lr}"
            );
        }
    }

    #[test]
    fn warmup_ramps_to_lr() {
        let s = LrSchedule::new(1.0, schedule(ScheduleName::Constant, 4), Some(100));
        expect(&s, &[(0, 0.25), (1, 0.5), (3, 1.0), (4, 1.0), (99, 1.0)]);
    }

    #[test]
    fn step_decays_every_step_size_after_warmup() {
        let s = LrSchedule::new(0.8, schedule(ScheduleName::Step, 2), Some(100));
        expect(&s, &[(0, 0.4), (2, 0.8), (11, 0.8), (12, 0.4), (22, 0.2)]);
    }

    #[test]
    fn cosine_goes_from_lr_to_min_lr() {
        let s = LrSchedule::new(1.0, schedule(ScheduleName::Cosine, 0), Some(100));
        expect(&s, &[(0, 1.0), (50, 0.01 + 0.99 * 0.5), (100, 0.01)]);
        assert!(s.lr(25) > s.lr(75));
        let warm = LrSchedule::new(1.0, schedule(ScheduleName::Cosine, 10), Some(110));
        expect(&warm, &[(10, 1.0), (60, 0.505)]);
    }

    #[test]
    fn cosine_without_a_length_holds_until_learnt() {
        let mut s = LrSchedule::new(1.0, schedule(ScheduleName::Cosine, 0), None);
        expect(&s, &[(7, 1.0)]);
        s.learn_epoch_length(10, 3);
        assert!(s.knows_total());
        expect(&s, &[(9, 1.0), (10, 1.0), (20, 0.505), (30, 0.01)]);
    }
}
