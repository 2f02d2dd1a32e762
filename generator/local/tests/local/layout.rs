//! The simulated cluster on disk: names, addresses, every host's `/opt/ml` tree and environment,
//! checked against what SageMaker writes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use hetgen_local::layout::parse_env_flag;
use hetgen_local::{LocalError, LocalJob};
use hetgen_spec::model::Role;
use serde_json::json;

use crate::{
    SAGEMAKER, TINY, env_file, homogeneous, job, launcher_options, options, prepare, read_json,
    refused, run_to_completion, with_channels,
};

/// A launcher that is never run: layout tests only look at files.
fn no_launcher(dir: &Path) -> std::path::PathBuf {
    dir.join("never-run")
}

/// TINY prepared in a fresh folder with `seed` (`None`: a random one).
fn tiny_with_seed(seed: Option<u64>) -> (tempfile::TempDir, LocalJob) {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path(), &no_launcher(dir.path()));
    opts.seed = seed;
    let local = prepare(&job(TINY), opts);
    (dir, local)
}

/// `algo-N → group` for one run.
fn assignment(local: &LocalJob) -> BTreeMap<String, String> {
    local
        .layout
        .cluster
        .hosts
        .iter()
        .map(|h| (h.name.clone(), h.group.clone()))
        .collect()
}

#[test]
fn host_names_are_handed_out_over_the_groups_in_a_seeded_shuffle() {
    let (_a, first) = tiny_with_seed(Some(11));
    let (_b, again) = tiny_with_seed(Some(11));

    let names: Vec<String> = first
        .layout
        .cluster
        .hosts
        .iter()
        .map(|h| h.name.clone())
        .collect();
    assert_eq!(
        names,
        ["algo-1", "algo-2", "algo-3"],
        "hosts are listed in numeric order"
    );
    let groups: Vec<&str> = first
        .layout
        .cluster
        .hosts
        .iter()
        .map(|h| h.group.as_str())
        .collect();
    assert_eq!(groups.iter().filter(|g| **g == "data_group").count(), 2);
    assert_eq!(groups.iter().filter(|g| **g == "dnn_group").count(), 1);
    for host in &first.layout.cluster.hosts {
        let expected = if host.group == "data_group" {
            Role::Data
        } else {
            Role::Trainer
        };
        assert_eq!(host.role, expected, "{}", host.name);
        assert_eq!(
            host.instance_group, host.group,
            "a hetero job keeps the spec's group names"
        );
    }
    // One command per host, in the same order.
    let command_hosts: Vec<&str> = first
        .commands
        .iter()
        .map(|c| c.host.name.as_str())
        .collect();
    assert_eq!(command_hosts, ["algo-1", "algo-2", "algo-3"]);
    for c in &first.commands {
        assert_eq!(c.args, ["train"], "every host runs `PROGRAM train`");
        assert_eq!(c.program, first.launcher);
    }

    assert_eq!(
        assignment(&first),
        assignment(&again),
        "the same seed gives the same hosts"
    );

    // The trainer is not always algo-1 (or any fixed name): seeds give different orders.
    let orders: BTreeSet<Vec<(String, String)>> = (0..24)
        .map(|seed| {
            let (_dir, local) = tiny_with_seed(Some(seed));
            assignment(&local).into_iter().collect()
        })
        .collect();
    assert!(
        orders.len() > 1,
        "24 seeds all gave the same assignment: {orders:?}"
    );
    let trainer_names: BTreeSet<String> = orders
        .iter()
        .map(|o| o.iter().find(|(_, g)| g == "dnn_group").unwrap().0.clone())
        .collect();
    assert!(
        trainer_names.len() > 1,
        "the trainer was always {trainer_names:?}"
    );
}

#[test]
fn every_host_has_its_own_loopback_address_in_the_hosts_file() {
    let (_dir, local) = tiny_with_seed(Some(3));
    let hosts = &local.layout.cluster.hosts;
    let addresses: BTreeSet<Ipv4Addr> = hosts.iter().map(|h| h.address).collect();
    assert_eq!(
        addresses.len(),
        hosts.len(),
        "addresses are distinct: {hosts:?}"
    );
    for host in hosts {
        let [a, b, _, d] = host.address.octets();
        assert_eq!(a, 127, "{} is on loopback", host.address);
        assert_ne!(b, 0, "127.0.x.x is left to other programs");
        assert_ne!(d, 0, "no host gets the block's network address");
    }
    // algo-k is base + k: one /24 block, in name order.
    let base = u32::from(hosts[0].address) - 1;
    for (k, host) in hosts.iter().enumerate() {
        assert_eq!(
            u32::from(host.address),
            base + k as u32 + 1,
            "{}",
            host.name
        );
    }

    let path = local.layout.hosts_file();
    assert_eq!(path, local.layout.job_dir.join("hosts.txt"));
    let text = std::fs::read_to_string(&path).unwrap();
    let entries: BTreeMap<String, Ipv4Addr> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let address = parts.next().unwrap().parse().unwrap();
            let name = parts.next().unwrap().to_owned();
            assert_eq!(parts.next(), None, "one name per line: {l}");
            (name, address)
        })
        .collect();
    let expected: BTreeMap<String, Ipv4Addr> =
        hosts.iter().map(|h| (h.name.clone(), h.address)).collect();
    assert_eq!(entries, expected);
    // Every host is told where it is.
    for c in &local.commands {
        assert_eq!(Path::new(&c.env["HETGEN_HOSTS_FILE"]), path);
    }
}

#[test]
fn parallel_runs_get_different_address_blocks() {
    // Every run picks its own block, seeded or not (the seed orders hosts only), so their data
    // servers do not collide.
    for seed in [None, Some(7)] {
        let runs: Vec<(tempfile::TempDir, LocalJob)> =
            (0..4).map(|_| tiny_with_seed(seed)).collect();
        let blocks: BTreeSet<[u8; 3]> = runs
            .iter()
            .map(|(_, l)| {
                let [a, b, c, _] = l.layout.cluster.hosts[0].address.octets();
                [a, b, c]
            })
            .collect();
        assert!(
            blocks.len() > 1,
            "four runs with seed {seed:?} shared {blocks:?}"
        );
    }
}

#[test]
fn resourceconfig_is_what_sagemaker_writes_on_each_host() {
    let (_dir, local) = tiny_with_seed(Some(5));
    let cluster = &local.layout.cluster;
    let hosts_in = |group: &str| -> Vec<String> {
        cluster
            .hosts
            .iter()
            .filter(|h| h.group == group)
            .map(|h| h.name.clone())
            .collect()
    };
    for host in &cluster.hosts {
        let path = local
            .layout
            .host_dir(host)
            .join("input/config/resourceconfig.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let config: serde_json::Value = serde_json::from_str(&text).unwrap();

        // The group's hosts in hand-out order: compare as sets, then check that order is the
        // one the cluster reports (it need not be sorted).
        let groups = config["instance_groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        let data_hosts: Vec<String> = serde_json::from_value(groups[0]["hosts"].clone()).unwrap();
        let dnn_hosts: Vec<String> = serde_json::from_value(groups[1]["hosts"].clone()).unwrap();
        assert_eq!(
            data_hosts.iter().collect::<BTreeSet<_>>(),
            hosts_in("data_group").iter().collect::<BTreeSet<_>>()
        );
        assert_eq!(data_hosts, cluster.groups[0].hosts);
        assert_eq!(dnn_hosts, hosts_in("dnn_group"));

        assert_eq!(
            config,
            json!({
                "current_group_name": host.group,
                "current_host": host.name,
                "current_instance_type": host.instance_type,
                "hosts": ["algo-1", "algo-2", "algo-3"],
                "instance_groups": [
                    {"hosts": data_hosts, "instance_group_name": "data_group", "instance_type": "ml.c5.xlarge"},
                    {"hosts": dnn_hosts, "instance_group_name": "dnn_group", "instance_type": "ml.m5.xlarge"},
                ],
                "network_interface_name": "lo",
            }),
            "{}",
            path.display()
        );
        // Keys in SageMaker's (sorted) order, as the file is written, not only as parsed.
        let keys = [
            "\"current_group_name\"",
            "\"current_host\"",
            "\"current_instance_type\"",
            "\"hosts\"",
            "\"instance_groups\"",
            "\"network_interface_name\"",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| text.find(k).unwrap()).collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "key order in {text}"
        );
        let group_keys: Vec<usize> = [
            "\"hosts\":[",
            "\"instance_group_name\"",
            "\"instance_type\"",
        ]
        .iter()
        .map(|k| text.rfind(k).unwrap())
        .collect();
        assert!(
            group_keys.windows(2).all(|w| w[0] < w[1]),
            "group key order in {text}"
        );
    }
}

#[test]
fn a_one_group_job_is_a_homogeneous_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let local = prepare(
        &homogeneous(),
        options(dir.path(), &no_launcher(dir.path())),
    );
    assert_eq!(local.commands.len(), 1);
    let host = &local.layout.cluster.hosts[0];
    assert_eq!(host.name, "algo-1");
    assert_eq!(host.group, "dnn_group");
    assert_eq!(host.instance_group, "homogeneousCluster");
    let config = read_json(
        &local
            .layout
            .host_dir(host)
            .join("input/config/resourceconfig.json"),
    );
    assert_eq!(
        config,
        json!({
            "current_group_name": "homogeneousCluster",
            "current_host": "algo-1",
            "current_instance_type": "ml.m5.xlarge",
            "hosts": ["algo-1"],
            "instance_groups": [
                {"hosts": ["algo-1"], "instance_group_name": "homogeneousCluster", "instance_type": "ml.m5.xlarge"},
            ],
            "network_interface_name": "lo",
        })
    );
    let env = &local.commands[0].env;
    assert_eq!(env["SM_IS_HETERO"], "false");
    assert_eq!(env["SM_CURRENT_INSTANCE_GROUP"], "homogeneousCluster");
    assert_eq!(env["SM_INSTANCE_GROUPS"], r#"["homogeneousCluster"]"#);
}

#[test]
fn every_host_tree_has_the_sagemaker_folders_and_config_files() {
    let (_dir, local) = tiny_with_seed(Some(1));
    for host in &local.layout.cluster.hosts {
        let base = local.layout.host_dir(host);
        assert_eq!(base, local.layout.job_dir.join("hosts").join(&host.name));
        for folder in [
            "input/config",
            "input/data",
            "model",
            "output",
            "output/data",
            "checkpoints",
        ] {
            assert!(base.join(folder).is_dir(), "{} has {folder}/", host.name);
        }
        let config = base.join("input/config");
        assert_eq!(read_json(&config.join("hyperparameters.json")), json!({}));
        assert_eq!(
            read_json(&config.join("inputdataconfig.json")),
            json!({}),
            "TINY has no channels"
        );
        // The model and output folders start empty: nothing from another run.
        assert_eq!(std::fs::read_dir(base.join("model")).unwrap().count(), 0);
        let command = local
            .commands
            .iter()
            .find(|c| c.host.name == host.name)
            .unwrap();
        assert_eq!(command.base_dir, base, "each host runs in its own tree");
    }
}

#[test]
fn hyperparameters_are_the_specs_as_strings() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "{TINY}\n{SAGEMAKER}\nhyperparameters = {{ epochs = 3, lr = 0.5, warmup = true, tag = \"x y\" }}\n"
    );
    let local = prepare(&job(&spec), options(dir.path(), &no_launcher(dir.path())));
    let expected = json!({"epochs": "3", "lr": "0.5", "tag": "x y", "warmup": "true"});
    for c in &local.commands {
        assert_eq!(
            read_json(&c.base_dir.join("input/config/hyperparameters.json")),
            expected
        );
        let hps: serde_json::Value = serde_json::from_str(&c.env["SM_HPS"]).unwrap();
        assert_eq!(hps, expected);
    }
}

/// `dir/<name>` with `files` (relative paths) in it.
fn data_folder(dir: &Path, name: &str, files: &[&str]) -> std::path::PathBuf {
    let folder = dir.join(name);
    for f in files {
        let path = folder.join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("contents of {f}")).unwrap();
    }
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn channels_reach_only_the_groups_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let train = data_folder(dir.path(), "train-data", &["a.png", "sub/b.png"]);
    let _labels = data_folder(dir.path(), "labels", &["labels.csv"]);
    let job = with_channels(&format!(
        r#"
[[channel]]
name = "training"
uri = "s3://bucket/train/"
local_path = "{}"
instance_groups = ["data_group"]
content_type = "image/png"

[[channel]]
name = "label-set"
uri = "s3://bucket/labels/"
local_path = "labels"
instance_groups = ["dnn_group"]
input_mode = "FastFile"
"#,
        train.display()
    ));
    let local = prepare(&job, options(dir.path(), &no_launcher(dir.path())));
    let trainer_channel = dir.path().join("labels").canonicalize().unwrap();

    for c in &local.commands {
        let base = &c.base_dir;
        let config = read_json(&base.join("input/config/inputdataconfig.json"));
        let data = base.join("input/data");
        let channels: Vec<String> = serde_json::from_str(&c.env["SM_CHANNELS"]).unwrap();
        let env_config: serde_json::Value =
            serde_json::from_str(&c.env["SM_INPUT_DATA_CONFIG"]).unwrap();
        assert_eq!(
            env_config, config,
            "SM_INPUT_DATA_CONFIG is the file's content"
        );
        if c.host.group == "data_group" {
            assert_eq!(
                config,
                json!({"training": {
                    "ContentType": "image/png",
                    "RecordWrapperType": "None",
                    "S3DistributionType": "FullyReplicated",
                    "TrainingInputMode": "File",
                }}),
                "{}",
                c.host.name
            );
            assert_eq!(channels, ["training"]);
            assert_eq!(
                std::fs::read_link(data.join("training")).unwrap(),
                train.canonicalize().unwrap()
            );
            assert_eq!(
                std::fs::read_to_string(data.join("training/sub/b.png")).unwrap(),
                "contents of sub/b.png"
            );
            assert!(
                !data.join("label-set").exists(),
                "{} has no label-set",
                c.host.name
            );
            assert_eq!(
                Path::new(&c.env["SM_CHANNEL_TRAINING"]),
                data.join("training")
            );
            assert!(!c.env.contains_key("SM_CHANNEL_LABEL_SET"));
        } else {
            assert_eq!(
                config,
                json!({"label-set": {
                    "RecordWrapperType": "None",
                    "S3DistributionType": "FullyReplicated",
                    "TrainingInputMode": "FastFile",
                }})
            );
            assert_eq!(channels, ["label-set"]);
            assert_eq!(
                std::fs::read_link(data.join("label-set")).unwrap(),
                trainer_channel
            );
            assert_eq!(
                std::fs::read_to_string(data.join("label-set/labels.csv")).unwrap(),
                "contents of labels.csv"
            );
            assert!(
                !data.join("training").exists(),
                "the trainer has no training channel"
            );
            assert_eq!(
                Path::new(&c.env["SM_CHANNEL_LABEL_SET"]),
                data.join("label-set")
            );
            assert!(!c.env.contains_key("SM_CHANNEL_TRAINING"));
        }
    }
}

#[test]
fn a_sharded_channel_gives_each_host_a_disjoint_part() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["0.tar", "1.tar", "2.tar", "3.tar", "deep/4.tar"];
    let shards = data_folder(dir.path(), "shards", &names);
    let job = with_channels(&format!(
        "[[channel]]\nname = \"shards\"\nuri = \"s3://bucket/shards/\"\nlocal_path = \"{}\"\ninstance_groups = [\"data_group\"]\ndistribution = \"ShardedByS3Key\"\n",
        shards.display()
    ));
    let local = prepare(&job, options(dir.path(), &no_launcher(dir.path())));
    let mut seen: Vec<String> = Vec::new();
    for c in local
        .commands
        .iter()
        .filter(|c| c.host.group == "data_group")
    {
        let config = read_json(&c.base_dir.join("input/config/inputdataconfig.json"));
        assert_eq!(config["shards"]["S3DistributionType"], "ShardedByS3Key");
        let root = c.base_dir.join("input/data/shards");
        let mut mine = Vec::new();
        for name in names {
            let path = root.join(name);
            if path.exists() {
                assert_eq!(
                    std::fs::read_to_string(&path).unwrap(),
                    format!("contents of {name}")
                );
                mine.push(name.to_owned());
            }
        }
        assert!(!mine.is_empty(), "{} got no shard", c.host.name);
        seen.extend(mine);
    }
    seen.sort();
    assert_eq!(seen, names, "every object once, over the receiving hosts");
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn the_environment_is_built_not_inherited() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "{TINY}\n{SAGEMAKER}\nenvironment = {{ FROM_SPEC = \"spec\", OVERRIDDEN = \"by the spec\" }}\n"
    );
    let mut opts = options(dir.path(), &no_launcher(dir.path()));
    opts.caller_env = [
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/home/someone"),
        ("HETGEN_AUDIT_FILE", "/tmp/audit.jsonl"),
        ("RUST_LOG", "hetgen=debug"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
        ("AWS_PROFILE", "prod"),
        ("SM_CURRENT_HOST", "the-notebook"),
        ("SAGEMAKER_BASE_DIR", "/opt/ml"),
        ("HETGEN_JOB_TOKEN", "the caller's"),
        ("HETGEN_HOSTS_FILE", "/etc/hosts"),
        ("UNRELATED", "x"),
        ("CARGO_PKG_NAME", "hetgen-local"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    opts.env = vec![
        ("OVERRIDDEN".to_owned(), "by --env".to_owned()),
        ("FROM_FLAG".to_owned(), "flag".to_owned()),
    ];
    let local = prepare(&job(&spec), opts);
    let layout = &local.layout;

    let tokens: BTreeSet<&str> = local
        .commands
        .iter()
        .map(|c| c.env["HETGEN_JOB_TOKEN"].as_str())
        .collect();
    assert_eq!(tokens.len(), 1, "one token for the whole job");
    let token = *tokens.iter().next().unwrap();
    assert_eq!(token.len(), 64, "32 random bytes, hex");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));

    let data_hosts: Vec<String> = layout.cluster.groups[0].hosts.clone();
    for c in &local.commands {
        let env = &c.env;
        let host = &c.host;
        let base = layout.host_dir(host);
        let p = |rel: &str| base.join(rel).display().to_string();
        assert_eq!(env["SAGEMAKER_BASE_DIR"], base.display().to_string());
        assert_eq!(env["SM_CURRENT_HOST"], host.name);
        assert_eq!(env["SM_CURRENT_INSTANCE_TYPE"], host.instance_type);
        assert_eq!(env["SM_CURRENT_INSTANCE_GROUP"], host.group);
        let group_hosts: Vec<String> =
            serde_json::from_str(&env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]).unwrap();
        let expected_group = layout
            .cluster
            .groups
            .iter()
            .find(|g| g.instance_group_name == host.group)
            .unwrap();
        assert_eq!(group_hosts, expected_group.hosts);
        assert_eq!(env["SM_INSTANCE_GROUPS"], r#"["data_group","dnn_group"]"#);
        let dict: serde_json::Value =
            serde_json::from_str(&env["SM_INSTANCE_GROUPS_DICT"]).unwrap();
        assert_eq!(
            dict["data_group"],
            json!({"hosts": data_hosts, "instance_group_name": "data_group", "instance_type": "ml.c5.xlarge"})
        );
        assert_eq!(dict["dnn_group"]["instance_type"], "ml.m5.xlarge");
        assert_eq!(env["SM_IS_HETERO"], "true");
        assert_eq!(env["SM_HOSTS"], r#"["algo-1","algo-2","algo-3"]"#);
        assert_eq!(env["SM_NETWORK_INTERFACE_NAME"], "lo");
        assert_eq!(env["SM_MODEL_DIR"], p("model"));
        assert_eq!(env["SM_OUTPUT_DIR"], p("output"));
        assert_eq!(env["SM_OUTPUT_DATA_DIR"], p("output/data"));
        assert_eq!(env["SM_INPUT_DIR"], p("input"));
        assert_eq!(env["SM_INPUT_CONFIG_DIR"], p("input/config"));
        assert_eq!(env["SM_CHANNELS"], "[]");
        assert_eq!(env["HETGEN_JOB_TOKEN"], token);
        assert_eq!(
            Path::new(&env["HETGEN_HOSTS_FILE"]),
            layout.job_dir.join("hosts.txt")
        );
        assert_eq!(
            Path::new(&env["HETGEN_JOB_FILE"]),
            dir.path().join("job.json")
        );

        // The spec's environment, then --env (later wins).
        assert_eq!(env["FROM_SPEC"], "spec");
        assert_eq!(env["FROM_FLAG"], "flag");
        assert_eq!(env["OVERRIDDEN"], "by --env");

        // From the caller: what running programs needs and what is meant for hetgen.
        assert_eq!(env["PATH"], "/usr/bin:/bin");
        assert_eq!(env["HOME"], "/home/someone");
        assert_eq!(env["HETGEN_AUDIT_FILE"], "/tmp/audit.jsonl");
        assert_eq!(env["RUST_LOG"], "hetgen=debug");
        for absent in [
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "UNRELATED",
            "CARGO_PKG_NAME",
        ] {
            assert!(
                !env.contains_key(absent),
                "{absent} leaked into {}",
                host.name
            );
        }
    }
}

#[test]
fn a_host_process_sees_exactly_its_built_environment() {
    // The environment above is what the process gets, not added to the caller's.
    let (_dir, mut opts) = launcher_options("env > \"$SAGEMAKER_BASE_DIR/output/env.txt\"");
    opts.caller_env
        .insert("UNRELATED_CALLER_VARIABLE".to_owned(), "x".to_owned());
    opts.caller_env
        .insert("HETGEN_AUDIT_FILE".to_owned(), "/tmp/audit".to_owned());
    let local = prepare(&job(TINY), opts);
    run_to_completion(&local);
    for c in &local.commands {
        let env = env_file(&c.base_dir.join("output/env.txt"));
        for (k, v) in &c.env {
            assert_eq!(env.get(k), Some(v), "{k} on {}", c.host.name);
        }
        assert_eq!(env["HETGEN_AUDIT_FILE"], "/tmp/audit");
        for k in env.keys() {
            // The shell itself sets a few (PWD, SHLVL, `_`); nothing else comes from the caller.
            assert!(
                c.env.contains_key(k) || ["PWD", "OLDPWD", "SHLVL", "_"].contains(&k.as_str()),
                "{k} reached {} without being set",
                c.host.name
            );
        }
        assert!(!env.contains_key("UNRELATED_CALLER_VARIABLE"));
        assert_eq!(
            Path::new(&env["PWD"]),
            c.base_dir,
            "a host runs in its /opt/ml"
        );
    }
}

#[test]
fn env_flags_are_key_value() {
    let ok = |flag: &str| parse_env_flag(flag).unwrap_or_else(|e| panic!("{flag}: {e}"));
    assert_eq!(ok("A=b"), ("A".to_owned(), "b".to_owned()));
    assert_eq!(
        ok("RUST_LOG=info,hetgen=debug"),
        ("RUST_LOG".to_owned(), "info,hetgen=debug".to_owned())
    );
    assert_eq!(ok("EMPTY="), ("EMPTY".to_owned(), String::new()));
    assert_eq!(
        ok("URL=a=b=c"),
        ("URL".to_owned(), "a=b=c".to_owned()),
        "only the first = splits"
    );
    assert_eq!(ok("SPACED=a b"), ("SPACED".to_owned(), "a b".to_owned()));

    for bad in ["NOVALUE", "", "=value", "HAS SPACE=1", " LEAD=1", "TAB\t=1"] {
        match parse_env_flag(bad) {
            Err(e @ LocalError::BadEnvFlag { .. }) => {
                let message = e.to_string();
                assert!(message.contains("KEY=VALUE"), "{message}");
                assert!(
                    message.contains(&format!("`{bad}`")),
                    "{message} names the flag"
                );
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn an_existing_job_folder_is_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), &no_launcher(dir.path()));
    std::fs::create_dir_all(&opts.job_dir).unwrap();
    std::fs::write(opts.job_dir.join("keep.txt"), "another run's").unwrap();
    let job_dir = opts.job_dir.clone();
    match hetgen_local::prepare(&job(TINY), opts) {
        Err(e @ LocalError::Write { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains(&job_dir.display().to_string()),
                "{message}"
            );
            let source = std::error::Error::source(&e).unwrap().to_string();
            assert!(source.to_lowercase().contains("exists"), "{source}");
        }
        other => panic!("preparing into an existing folder gave {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(job_dir.join("keep.txt")).unwrap(),
        "another run's"
    );
    assert!(
        !job_dir.join("hosts").exists(),
        "nothing was written into it"
    );

    // A second run into the folder the first one made fails the same way.
    let first_dir = tempfile::tempdir().unwrap();
    let first = prepare(
        &job(TINY),
        options(first_dir.path(), &no_launcher(first_dir.path())),
    );
    let mut again = options(first_dir.path(), &no_launcher(first_dir.path()));
    again.job_dir = first.layout.job_dir.clone();
    assert!(matches!(
        hetgen_local::prepare(&job(TINY), again),
        Err(LocalError::Write { .. })
    ));
}

#[test]
fn a_missing_channel_folder_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let job = with_channels(
        "[[channel]]\nname = \"training\"\nuri = \"s3://bucket/train/\"\nlocal_path = \"not-there\"\ninstance_groups = [\"data_group\"]\n",
    );
    match refused(&job, options(dir.path(), &no_launcher(dir.path()))) {
        e @ LocalError::ChannelFolder { .. } => {
            let message = e.to_string();
            assert!(message.contains("`training`"), "{message}");
            assert!(
                message.contains(&dir.path().join("not-there").display().to_string()),
                "{message}"
            );
        }
        other => panic!("a missing channel folder gave {other:?}"),
    }
}

#[test]
fn a_channel_only_in_s3_cannot_run_locally() {
    let dir = tempfile::tempdir().unwrap();
    let job = with_channels("[[channel]]\nname = \"training\"\nuri = \"s3://bucket/train/\"\n");
    match refused(&job, options(dir.path(), &no_launcher(dir.path()))) {
        e @ LocalError::RemoteChannel { .. } => {
            let message = e.to_string();
            assert!(message.contains("s3://bucket/train/"), "{message}");
        }
        other => panic!("an S3-only channel gave {other:?}"),
    }
}

#[test]
fn a_pipe_channel_cannot_run_locally() {
    let dir = tempfile::tempdir().unwrap();
    let _labels = data_folder(dir.path(), "labels", &["labels.csv"]);
    let job = with_channels(
        "[[channel]]\nname = \"label-set\"\nuri = \"s3://bucket/labels/\"\nlocal_path = \"labels\"\n\
         instance_groups = [\"dnn_group\"]\ninput_mode = \"Pipe\"\n",
    );
    match refused(&job, options(dir.path(), &no_launcher(dir.path()))) {
        e @ LocalError::PipeChannel { .. } => {
            assert!(e.to_string().contains("`label-set`"), "{e}");
            let help = miette::Diagnostic::help(&e).unwrap().to_string();
            assert!(help.contains("FastFile"), "{help}");
        }
        other => panic!("a Pipe channel gave {other:?}"),
    }
}

#[test]
fn a_run_that_continues_another_starts_every_host_with_the_checkpoints_it_left() {
    let (dir, first) = tiny_with_seed(Some(1));
    // Two hosts of the first run checkpointed (one file by name on both: the later host's
    // copy counts, as the later upload to one S3 location would).
    let hosts: Vec<_> = first.commands.iter().map(|c| c.base_dir.clone()).collect();
    for (base, text) in [
        (&hosts[0], "from the first host"),
        (&hosts[1], "from the second"),
    ] {
        let dir = base.join("checkpoints/step-40");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("model.pt"), text).unwrap();
    }
    std::fs::write(hosts[0].join("checkpoints/latest"), "step-40").unwrap();

    let mut opts = options(dir.path(), &no_launcher(dir.path()));
    opts.job_dir = dir.path().join("second");
    opts.resume_from = Some(first.layout.job_dir.clone());
    let second = prepare(&job(TINY), opts);
    // It says which run it continues.
    let note = format!("continuing the run in {}", first.layout.job_dir.display());
    assert!(
        second.notes.iter().any(|n| n.starts_with(&note)),
        "{:?}",
        second.notes
    );
    for command in &second.commands {
        let checkpoints = command.base_dir.join("checkpoints");
        let read = |p: &str| std::fs::read_to_string(checkpoints.join(p)).unwrap();
        assert_eq!(read("latest"), "step-40", "{}", command.host.name);
        assert_eq!(read("step-40/model.pt"), "from the second");
    }

    // A run without it starts from none; a folder that is no run is refused, and no run is
    // laid out.
    let (_other, fresh) = tiny_with_seed(Some(1));
    for command in &fresh.commands {
        let checkpoints = command.base_dir.join("checkpoints");
        assert_eq!(std::fs::read_dir(checkpoints).unwrap().count(), 0);
    }
    let mut opts = options(dir.path(), &no_launcher(dir.path()));
    opts.job_dir = dir.path().join("third");
    opts.resume_from = Some(dir.path().join("no-such-run"));
    assert!(matches!(
        refused(&job(TINY), opts),
        LocalError::NotARun { .. }
    ));
}
