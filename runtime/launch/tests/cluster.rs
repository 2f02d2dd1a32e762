//! Whole jobs through the real runtime: data servers and a libtorch trainer as separate
//! processes on loopback addresses, exchanging batches over gRPC.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use hetgen_pipeline::{Engine, InputConfig, LocalInput, StageRegistry};
use hetgen_spec::model::{Device, Role};

const DIGITS: &str = r#"
version = 1
[job]
name = "digits"
seed = 7

[[instance_group]]
name = "data_group"
instance_type = "ml.c5.xlarge"
count = 2
role = "data"

[[instance_group]]
name = "dnn_group"
instance_type = "ml.m5.xlarge"
count = 1
role = "trainer"

[[channel]]
name = "train"
uri = "s3://example-bucket/digits/train/"
local_path = "data/train"
instance_groups = ["data_group"]

[pipeline]
source = { format = "image-folder", channel = "train" }
batch_size = 32
shard_size = 128

[[pipeline.stage]]
op = "decode"
channels = 1

[[pipeline.stage]]
op = "resize"
size = [28, 28]

[[pipeline.stage]]
op = "normalize"
mean = [0.3]
std = [0.4]

[trainer]
model = "mnist-cnn"
steps = 200
optimizer = { name = "adam", lr = 0.002 }
device = "cpu"
log_every = 20
"#;

#[test]
fn a_cnn_trained_through_two_data_servers_classifies_held_out_digits() {
    let dir = tempfile::tempdir().unwrap();
    write_digits(&dir.path().join("data"));
    let job = job(DIGITS);
    let local = prepare(&job, dir.path(), 3);
    let record = run_completed(&local);

    // The trainer ended the data servers (Shutdown), not their 120 s watchdog.
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.role == Role::Trainer)
        .unwrap();
    for host in record.hosts.iter().filter(|h| h.role == Role::Data) {
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

const SYNTHETIC: &str = r#"
version = 1
[job]
name = "ab"
seed = 11

[[instance_group]]
name = "data_group"
instance_type = "ml.c5.xlarge"
count = 2
role = "data"

[[instance_group]]
name = "dnn_group"
instance_type = "ml.m5.xlarge"
count = 1
role = "trainer"

[pipeline]
source = { format = "synthetic", shape = [16, 16, 3], classes = 4, samples = 640, encoding = "png" }
batch_size = 16
shard_size = 48

[[pipeline.stage]]
op = "decode"

[[pipeline.stage]]
op = "random_resized_crop"
size = [12, 12]
scale = [0.5, 1.0]

[[pipeline.stage]]
op = "horizontal_flip"

[trainer]
model = "mlp"
steps = 60
optimizer = { name = "sgd", lr = 0.05, momentum = 0.9 }
device = "cpu"
log_every = 1
deterministic = true
"#;

#[test]
fn remote_and_local_input_give_the_same_loss_sequence() {
    let job = job(SYNTHETIC);
    let remote_dir = tempfile::tempdir().unwrap();
    let remote = run_completed(&prepare(&job, remote_dir.path(), 1));

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
