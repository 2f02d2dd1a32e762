//! `hetgen status --engine kubeflow` against a stand-in API server that answers with the
//! recorded responses of `generator/kube-deploy/tests/recorded/` (how they were made is said
//! there).

use std::io::BufReader;
use std::path::Path;

use serde_json::Value;

use super::http::{listen, read_request, write_reply};
use super::{code, hetgen, repo, stderr, stdout};

/// A kubeconfig in `dir` whose cluster is a server answering each GET with the first exchange
/// of `scenario` for its path.
fn recorded_cluster(dir: &Path, scenario: &str) -> std::path::PathBuf {
    let path = repo().join(format!(
        "generator/kube-deploy/tests/recorded/{scenario}.json"
    ));
    let exchanges: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let url = listen(move |stream| {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        while let Some(request) = read_request(&mut reader) {
            let line = request.head.lines().next().unwrap_or_default().to_owned();
            let mut parts = line.split(' ');
            let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let path = target.split('?').next().unwrap_or("");
            let found = exchanges
                .iter()
                .find(|e| e["request"]["method"] == method && e["request"]["path"] == path);
            let result = match found {
                Some(e) => write_reply(&mut writer, "200 OK", &e["response"]["body"]),
                None => write_reply(&mut writer, "599 Unrecorded", &Value::Null),
            };
            if result.is_err() {
                return;
            }
        }
    });
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: recorded\n  cluster:\n    server: {url}\n\
             users:\n- name: tester\n  user:\n    token: recorded-token\n\
             contexts:\n- name: recorded\n  context:\n    cluster: recorded\n    user: tester\n    namespace: default\n\
             current-context: recorded\n"
        ),
    )
    .unwrap();
    kubeconfig
}

/// A TrainJob Trainer could not make a JobSet for: its phase, no pods, and the Warnings, the
/// refusal among them.
#[test]
fn status_shows_a_trainjob_its_pods_and_its_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = recorded_cluster(dir.path(), "wait-refused");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let args = [
        "status",
        "--engine",
        "kubeflow",
        "--kubeconfig",
        kubeconfig,
        "pytorch-digits",
    ];
    let out = hetgen(&args, dir.path());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("pytorch-digits: Running (no pods yet)\n"),
        "{text}"
    );
    assert!(
        text.contains("  warning: TrainJob TrainJobResourcesCreationFailed (×5): TrainJob resources reconciliation failed: admission webhook \"vjobset.kb.io\" denied the request"),
        "{text}"
    );
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let out = hetgen(&json_args, dir.path());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["pods"], serde_json::json!([]));
    let refusals: Vec<&Value> = status["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["refusal"] == true)
        .collect();
    assert_eq!(refusals.len(), 1, "{status:#}");
    assert_eq!(refusals[0]["reason"], "TrainJobResourcesCreationFailed");
}

/// The help says both engines: the tool, what `render` writes, where `deploy`, `status`,
/// `stop` and `logs` reach.
#[test]
fn the_help_names_kubernetes_beside_sagemaker() {
    let root = repo();
    let help = stdout(&hetgen(&["--help"], &root));
    assert!(
        help.contains("SageMaker or Kubernetes (Kubeflow Trainer)"),
        "{help}"
    );
    let commands = help.split("Commands:").nth(1).unwrap();
    for (command, says) in [
        ("render", "Kubeflow Trainer objects"),
        ("deploy", "--engine kubeflow"),
        ("status", "--engine"),
        ("logs", "a TrainJob"),
    ] {
        let line = commands
            .lines()
            .skip_while(|l| l.split_whitespace().next() != Some(command))
            .take(2)
            .collect::<String>();
        assert!(line.contains(says), "`{command}`: {line}");
    }
    for command in ["status", "stop", "logs", "deploy"] {
        let help = stdout(&hetgen(&[command, "--help"], &root));
        assert!(help.contains("--engine <ENGINE>"), "{command}: {help}");
        assert!(help.contains("kubeflow"), "{command}: {help}");
    }
}
