//! End-to-end training on the CPU with the synthetic squares stream.

mod common;

use std::collections::HashMap;

use common::{CLASSES, Squares, builtin, job, paths, run, run_with};
use hetgen_spec::model::{Length, Model, OptimizerName};
use hetgen_trainer::{MODEL_FILE, StepRecord, Summary, TrainError, step_line};
use regex::Regex;
use tch::Tensor;

fn weights(dir: &std::path::Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(dir.join(MODEL_FILE))
        .expect("the model file reads back")
        .into_iter()
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[test]
fn mlp_learns_and_evaluates_well() {
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let job = job(Model::Mlp, 60);
    let (summary, losses, opened) = run(&job, &paths, 1).unwrap();
    assert_eq!(opened, vec![None]);
    assert_eq!(losses.len(), 60);
    assert_eq!(summary.steps, 60);
    assert_eq!(summary.samples, 60 * 16);
    // 256 samples = 16 batches an epoch: step 60 is in epoch 3.
    assert_eq!(summary.epochs_started, 4);
    assert_eq!(summary.device, "cpu");
    assert_eq!(summary.model, "mlp");
    assert_eq!(summary.replicas, 1);
    assert_eq!(summary.resumed_from_step, None);
    assert_eq!(summary.final_loss, losses[59]);
    let first = mean(&losses[..5]);
    let last = mean(&losses[55..]);
    assert!(last < first * 0.3, "loss went from {first} to {last}");

    // Training returns the summary; reporting it writes the file (and prints the line).
    assert!(!paths.output_data_dir.join("summary.json").exists());
    hetgen_trainer::report(&paths.output_data_dir, &summary).unwrap();
    let written: Summary = serde_json::from_str(
        &std::fs::read_to_string(paths.output_data_dir.join("summary.json")).unwrap(),
    )
    .unwrap();
    // JSON keeps floats to within an ulp or so.
    assert_eq!(written.steps, summary.steps);
    assert_eq!(written.samples, summary.samples);
    assert!((written.mean_wait_ms - summary.mean_wait_ms).abs() < 1e-9);
    assert!((written.final_loss - summary.final_loss).abs() < 1e-12);
    assert!(paths.model_dir.join("model.json").is_file());

    // Held out: other noise and jitter (seed 99) and epochs the run never saw.
    let mut held_out = Squares::new(99, None, None);
    // Building the model draws initial weights from torch's generator.
    let exclusive = common::exclusive();
    let eval = hetgen_trainer::evaluate(
        &job,
        &paths.model_dir.join(MODEL_FILE),
        None,
        &mut held_out,
        Some(8),
    )
    .unwrap();
    drop(exclusive);
    assert_eq!(eval.samples, 8 * 16);
    assert!(eval.accuracy > 0.9, "{eval:?}");
    assert!(eval.mean_loss < first, "{eval:?}");
}

#[test]
fn same_seed_same_losses() {
    let job = job(Model::MnistCnn, 12);
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (_, first, _) = run(&job, &paths(a.path()), 3).unwrap();
    let (_, second, _) = run(&job, &paths(b.path()), 3).unwrap();
    assert_eq!(first, second);
    let wa = weights(&paths(a.path()).model_dir);
    let wb = weights(&paths(b.path()).model_dir);
    for (name, t) in &wa {
        assert!(t.equal(&wb[name]), "{name} differs");
    }

    // Another job seed gives other initial weights and dropout masks.
    let mut other = job.clone();
    other.seed += 1;
    let c = tempfile::tempdir().unwrap();
    let (_, third, _) = run(&other, &paths(c.path()), 3).unwrap();
    assert_ne!(first, third);
}

#[test]
fn resumed_run_matches_uninterrupted_run() {
    // mnist-cnn has dropout (torch's RNG), SGD with momentum has state: both must resume exactly.
    let mut full = job(Model::MnistCnn, 14);
    builtin(&mut full).optimizer.name = OptimizerName::Sgd;
    builtin(&mut full).optimizer.lr = 0.05;
    builtin(&mut full).optimizer.momentum = 0.9;
    builtin(&mut full).optimizer.weight_decay = 1e-4;
    builtin(&mut full).checkpoint_every = Some(4);
    let a = tempfile::tempdir().unwrap();
    let (summary_a, losses_a, _) = run(&full, &paths(a.path()), 5).unwrap();

    let b = tempfile::tempdir().unwrap();
    let mut part = full.clone();
    builtin(&mut part).length = Length::Steps(6);
    let (summary_b1, losses_b1, opened_b1) = run(&part, &paths(b.path()), 5).unwrap();
    assert_eq!(opened_b1, vec![None]);
    assert_eq!(summary_b1.steps, 6);
    // Only the latest checkpoint is kept (the one at the end, step 6).
    let kept: Vec<_> = std::fs::read_dir(paths(b.path()).checkpoint_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(kept, vec!["step-000000000006".to_owned()]);

    let (summary_b2, losses_b2, opened_b2) = run(&full, &paths(b.path()), 5).unwrap();
    assert_eq!(summary_b2.resumed_from_step, Some(6));
    assert_eq!(summary_b2.steps, 14);
    assert_eq!(summary_b2.samples, summary_a.samples);
    assert_eq!(opened_b2.len(), 1);
    assert!(
        opened_b2[0].is_some(),
        "the resumed run opens the stream at the checkpoint"
    );

    let resumed: Vec<f64> = losses_b1.iter().chain(&losses_b2).copied().collect();
    assert_eq!(resumed, losses_a);
    let wa = weights(&paths(a.path()).model_dir);
    let wb = weights(&paths(b.path()).model_dir);
    assert_eq!(wa.len(), wb.len());
    for (name, t) in &wa {
        assert!(t.equal(&wb[name]), "{name} differs after the resume");
    }

    // A finished run resumes at its end and trains no further.
    let (again, losses, _) = run(&full, &paths(b.path()), 5).unwrap();
    assert_eq!(again.resumed_from_step, Some(14));
    assert!(losses.is_empty());
}

#[test]
fn epochs_end_with_the_stream() {
    let mut job = job(Model::Mlp, 0);
    builtin(&mut job).length = Length::Epochs(2);
    let dir = tempfile::tempdir().unwrap();
    let (summary, losses, _) = run(&job, &paths(dir.path()), 1).unwrap();
    assert_eq!(summary.steps, 32);
    assert_eq!(losses.len(), 32);
    assert_eq!(summary.epochs_started, 2);
}

#[test]
fn a_checkpoint_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let job4 = job(Model::Mlp, 3);
    run(&job4, &paths(dir.path()), 1).unwrap();
    let mut job5 = job4.clone();
    builtin(&mut job5).num_classes = CLASSES + 1;
    match run(&job5, &paths(dir.path()), 1) {
        Err(TrainError::ForeignCheckpoint { why, .. }) => {
            assert!(why.contains("num_classes"), "{why}")
        }
        other => panic!("expected ForeignCheckpoint, got {:?}", other.map(|r| r.0)),
    }
}

#[test]
fn a_corrupt_checkpoint_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let job = job(Model::Mlp, 2);
    run(&job, &paths(dir.path()), 1).unwrap();
    let ckpt = paths(dir.path()).checkpoint_dir.join("step-000000000002");
    std::fs::write(ckpt.join("weights.ot"), b"not a tensor file").unwrap();
    assert!(matches!(
        run(&job, &paths(dir.path()), 1),
        Err(TrainError::CorruptCheckpoint { .. })
    ));
    std::fs::write(ckpt.join("state.json"), b"{").unwrap();
    assert!(matches!(
        run(&job, &paths(dir.path()), 1),
        Err(TrainError::CorruptCheckpoint { .. })
    ));
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let job = job(Model::Mlp, 5);
    let dir = tempfile::tempdir().unwrap();
    let shape = run_with(&job, &paths(dir.path()), &mut |start| {
        let mut s = Squares::new(1, None, start);
        s.shape = [12, 10, 1];
        s
    });
    assert!(matches!(
        shape,
        Err(TrainError::Shape {
            got: [12, 10, 1],
            want: [12, 12, 1]
        })
    ));

    let dir = tempfile::tempdir().unwrap();
    let failing = run_with(&job, &paths(dir.path()), &mut |start| {
        let mut s = Squares::new(1, None, start);
        s.fail_at = Some(2);
        s
    });
    assert!(matches!(failing, Err(TrainError::Input(_))));
}

#[test]
fn divergence_names_the_step() {
    let mut job = job(Model::Mlp, 50);
    builtin(&mut job).optimizer.name = OptimizerName::Sgd;
    builtin(&mut job).optimizer.lr = 1e12;
    let dir = tempfile::tempdir().unwrap();
    match run(&job, &paths(dir.path()), 1) {
        Err(TrainError::NonFinite { step, .. }) => assert!((1..=50).contains(&step)),
        other => panic!("expected NonFinite, got {:?}", other.map(|r| r.1)),
    }
}

#[test]
fn metric_lines_match_the_spec_regexes() {
    let job = job(Model::Mlp, 3);
    let dir = tempfile::tempdir().unwrap();
    let _exclusive = common::exclusive();
    let mut records = Vec::new();
    let mut open =
        |start| -> Result<Box<dyn hetgen_pipeline::BatchStream>, hetgen_pipeline::BoxError> {
            Ok(Box::new(Squares::new(1, None, start)))
        };
    hetgen_trainer::train_observed(
        &job,
        &paths(dir.path()),
        &Default::default(),
        &mut open,
        &mut |r: &StepRecord| records.push(r.clone()),
    )
    .unwrap();
    let line_shape = Regex::new(
        r"^hetgen-step step=\d+ loss=\d+\.\d{4} step_ms=\d+\.\d{2} wait_ms=\d+\.\d{2} samples_per_s=\d+\.\d$",
    )
    .unwrap();
    let metrics = hetgen_spec::model::builtin_metrics();
    assert_eq!(metrics.len(), 4);
    for record in &records {
        let line = step_line(record);
        assert!(line_shape.is_match(&line), "{line}");
        for metric in &metrics {
            let re = Regex::new(&metric.regex).unwrap();
            let value: f64 = re
                .captures(&line)
                .unwrap_or_else(|| panic!("{} does not match {line}", metric.regex))[1]
                .parse()
                .unwrap();
            let want = match metric.name.as_str() {
                "train:loss" => record.loss,
                "train:step_ms" => record.step_ms,
                "train:wait_ms" => record.wait_ms,
                "train:samples_per_s" => record.samples_per_s(),
                other => panic!("unknown metric {other}"),
            };
            assert!(
                (value - want).abs() <= 0.05 + want.abs() * 1e-3,
                "{}: {value} vs {want}",
                metric.name
            );
        }
    }
}

#[test]
fn the_schedule_drives_each_step() {
    use hetgen_spec::model::ScheduleName;
    use hetgen_trainer::schedule::{LrSchedule, batches_per_epoch};

    let mut job = job(Model::Mlp, 0);
    builtin(&mut job).length = Length::Epochs(2);
    builtin(&mut job).lr_schedule.name = ScheduleName::Cosine;
    builtin(&mut job).lr_schedule.warmup_steps = 4;
    builtin(&mut job).lr_schedule.min_lr = 0.0;
    // 256 samples in shards of 64, batches of 16: 16 batches an epoch, known from the spec.
    assert_eq!(batches_per_epoch(&job), Some(16));
    let schedule = LrSchedule::for_job(&job, job.trainer.builtin().unwrap());
    assert!(schedule.knows_total());

    let _exclusive = common::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let mut lrs = Vec::new();
    let mut open =
        |start| -> Result<Box<dyn hetgen_pipeline::BatchStream>, hetgen_pipeline::BoxError> {
            Ok(Box::new(Squares::new(1, Some(2), start)))
        };
    hetgen_trainer::train_observed(
        &job,
        &paths(dir.path()),
        &Default::default(),
        &mut open,
        &mut |r: &StepRecord| lrs.push(r.lr),
    )
    .unwrap();
    let lr = builtin(&mut job).optimizer.lr;
    assert_eq!(lrs.len(), 32);
    assert!((lrs[0] - lr / 4.0).abs() < 1e-12);
    assert!((lrs[3] - lr).abs() < 1e-12);
    for (i, got) in lrs.iter().enumerate() {
        assert!((got - schedule.lr(i as u64)).abs() < 1e-15, "step {i}");
    }
    assert!(lrs[31] < lr * 0.01);
}

#[test]
fn drain_takes_the_batches_and_trains_nothing() {
    let mut job = job(Model::Mlp, 0);
    builtin(&mut job).length = Length::Epochs(2);
    let dir = tempfile::tempdir().unwrap();
    let paths = paths(dir.path());
    let mut opened = Vec::new();
    let summary = hetgen_trainer::drain(&job, &mut |start| {
        opened.push(start.clone());
        Ok(Box::new(common::Squares::new(1, Some(2), start)))
    })
    .unwrap();
    // The same batches a training run takes (epochs_end_with_the_stream), from the start.
    assert_eq!(summary.steps, 32);
    assert_eq!(summary.epochs_started, 2);
    assert_eq!(opened, vec![None]);
    assert_eq!(summary.model, hetgen_trainer::INPUT_ONLY);
    assert!(summary.samples_per_s > 0.0, "{summary:?}");
    assert_eq!(summary.stall_fraction, 1.0);
    hetgen_trainer::report(&paths.output_data_dir, &summary).unwrap();
    let written: Summary = serde_json::from_str(
        &std::fs::read_to_string(paths.output_data_dir.join(hetgen_trainer::SUMMARY_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(written, summary);
    // Nothing trained: no model, no checkpoint.
    assert!(!paths.model_dir.join(MODEL_FILE).exists());
    assert!(!paths.checkpoint_dir.exists());

    // A step budget stops it early; bad input is an error, as in training.
    builtin(&mut job).length = Length::Steps(5);
    let summary = hetgen_trainer::drain(&job, &mut |start| {
        Ok(Box::new(common::Squares::new(1, None, start)))
    })
    .unwrap();
    assert_eq!(summary.steps, 5);
    let failing = hetgen_trainer::drain(&job, &mut |start| {
        let mut s = common::Squares::new(1, None, start);
        s.fail_at = Some(2);
        Ok(Box::new(s))
    });
    assert!(matches!(failing, Err(TrainError::Input(_))));
}
