//! The pods a rendered job becomes, as Kubeflow Trainer and JobSet make them.

use std::collections::BTreeMap;

use hetgen_kube::pods::{Mount, pods};

fn job() -> hetgen_spec::Job {
    hetgen_fixtures::spec("py-script")
        .set("instance_group.0.count", 2)
        .set("instance_group.1.count", 2)
        .merge("[kubernetes]\nimage = \"registry.example.com/digits:1\"\nenvironment = { A = \"x\" }\n")
        .job()
}

#[test]
fn every_group_becomes_its_pods_with_trainer_s_torch_variables() {
    let objects = hetgen_kube::objects(&job()).expect("a [kubernetes] section");
    let pods = pods(&objects.runtime, &objects.trainjob).unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p.host.as_str()).collect();
    assert_eq!(
        names,
        [
            "py-script-data-group-0-0.py-script",
            "py-script-data-group-0-1.py-script",
            "py-script-node-0-0.py-script",
            "py-script-node-0-1.py-script",
        ]
    );
    let secrets = BTreeMap::from([(
        ("py-script-hetgen-token".to_owned(), "token".to_owned()),
        "t0k3n".to_owned(),
    )]);
    let trainer = &pods[3];
    assert_eq!(
        trainer.depends_on,
        [("data-group".to_owned(), "Ready".to_owned())]
    );
    let env: BTreeMap<String, String> =
        trainer.environment(&secrets).unwrap().into_iter().collect();
    for (k, v) in [
        ("HETGEN_KUBE_GROUP", "dnn_group"),
        ("HETGEN_KUBE_JOBSET", "py-script"),
        ("HETGEN_KUBE_INDEX", "1"),
        ("HETGEN_JOB_TOKEN", "t0k3n"),
        ("JOB_COMPLETION_INDEX", "1"),
        ("PET_NNODES", "2"),
        ("PET_NODE_RANK", "1"),
        ("PET_MASTER_ADDR", "py-script-node-0-0.py-script"),
        ("PET_MASTER_PORT", "29500"),
        ("A", "x"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    }
    // The script's `processes_per_host` ("gpu": at least 1), as the TrainJob's numProcPerNode.
    assert_eq!(env["PET_NPROC_PER_NODE"], "1");
    assert_eq!(trainer.argv(&[]), ["/usr/local/bin/launcher", "train"]);
    let data = &pods[0];
    // The group is its replicatedJob's label, which JobSet puts on the Job, not the pod.
    assert_eq!(data.group.as_deref(), Some("data_group"));
    assert!(
        !data.labels.contains_key("hetgen.io/group"),
        "{:?}",
        data.labels
    );
    assert_eq!(
        data.labels["jobset.sigs.k8s.io/replicatedjob-name"],
        "data-group"
    );
    assert_eq!(data.container.grpc_ready_port, Some(16000));
    assert_eq!(
        data.container.mounts,
        [Mount {
            volume: "channel-training".to_owned(),
            path: "/opt/ml/input/data/training".to_owned(),
            sub_path: String::new(),
        }]
    );
    assert_eq!(data.claims["channel-training"], "py-script-training");
    let data_env = data.environment(&secrets).unwrap();
    assert!(
        data_env.iter().all(|(k, _)| !k.starts_with("PET_")),
        "{data_env:?}"
    );
}

#[test]
fn a_secret_the_cluster_lacks_is_named() {
    let objects = hetgen_kube::objects(&job()).unwrap();
    let pods = pods(&objects.runtime, &objects.trainjob).unwrap();
    let error = pods[0].environment(&BTreeMap::new()).unwrap_err();
    assert!(
        error
            .message
            .contains("no Secret `py-script-hetgen-token` with key `token`"),
        "{error}"
    );
}

#[test]
fn the_trainjob_s_trainer_overrides_the_runtime_s_node() {
    let objects = hetgen_kube::objects(&job()).unwrap();
    let mut trainjob = objects.trainjob.clone();
    trainjob["spec"]["trainer"]["numNodes"] = 3.into();
    trainjob["spec"]["trainer"]["args"] = serde_json::json!(["train", "--x=$(A)"]);
    let pods = pods(&objects.runtime, &trainjob).unwrap();
    let trainers: Vec<_> = pods.iter().filter(|p| p.replicated_job == "node").collect();
    assert_eq!(trainers.len(), 3);
    let env = trainers[2]
        .environment(&BTreeMap::from([(
            ("py-script-hetgen-token".to_owned(), "token".to_owned()),
            "t".to_owned(),
        )]))
        .unwrap();
    assert!(env.contains(&("PET_NNODES".to_owned(), "3".to_owned())));
    assert_eq!(
        trainers[2].argv(&env),
        ["/usr/local/bin/launcher", "train", "--x=x"]
    );
}
