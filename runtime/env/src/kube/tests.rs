use std::collections::HashMap;
use std::path::Path;

use super::*;

/// The groups of the rendered sample: two data pods and two trainer pods.
const GROUPS: &str = r#"[
  {"name":"data_group","replicated_job":"data-group","count":2,"instance_type":"ml.c5.xlarge","channels":["training"]},
  {"name":"dnn_group","replicated_job":"node","count":2,"instance_type":"ml.g5.xlarge","channels":["test","val-set"]}
]"#;

/// A pod's variables: `GROUPS`, in group `group` at `index` of JobSet `digits`, with `more`.
fn pod(group: &str, index: &str, more: &[(&str, &str)]) -> HashMap<String, String> {
    let mut vars: HashMap<String, String> = [
        (GROUPS_VAR, GROUPS),
        (GROUP_VAR, group),
        (JOBSET_VAR, "digits"),
        (INDEX_VAR, index),
    ]
    .into_iter()
    .chain(more.iter().copied())
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    vars.retain(|_, v| v != "<unset>");
    vars
}

fn load_pod(vars: &HashMap<String, String>) -> Result<Env, EnvError> {
    Env::load_from(Path::new("/opt/ml"), |name| vars.get(name).cloned())
}

fn error(vars: &HashMap<String, String>) -> String {
    load_pod(vars).unwrap_err().to_string()
}

#[test]
fn a_two_group_job_becomes_sagemaker_s_resource_config() {
    let env = load_pod(&pod("dnn_group", "1", &[])).unwrap();
    assert_eq!(env.host(), "digits-node-0-1.digits");
    assert_eq!(env.group(), "dnn_group");
    assert!(env.is_hetero());
    assert_eq!(env.resources.current_instance_type, "ml.g5.xlarge");
    assert_eq!(
        env.resources.hosts,
        [
            "digits-data-group-0-0.digits",
            "digits-data-group-0-1.digits",
            "digits-node-0-0.digits",
            "digits-node-0-1.digits",
        ]
    );
    assert_eq!(
        env.resources.hosts_of("data_group"),
        [
            "digits-data-group-0-0.digits",
            "digits-data-group-0-1.digits"
        ]
    );
    assert_eq!(
        env.resources.hosts_of("dnn_group"),
        ["digits-node-0-0.digits", "digits-node-0-1.digits"]
    );
    let types: Vec<_> = env
        .resources
        .groups()
        .into_iter()
        .map(|g| (g.instance_group_name, g.instance_type))
        .collect();
    assert_eq!(
        types,
        [
            ("data_group".to_owned(), "ml.c5.xlarge".to_owned()),
            ("dnn_group".to_owned(), "ml.g5.xlarge".to_owned())
        ]
    );
    // The trainer group's own channels, as files, where the volumes are mounted.
    assert_eq!(env.channels.keys().collect::<Vec<_>>(), ["test", "val-set"]);
    assert_eq!(env.channels["test"].training_input_mode, "File");
    assert_eq!(env.channels["test"].s3_distribution_type, "FullyReplicated");
    assert_eq!(
        env.channel_dirs["test"],
        Path::new("/opt/ml/input/data/test")
    );
    assert!(env.hyperparameters.is_empty());
    assert_eq!(env.resources.network_interface_name, "");
}

#[test]
fn a_data_pod_is_its_own_group_s_host_and_channel_folders_follow_sm_channel() {
    let env = load_pod(&pod(
        "data_group",
        "0",
        &[("SM_CHANNEL_TRAINING", "/mnt/training")],
    ))
    .unwrap();
    assert_eq!(env.host(), "digits-data-group-0-0.digits");
    assert_eq!(env.resources.current_instance_type, "ml.c5.xlarge");
    assert_eq!(env.channel_dirs["training"], Path::new("/mnt/training"));
    assert!(!env.channels.contains_key("test"));
}

#[test]
fn the_variables_win_over_a_resource_config_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("input/config/resourceconfig.json");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        r#"{"current_host": "algo-1", "hosts": ["algo-1"]}"#,
    )
    .unwrap();
    let vars = pod("dnn_group", "0", &[]);
    let env = Env::load_from(dir.path(), |name| vars.get(name).cloned()).unwrap();
    assert_eq!(env.host(), "digits-node-0-0.digits");
    assert_eq!(env.channel_dirs["test"], dir.path().join("input/data/test"));
}

#[test]
fn more_than_ten_pods_keep_their_index_order() {
    let groups = r#"[{"name":"dnn_group","replicated_job":"node","count":12,"instance_type":"ml.g5.xlarge"}]"#;
    let env = load_pod(&pod("dnn_group", "10", &[(GROUPS_VAR, groups)])).unwrap();
    let hosts = env.resources.hosts_of("dnn_group");
    assert_eq!(hosts[2], "digits-node-0-2.digits");
    assert_eq!(hosts[10], "digits-node-0-10.digits");
    assert_eq!(hosts.iter().position(|h| h == env.host()), Some(10));
    // No channels listed: none.
    assert!(env.channels.is_empty());
}

#[test]
fn a_missing_variable_is_named_with_what_it_should_be() {
    let err = error(&pod("dnn_group", "<unset>", &[]));
    assert!(
        err.starts_with("HETGEN_KUBE_INDEX is not set")
            && err.contains("from 0 to 1")
            && err.contains("job-completion-index"),
        "{err}"
    );
    let err = error(&pod("<unset>", "0", &[]));
    assert!(
        err.starts_with("HETGEN_KUBE_GROUP is not set")
            && err.contains("`data_group`, `dnn_group`"),
        "{err}"
    );
    let err = error(&pod("dnn_group", "0", &[(JOBSET_VAR, "<unset>")]));
    assert!(
        err.starts_with("HETGEN_KUBE_JOBSET is not set") && err.contains("jobset-name"),
        "{err}"
    );
}

#[test]
fn a_malformed_variable_is_named_with_its_value() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (INDEX_VAR, "2", "HETGEN_KUBE_INDEX=\"2\"", "from 0 to 1"),
        (INDEX_VAR, "-1", "HETGEN_KUBE_INDEX=\"-1\"", "index"),
        (
            GROUP_VAR,
            "data-group",
            "HETGEN_KUBE_GROUP=\"data-group\"",
            "`data_group`, `dnn_group`",
        ),
        (JOBSET_VAR, "", "HETGEN_KUBE_JOBSET=\"\"", "DNS label"),
        (
            JOBSET_VAR,
            "Digits",
            "HETGEN_KUBE_JOBSET=\"Digits\"",
            "DNS label",
        ),
        (
            GROUPS_VAR,
            "[",
            "HETGEN_KUBE_GROUPS=\"[\"",
            "EOF while parsing",
        ),
        (GROUPS_VAR, "[]", "HETGEN_KUBE_GROUPS=\"[]\"", "lists none"),
        (
            GROUPS_VAR,
            r#"[{"name":"dnn_group","replicated_job":"node","count":0,"instance_type":"ml.g5.xlarge"}]"#,
            "HETGEN_KUBE_GROUPS=",
            "group `dnn_group` has no pods",
        ),
        (
            GROUPS_VAR,
            r#"[{"name":"a","replicated_job":"node","count":1,"instance_type":"t"},
                {"name":"dnn_group","replicated_job":"node","count":1,"instance_type":"t"}]"#,
            "HETGEN_KUBE_GROUPS=",
            "two groups have the replicatedJob `node`",
        ),
        (
            GROUPS_VAR,
            r#"[{"name":"dnn_group","replicated_job":"node","count":1,"instance_type":"t"},
                {"name":"dnn_group","replicated_job":"x","count":1,"instance_type":"t"}]"#,
            "HETGEN_KUBE_GROUPS=",
            "group `dnn_group` is listed twice",
        ),
        (
            GROUPS_VAR,
            r#"[{"name":"dnn_group","replicated_job":"dnn_group","count":1,"instance_type":"t"}]"#,
            "HETGEN_KUBE_GROUPS=",
            "replicatedJob `dnn_group` is not a DNS label",
        ),
    ];
    for &(var, value, starts, says) in cases {
        let err = load_pod(&pod("dnn_group", "0", &[(var, value)])).unwrap_err();
        assert!(
            matches!(err, EnvError::Variable(_)),
            "{var}={value}: {err:?}"
        );
        let err = err.to_string();
        assert!(
            err.starts_with(starts) && err.contains(says),
            "{var}={value}: {err}"
        );
    }
}

#[test]
fn dns_labels() {
    for good in ["a", "digits", "pytorch-digits", "x1", &"a".repeat(63)] {
        assert!(is_dns_label(good), "{good}");
    }
    for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
        assert!(!is_dns_label(bad), "{bad}");
    }
}

#[test]
fn a_pod_is_inside_a_job_without_a_resource_config() {
    // What the Python loader asks: an empty tree with the variables is a job, without them
    // it is a workstation.
    let dir = tempfile::tempdir().unwrap();
    let vars = pod("dnn_group", "1", &[]);
    let env = Env::load_if_present_from(dir.path(), |name| vars.get(name).cloned()).unwrap();
    assert_eq!(env.as_ref().map(Env::host), Some("digits-node-0-1.digits"));
    let outside = Env::load_if_present_from(dir.path(), |_| None).unwrap();
    assert!(outside.is_none());
    // A pod with a broken variable is a job that fails, not a workstation.
    let broken = pod("dnn_group", "7", &[]);
    assert!(Env::load_if_present_from(dir.path(), |name| broken.get(name).cloned()).is_err());
}
