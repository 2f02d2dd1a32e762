use super::*;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

const HETERO: &str = r#"{
  "current_group_name": "dnn_group",
  "current_host": "algo-1",
  "current_instance_type": "ml.p3.2xlarge",
  "hosts": ["algo-1", "algo-2", "algo-3"],
  "instance_groups": [
    {"hosts": ["algo-3", "algo-2"], "instance_group_name": "data_group", "instance_type": "ml.c5.xlarge"},
    {"hosts": ["algo-1"], "instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge"}
  ],
  "network_interface_name": "eth0"
}"#;

#[test]
fn reads_a_heterogeneous_tree_in_any_host_order() {
    let dir = tree(&[
        ("input/config/resourceconfig.json", HETERO),
        (
            "input/config/hyperparameters.json",
            r#"{"epochs": "3", "lr": 0.1}"#,
        ),
        (
            "input/config/inputdataconfig.json",
            r#"{"training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}}"#,
        ),
    ]);
    let env = Env::load_from(dir.path(), |_| None).unwrap();
    assert_eq!(env.host(), "algo-1");
    assert_eq!(env.group(), "dnn_group");
    assert!(env.is_hetero());
    assert_eq!(env.resources.hosts_of("data_group"), ["algo-2", "algo-3"]);
    assert_eq!(env.hyperparameters["epochs"], "3");
    assert_eq!(env.hyperparameters["lr"], "0.1");
    assert_eq!(
        env.channel_dirs["training"],
        dir.path().join("input/data/training")
    );
    assert_eq!(env.paths.failure_file(), dir.path().join("output/failure"));
}

#[test]
fn channel_folder_follows_sm_channel_variables() {
    let dir = tree(&[
        ("input/config/resourceconfig.json", HETERO),
        ("input/config/inputdataconfig.json", r#"{"train-set": {}}"#),
    ]);
    let env = Env::load_from(dir.path(), |name| {
        (name == "SM_CHANNEL_TRAIN_SET").then(|| "/data/x".to_owned())
    })
    .unwrap();
    assert_eq!(env.channel_dirs["train-set"], PathBuf::from("/data/x"));
    assert!(env.hyperparameters.is_empty());
}

#[test]
fn classic_jobs_form_one_homogeneous_group() {
    let dir = tree(&[(
        "input/config/resourceconfig.json",
        r#"{"current_host": "algo-2", "hosts": ["algo-1", "algo-2"], "network_interface_name": "eth0"}"#,
    )]);
    let env = Env::load_from(dir.path(), |_| None).unwrap();
    assert_eq!(env.group(), "homogeneousCluster");
    assert!(!env.is_hetero());
    assert_eq!(
        env.resources.hosts_of("homogeneousCluster"),
        ["algo-1", "algo-2"]
    );
}

#[test]
fn errors_name_the_file_and_position() {
    let missing = tempfile::tempdir().unwrap();
    let err = Env::load_from(missing.path(), |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("resourceconfig.json") && err.contains("SAGEMAKER_BASE_DIR"),
        "{err}"
    );

    let bad = tree(&[("input/config/resourceconfig.json", "{\n  \"hosts\": [1,\n")]);
    let err = Env::load_from(bad.path(), |_| None).unwrap_err();
    assert!(matches!(err, EnvError::Malformed { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("resourceconfig.json:2:"), "{err}");
    assert!(
        !err.to_string().contains(" at line "),
        "position said twice: {err}"
    );

    let stranger = tree(&[(
        "input/config/resourceconfig.json",
        r#"{"current_host": "algo-9", "hosts": ["algo-1"]}"#,
    )]);
    let err = Env::load_from(stranger.path(), |_| None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("algo-9"), "{err}");
}

#[test]
fn hosts_file_lookup_and_errors() {
    let dir = tree(&[(
        "hosts.txt",
        "# local cluster\n127.0.3.1 algo-1\n127.0.3.2 algo-2 extra\n",
    )]);
    let hosts = HostsFile::read(&dir.path().join("hosts.txt")).unwrap();
    assert_eq!(hosts.lookup("algo-2"), Some("127.0.3.2".parse().unwrap()));
    assert_eq!(hosts.lookup("extra"), Some("127.0.3.2".parse().unwrap()));
    assert_eq!(hosts.lookup("algo-3"), None);
    let bad = tree(&[("hosts.txt", "127.0.0.1 a\nnot-an-ip b\n")]);
    let err = HostsFile::read(&bad.path().join("hosts.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("hosts.txt:2:1"), "{err}");
}

#[test]
fn a_summary_reads_back_exactly() {
    // serde_json's default float parser may miss the last bit (this value came back as
    // 42985.18583232157): the workspace enables `float_roundtrip`, so what one process writes
    // another reads bit for bit.
    let summary = Summary {
        steps: 32,
        epochs_started: 2,
        samples: 512,
        mean_step_ms: 0.3722212592592592,
        mean_wait_ms: 0.3722212592592592,
        stall_fraction: 1.0,
        samples_per_s: 42985.185832321564,
        final_loss: 0.0,
        device: "cpu".to_owned(),
        model: "none (input only)".to_owned(),
        replicas: 0,
        resumed_from_step: None,
        input: InputReport {
            batches_by_source: [("algo-2".to_owned(), 30), ("local".to_owned(), 2)].into(),
            local_threads: 3,
            backup_shards: 1,
            duplicate_batches: 4,
        },
    };
    let dir = tempfile::tempdir().unwrap();
    summary.write(dir.path()).unwrap();
    let back = Summary::read(dir.path()).unwrap().unwrap();
    assert_eq!(
        back.samples_per_s.to_bits(),
        summary.samples_per_s.to_bits()
    );
    assert_eq!(back, summary);
    // The input's keys stand beside the others, where readers of older summaries find them.
    let json: serde_json::Value =
        serde_json::from_str(&summary.line()[SUMMARY_LINE_PREFIX.len()..]).unwrap();
    assert_eq!(json["batches_by_source"]["algo-2"], 30);
    assert_eq!(json["duplicate_batches"], 4);
    assert!(json.get("input").is_none());
}

#[test]
fn a_summary_without_input_keys_reads_with_an_empty_report() {
    let line = r#"{"steps":1,"epochs_started":1,"samples":8,"mean_step_ms":1.0,"mean_wait_ms":0.5,
        "stall_fraction":0.5,"samples_per_s":8.0,"final_loss":0.1,"device":"cpu","model":"mlp",
        "replicas":1,"resumed_from_step":null}"#;
    let summary: Summary = serde_json::from_str(line).unwrap();
    assert_eq!(summary.input, InputReport::default());
}
