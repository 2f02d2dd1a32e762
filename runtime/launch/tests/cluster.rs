//! Whole jobs through the real runtime: data servers and a libtorch trainer as separate
//! processes on loopback addresses, exchanging batches over gRPC.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use hetgen_fixtures::{Spec, spec};
use hetgen_pipeline::{Engine, InputConfig, LocalInput, StageRegistry};
use hetgen_spec::model::{Device, Role};

#[test]
fn a_cnn_trained_through_two_data_servers_classifies_held_out_digits() {
    let dir = tempfile::tempdir().unwrap();
    write_digits(&dir.path().join("data"));
    let job = spec("digits").job();
    let local = prepare(&job, dir.path(), 3);
    let record = run_completed(&local);

    // The trainer ended the data servers (Shutdown), not their 120 s watchdog.
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.host.role == Role::Trainer)
        .unwrap();
    for host in record.hosts.iter().filter(|h| h.host.role == Role::Data) {
        assert_eq!(host.exit_code, Some(0), "{host:?}");
        assert!(
            host.duration_s < trainer.duration_s + 10.0,
            "{host:?} outlived the trainer by {} s",
            host.duration_s - trainer.duration_s
        );
    }
    let losses = losses(&record);
    assert!(losses.len() >= 10, "{losses:?}");

    // Held-out accuracy of the saved model, on the same pipeline over the test split.
    let mut test_job = job.clone();
    test_job.pipeline.source = hetgen_spec::model::Source::ImageFolder {
        channel: "test".into(),
    };
    let channels = BTreeMap::from([("test".to_owned(), dir.path().join("data/test"))]);
    let engine =
        Arc::new(Engine::new(&test_job, &StageRegistry::builtin(), &channels, Some(2)).unwrap());
    let config = InputConfig {
        seed: 0,
        samples_per_epoch: engine.samples_per_epoch(),
        shards: None,
        shard_size: 128,
        batch_size: 64,
        epochs: Some(1),
        rank: 0,
        world: 1,
        deterministic: true,
    };
    let mut stream = LocalInput::new(engine, config, None);
    let model_dir = record.model_dir.clone().expect("the trainer saved a model");
    let evaluation = hetgen_trainer::evaluate(
        &test_job,
        &model_dir.join(hetgen_trainer::MODEL_FILE),
        Some(Device::Cpu),
        &mut stream,
        None,
    )
    .unwrap();
    eprintln!("held-out digits: {evaluation:?}");
    assert_eq!(evaluation.samples, 360);
    assert!(
        evaluation.accuracy >= 0.9,
        "held-out accuracy {evaluation:?}"
    );
}

#[test]
fn remote_and_local_input_give_the_same_loss_sequence() {
    let job = spec("ab").job();
    let remote_dir = tempfile::tempdir().unwrap();
    // The audit file: every sample the trainer's input yielded, once per epoch; epoch 0 whole.
    let (remote, seen) = run_audited(&job, remote_dir.path(), 1);
    assert_eq!(seen.iter().filter(|(e, _)| *e == 0).count(), 640);
    assert!(seen.iter().filter(|(e, _)| *e == 1).count() >= 20 * 16);

    let local_dir = tempfile::tempdir().unwrap();
    let mut local = prepare(&job, local_dir.path(), 2);
    for command in local
        .commands
        .iter_mut()
        .filter(|c| c.host.role == Role::Trainer)
    {
        command
            .args
            .extend(["--input".to_owned(), "local".to_owned()]);
    }
    let local = run_completed(&local);

    let (a, b) = (losses(&remote), losses(&local));
    assert_eq!(a.len(), 60);
    assert_eq!(a, b, "remote and local input diverged");
    // More than one epoch (640 / 16 = 40 batches): the epoch boundary is crossed the same way.
    assert!(a[0].1 > a[59].1, "the model learned nothing: {a:?}");
}

/// The `ab` job with hybrid input: the trainer host's pipeline keeps no vCPU back, so it
/// preprocesses beside the two data hosts.
fn hybrid_spec() -> Spec {
    spec("ab").set("pipeline.reserve_vcpus", 0)
}

#[test]
fn hybrid_input_mixes_both_sides_once_per_epoch_with_the_remote_only_losses() {
    let job = hybrid_spec().job();
    let dir = tempfile::tempdir().unwrap();
    let (hybrid, seen) = run_audited(&job, dir.path(), 1);
    assert_eq!(seen.iter().filter(|(e, _)| *e == 0).count(), 640);

    // The summary says who made what: this host and the data hosts, 60 batches in all, and
    // the local pipeline got what `plan` counts for the same spec on these cores.
    let summary = hybrid.summary.clone().unwrap();
    let sources = &summary.input.batches_by_source;
    let local = sources.get(hetgen_data::client::LOCAL_SOURCE).copied();
    assert!(local.is_some_and(|n| n > 0), "{sources:?}");
    assert!(
        sources.len() == 3 && sources.values().all(|n| *n > 0),
        "{sources:?}"
    );
    assert!(sources.values().sum::<u64>() >= 60, "{sources:?}");
    let cores = hetgen_pipeline::available_cores() as u32;
    assert_eq!(summary.input.local_threads, job.trainer_threads(cores));
    assert_eq!(summary.input.local_threads, cores);

    // Deterministic mode: the same batches in the same order as the data hosts alone.
    let remote_dir = tempfile::tempdir().unwrap();
    let remote_job = spec("ab").set("pipeline.trainer_threads", 0).job();
    let remote = run_completed(&prepare(&remote_job, remote_dir.path(), 2));
    let remote_summary = remote.summary.clone().unwrap();
    assert_eq!(remote_summary.input.local_threads, 0);
    assert!(
        !remote_summary
            .input
            .batches_by_source
            .contains_key(hetgen_data::client::LOCAL_SOURCE)
    );
    assert_eq!(
        losses(&hybrid),
        losses(&remote),
        "hybrid and remote-only diverged"
    );
}

/// Checkpoint, SIGKILL the trainer mid-run, resume from its checkpoints in a new run: the
/// final weights equal those of an uninterrupted run, byte for byte. With hybrid input, so the
/// resumed input mixes the trainer's own batches with the data hosts'.
#[test]
fn a_trainer_killed_and_resumed_ends_with_the_weights_of_an_uninterrupted_run() {
    let job = hybrid_spec()
        .set("trainer.steps", 90)
        .set("trainer.checkpoint_every", 10)
        .set("trainer.log_every", 10)
        .job();
    let whole_dir = tempfile::tempdir().unwrap();
    let whole = run_completed(&prepare(&job, whole_dir.path(), 5));

    // The interrupted run, on a thread, killed from here once a checkpoint exists.
    let killed_dir = tempfile::tempdir().unwrap();
    let killed = prepare(&job, killed_dir.path(), 6);
    let killed_tree = trainer_tree(&killed);
    let running = std::thread::spawn(move || {
        let record = killed
            .run(&hetgen_local::StopRequests::new(), &mut Lines::default())
            .unwrap();
        (killed, record)
    });
    let checkpoints = killed_tree.join("checkpoints");
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no checkpoint appeared"
        );
        let any = std::fs::read_dir(&checkpoints).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("step-"))
        });
        if any {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = trainer_pid(&killed_tree).expect("the trainer is running");
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let (_, record) = running.join().unwrap();
    assert_eq!(record.status, hetgen_local::supervise::Status::Failed);

    // A new run of the same job that finds those checkpoints, as a restarted SageMaker job
    // finds what it synced to S3.
    let resumed_dir = tempfile::tempdir().unwrap();
    let resumed = prepare(&job, resumed_dir.path(), 7);
    copy_dir(&checkpoints, &trainer_tree(&resumed).join("checkpoints"));
    let resumed = run_completed(&resumed);
    let summary = resumed.summary.clone().unwrap();
    let from = summary.resumed_from_step.expect("the trainer resumed");
    assert!((10..90).contains(&from), "{summary:?}");

    let weights = |r: &hetgen_local::JobRecord| {
        std::fs::read(
            r.model_dir
                .as_ref()
                .unwrap()
                .join(hetgen_trainer::MODEL_FILE),
        )
        .unwrap()
    };
    assert!(
        weights(&whole) == weights(&resumed),
        "resumed from step {from}: final weights differ"
    );
}

/// The pid of the process running in `tree` (a host's working directory).
fn trainer_pid(tree: &std::path::Path) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
        (std::fs::read_link(e.path().join("cwd")).ok()? == tree).then_some(pid)
    })
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}
