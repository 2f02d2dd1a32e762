//! Deploy, follow and stop against an API server's recorded responses (`tests/recorded/`),
//! served over plain HTTP on 127.0.0.1 by [`server::Server`], which also keeps what the client
//! sent.

mod server;

use std::time::Duration;

use hetgen_kube::validate::documents;
use hetgen_kube_deploy::{
    Cluster, Connection, DeployOptions, Follow, KubeError, Outcome, PodLine, PodState, Rendered,
    TrainJobState, Warning, Watcher,
};
use serde_json::Value;
use server::Server;

const JOB: &str = "pytorch-digits";
const TRAIN_JOB: &str =
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/pytorch-digits";
const RUNTIME: &str =
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainingruntimes/pytorch-digits";
const SECRET: &str = "/api/v1/namespaces/default/secrets/pytorch-digits-hetgen-token";
const TOKEN: &str = "3q2+7w";

/// A test must end long before this; a client that loops forever fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(30);

fn rendered() -> Rendered {
    Rendered::read(&server::recorded().join("rendered")).unwrap()
}

async fn cluster(server: &Server) -> Cluster {
    Cluster::connect(&Connection {
        kubeconfig: Some(server.kubeconfig()),
        ..Connection::default()
    })
    .await
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn deploy(scenario: &str) -> (Server, Result<hetgen_kube_deploy::Deployed, KubeError>) {
    let server = Server::start(scenario);
    let result = runtime().block_on(async {
        let cluster = cluster(&server).await;
        let options = DeployOptions {
            token: TOKEN.to_owned(),
        };
        tokio::time::timeout(
            LIMIT,
            hetgen_kube_deploy::deploy(&cluster, &rendered(), &options),
        )
        .await
        .expect("deploy ends")
    });
    assert_eq!(
        server.unmatched(),
        Vec::<String>::new(),
        "unrecorded requests"
    );
    (server, result)
}

/// The requests of a deploy that succeeds, in order: the TrainJob looked up, the Secret
/// applied, the runtime's requests (`(verb, path)`), the TrainJob applied `train_job_applies`
/// times, the Secret given its owner.
fn deployed_lines(runtime: &[(&str, &str)], train_job_applies: usize) -> Vec<String> {
    let mut lines = vec![format!("GET {TRAIN_JOB}"), format!("PATCH {SECRET}")];
    lines.extend(runtime.iter().map(|(verb, path)| format!("{verb} {path}")));
    lines.extend(std::iter::repeat_n(
        format!("PATCH {TRAIN_JOB}"),
        train_job_applies,
    ));
    lines.push(format!("PATCH {SECRET}"));
    lines
}

/// `value` without the keys the API server adds, to compare with what was sent.
fn yaml_as_json(path: &str) -> Value {
    let text = std::fs::read_to_string(server::recorded().join(path)).unwrap();
    let [object] = <[Value; 1]>::try_from(documents(&text).unwrap()).unwrap();
    object
}

#[test]
fn deploy_applies_the_secret_then_the_runtime_then_the_trainjob_as_hetgen() {
    let (server, deployed) = deploy("deploy");
    let deployed = deployed.unwrap();
    assert_eq!(deployed.name, JOB);
    assert_eq!(deployed.namespace, "default");
    // The uid the API server gave the TrainJob (recorded in deploy.json).
    assert_eq!(deployed.uid, "5f0c2a1e-8d3b-4c7a-9e21-6b4f3d2a1c90");

    assert_eq!(
        server.lines(),
        deployed_lines(&[("GET", RUNTIME), ("PATCH", RUNTIME)], 1)
    );
    // What was written: every request but the lookups.
    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| !r.line().starts_with("GET "))
        .collect();
    for applied in &requests[0..3] {
        assert_eq!(
            applied.headers["content-type"],
            "application/apply-patch+yaml",
            "{}",
            applied.line()
        );
        assert_eq!(
            applied.query["fieldManager"],
            "hetgen",
            "{}",
            applied.line()
        );
        assert_eq!(
            applied.query["fieldValidation"],
            "Strict",
            "{}",
            applied.line()
        );
    }
    // Only the Secret is forced: a stale token is replaced whoever wrote it; the Trainer
    // objects' conflicts are reported.
    assert_eq!(
        requests[0].query.get("force").map(String::as_str),
        Some("true")
    );
    assert_eq!(requests[1].query.get("force"), None);
    assert_eq!(requests[2].query.get("force"), None);

    let secret = requests[0].json();
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(secret["metadata"]["name"], "pytorch-digits-hetgen-token");
    assert_eq!(secret["metadata"]["namespace"], "default");
    assert_eq!(
        secret["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "hetgen"
    );
    // base64 of TOKEN, under the key the pods read (`secretKeyRef.key: token`).
    assert_eq!(secret["data"]["token"], "M3EyKzd3");

    // The objects go as rendered.
    assert_eq!(
        requests[1].json(),
        yaml_as_json("rendered/kubeflow/trainingruntime.yaml")
    );
    assert_eq!(
        requests[2].json(),
        yaml_as_json("rendered/kubeflow/trainjob.yaml")
    );

    // Then the TrainJob owns the Secret, so deleting it any way deletes the token.
    let owner = &requests[3];
    assert_eq!(
        owner.headers["content-type"],
        "application/merge-patch+json"
    );
    assert_eq!(owner.query["fieldManager"], "hetgen");
    let refs = &owner.json()["metadata"]["ownerReferences"];
    assert_eq!(
        refs,
        &serde_json::json!([{
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": JOB,
            "uid": "5f0c2a1e-8d3b-4c7a-9e21-6b4f3d2a1c90",
        }])
    );
}

#[test]
fn a_cluster_without_trainer_is_named_as_such_and_nothing_is_written() {
    let (server, result) = deploy("deploy-no-trainer");
    let err = result.unwrap_err();
    assert!(matches!(err, KubeError::TrainerMissing { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("Kubeflow Trainer is not installed in this cluster: "),
        "{text}"
    );
    assert!(text.contains("trainjobs.trainer.kubeflow.org"), "{text}");
    assert!(err.is_configuration());
    assert_eq!(server.lines(), [format!("GET {TRAIN_JOB}")]);
}

#[test]
fn an_existing_trainjob_is_refused_with_how_to_stop_it() {
    let (server, result) = deploy("deploy-exists");
    let err = result.unwrap_err();
    assert!(matches!(err, KubeError::Exists { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "TrainJob `pytorch-digits` already exists in namespace `default`"
    );
    let help = miette::Diagnostic::help(&err).unwrap().to_string();
    assert!(
        help.contains("hetgen stop --engine kubeflow pytorch-digits"),
        "{help}"
    );
    // Nothing was applied over it.
    assert_eq!(server.lines(), [format!("GET {TRAIN_JOB}")]);
}

#[test]
fn a_forbidden_call_names_the_object_and_the_verb() {
    let (_server, result) = deploy("deploy-forbidden");
    let err = result.unwrap_err();
    assert!(matches!(err, KubeError::Forbidden { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("not allowed to look up TrainJob `default/pytorch-digits`: "),
        "{text}"
    );
    assert!(text.contains("cannot get resource \"trainjobs\""), "{text}");
}

#[test]
fn a_refused_trainjob_lists_the_causes_and_its_secret_is_deleted_again() {
    let (server, result) = deploy("deploy-invalid");
    let err = result.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, KubeError::Refused { .. }), "{err:?}");
    assert!(
        text.starts_with("the API server refused to apply TrainJob `default/pytorch-digits`: "),
        "{text}"
    );
    assert!(
        text.contains("\n  spec.trainer.numNodes: Invalid value: 0"),
        "{text}"
    );
    assert_eq!(
        server.lines().last().map(String::as_str),
        Some(format!("DELETE {SECRET}").as_str())
    );
}

#[test]
fn a_trainjob_refused_because_the_webhook_has_not_seen_its_runtime_yet_is_sent_again() {
    // Trainer's webhook looks the runtime up in its informer cache: right after the runtime is
    // applied it may refuse the TrainJob (twice here), and then accept it.
    let (server, deployed) = deploy("deploy-runtime-race");
    let deployed = deployed.unwrap();
    assert_eq!(deployed.uid, "5f0c2a1e-8d3b-4c7a-9e21-6b4f3d2a1c90");
    assert_eq!(
        server.lines(),
        deployed_lines(&[("GET", RUNTIME), ("PATCH", RUNTIME)], 3)
    );
}

#[test]
fn another_webhook_denial_is_the_controllers_refusal_not_retried_and_not_rbac() {
    let (server, result) = deploy("deploy-denied");
    let err = result.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, KubeError::Refused { .. }), "{err:?}");
    assert!(
        text.starts_with(
            "the API server refused to apply TrainJob `default/pytorch-digits`: admission webhook"
        ),
        "{text}"
    );
    let patches = server
        .lines()
        .iter()
        .filter(|l| **l == format!("PATCH {TRAIN_JOB}"))
        .count();
    assert_eq!(patches, 1);
    assert_eq!(
        server.lines().last().map(String::as_str),
        Some(format!("DELETE {SECRET}").as_str())
    );
}

const TRAIN_JOBS: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs";

/// The job's earlier deploy had a second data group: the live runtime's `node` depends on it,
/// and Trainer's CRD makes `dependsOn` immutable. Asked offline with the CRD's transition rules,
/// the update would be refused, so the runtime, which no TrainJob runs, is replaced.
#[test]
fn a_runtime_whose_immutable_parts_changed_is_replaced_when_no_trainjob_runs_it() {
    let (server, deployed) = deploy("deploy-redeploy");
    assert_eq!(deployed.unwrap().name, JOB);
    assert_eq!(
        server.lines(),
        deployed_lines(
            &[
                ("GET", RUNTIME),
                ("GET", TRAIN_JOBS),
                ("DELETE", RUNTIME),
                ("GET", RUNTIME),
                ("PATCH", RUNTIME)
            ],
            1
        )
    );
    let applied = server
        .requests()
        .into_iter()
        .find(|r| r.line() == format!("PATCH {RUNTIME}"))
        .unwrap();
    assert_eq!(
        applied.json(),
        yaml_as_json("rendered/kubeflow/trainingruntime.yaml")
    );
}

/// The cluster's Trainer refuses the update with 422 "Value is immutable" on a field the
/// vendored CRD lets change (a newer release): the runtime is replaced all the same.
#[test]
fn a_runtime_update_refused_as_immutable_is_replaced() {
    let (server, deployed) = deploy("deploy-immutable");
    assert_eq!(deployed.unwrap().name, JOB);
    assert_eq!(
        server.lines(),
        deployed_lines(
            &[
                ("GET", RUNTIME),
                ("PATCH", RUNTIME),
                ("GET", TRAIN_JOBS),
                ("DELETE", RUNTIME),
                ("GET", RUNTIME),
                ("PATCH", RUNTIME)
            ],
            1
        )
    );
}

/// Another TrainJob still runs the runtime: it is left alone, the deploy stops naming that
/// TrainJob and what cannot change, and the token Secret goes again.
#[test]
fn a_runtime_a_trainjob_runs_is_not_replaced() {
    let (server, result) = deploy("deploy-runtime-in-use");
    let err = result.unwrap_err();
    let KubeError::RuntimeInUse {
        train_jobs,
        changes,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(train_jobs, &["digits-ablation"]);
    assert_eq!(
        changes,
        &["spec.template.spec.replicatedJobs[1].dependsOn: Value is immutable"]
    );
    let text = err.to_string();
    assert!(
        text.contains("TrainJob `digits-ablation` still runs it"),
        "{text}"
    );
    assert!(!server.lines().contains(&format!("DELETE {RUNTIME}")));
    assert_eq!(
        server.lines().last().map(String::as_str),
        Some(format!("DELETE {SECRET}").as_str())
    );
}

#[test]
fn stop_deletes_the_trainjob_in_the_foreground_and_then_the_secret() {
    let server = Server::start("stop");
    let stopped = runtime()
        .block_on(async {
            let cluster = cluster(&server).await;
            hetgen_kube_deploy::stop(&cluster, JOB).await
        })
        .unwrap();
    assert!(stopped.train_job);
    // The foreground delete took the Secret with its owner (404, recorded).
    assert!(!stopped.secret);
    assert_eq!(
        server.lines(),
        [format!("DELETE {TRAIN_JOB}"), format!("DELETE {SECRET}")]
    );
    let options = server.requests()[0].json();
    assert_eq!(options["propagationPolicy"], "Foreground");
    assert_eq!(server.unmatched(), Vec::<String>::new());
}

/// What a follow showed: states, labelled lines as the command line labels them, warnings.
#[derive(Default)]
struct Seen {
    phases: Vec<String>,
    lines: Vec<String>,
    warnings: Vec<String>,
}

impl Watcher for Seen {
    fn state(&mut self, state: &TrainJobState, _pods: &[PodState]) {
        self.phases.push(state.phase.name().to_owned());
    }

    fn line(&mut self, line: &PodLine) {
        let group = line.group.as_deref().unwrap_or("?");
        self.lines
            .push(format!("[{} {group}] {}", line.host, line.message));
    }

    fn warning(&mut self, warning: &Warning) {
        self.warnings.push(warning.describe());
    }
}

fn follow(scenario: &str) -> (Server, Seen, Outcome) {
    let server = Server::start(scenario);
    let mut seen = Seen::default();
    let outcome = runtime().block_on(async {
        let cluster = cluster(&server).await;
        // The groups as `hetgen logs` finds them: from the TrainingRuntime the TrainJob runs.
        let state = hetgen_kube_deploy::state(&cluster, JOB).await.unwrap();
        let groups = hetgen_kube_deploy::groups(&cluster, &state).await;
        let follow = Follow {
            cluster: &cluster,
            name: JOB,
            groups,
            interval: Duration::from_millis(1),
            logs: true,
        };
        tokio::time::timeout(LIMIT, follow.run(&mut seen))
            .await
            .expect("the follow ends")
            .unwrap()
    });
    assert_eq!(
        server.unmatched(),
        Vec::<String>::new(),
        "unrecorded requests"
    );
    (server, seen, outcome)
}

#[test]
fn wait_shows_every_pods_lines_once_labelled_by_group_and_ends_on_complete() {
    let (server, seen, outcome) = follow("wait-complete");
    assert_eq!(
        outcome,
        Outcome::Complete {
            message: "jobset completed successfully".to_owned()
        }
    );
    assert_eq!(outcome.failure(), None);
    assert_eq!(seen.phases, ["Running", "Complete"]);
    assert_eq!(
        seen.lines,
        [
            "[pytorch-digits-data-group-0-0 data_group] INFO starting role host=\"pytorch-digits-data-group-0-0\" group=\"data_group\" role=DataServer",
            "[pytorch-digits-data-group-0-0 data_group] INFO serving batches on 0.0.0.0:16000",
            // Read again from 10:00:05: the line above comes back and is skipped, the one of
            // the same time after it is new.
            "[pytorch-digits-data-group-0-0 data_group] INFO first client connected from 10.0.1.33",
            "[pytorch-digits-node-0-0 dnn_group] INFO starting role host=\"pytorch-digits-node-0-0\" group=\"dnn_group\" role=Trainer",
            "[pytorch-digits-node-0-0 dnn_group] hetgen-step {\"step\":60}",
            "[pytorch-digits-data-group-0-0 data_group] INFO end of training: 71 batches sent",
        ]
    );
    let requests = server.requests();
    let logs: Vec<_> = requests
        .iter()
        .filter(|r| r.path.ends_with("/log"))
        .collect();
    // The pending pod's log is not asked for; an ended pod's is read once after it ended.
    assert_eq!(logs.len(), 3, "{:?}", server.lines());
    assert_eq!(logs[0].query["timestamps"], "true");
    assert_eq!(logs[0].query.get("sinceTime"), None);
    assert_eq!(logs[1].query["sinceTime"], "2026-12-05T10:00:05Z");
    let list = requests.iter().find(|r| r.path.ends_with("/pods")).unwrap();
    assert_eq!(
        list.query["labelSelector"],
        "jobset.sigs.k8s.io/jobset-name=pytorch-digits"
    );
}

#[test]
fn wait_ends_failed_with_the_reason_and_the_first_pod_to_fail() {
    let (_server, seen, outcome) = follow("wait-failed");
    assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
    assert_eq!(
        outcome.failure().unwrap(),
        "FailedJobs: jobset failed due to one or more job failures (first to fail: \
         [pytorch-digits-node-0-0 dnn_group] pod `pytorch-digits-node-0-0-q4m9z`, exit 1 \
         (Error): RuntimeError: CUDA out of memory)"
    );
    assert_eq!(seen.phases, ["Failed"]);
    // The failed pod's last line is shown; the running pod's lines once, though read twice.
    assert_eq!(
        seen.lines
            .iter()
            .filter(|l| l.contains("serving batches"))
            .count(),
        1,
        "{:#?}",
        seen.lines
    );
    assert!(
        seen.lines.contains(
            &"[pytorch-digits-node-0-0 dnn_group] RuntimeError: CUDA out of memory".to_owned()
        ),
        "{:#?}",
        seen.lines
    );
}

/// JobSet's webhook refuses the JobSet Trainer makes (pod names over its limit): Trainer keeps
/// a Warning event on the TrainJob and sets no condition. The follow shows the Warnings of this
/// TrainJob (not an earlier one's of the same name) and ends on the refusal with its message,
/// instead of saying "Running" for ever.
#[test]
fn wait_ends_on_a_refusal_the_controller_records_only_as_an_event() {
    let (server, seen, outcome) = follow("wait-refused");
    let refusal = "TrainJob TrainJobResourcesCreationFailed: TrainJob resources reconciliation \
                   failed: admission webhook \"vjobset.kb.io\" denied the request: \
                   spec.replicatedJobs[0].name: Invalid value: \"data-group\": JobSet name is \
                   too long, pod names generated for this JobSet will exceed 63 characters";
    assert!(matches!(outcome, Outcome::Refused(_)), "{outcome:?}");
    assert_eq!(outcome.failure().unwrap(), refusal);
    assert_eq!(seen.phases, ["Running"]);
    assert_eq!(
        seen.warnings,
        [
            "JobSet FailedCreate: jobs.batch \"pytorch-digits-node-0\" is forbidden: exceeded quota: gpu-quota",
            refusal
        ]
    );
    let list = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/events"))
        .unwrap();
    assert_eq!(
        list.query["fieldSelector"],
        "type=Warning,involvedObject.name=pytorch-digits"
    );
}

/// `hetgen status --engine kubeflow`: the TrainJob's phase, its pods and the Warnings on it.
#[test]
fn status_reads_the_trainjob_its_pods_and_its_warnings() {
    let server = Server::start("wait-refused");
    let status = runtime()
        .block_on(async {
            let cluster = cluster(&server).await;
            hetgen_kube_deploy::status(&cluster, JOB).await
        })
        .unwrap();
    assert_eq!(status.state.phase.name(), "Running");
    assert!(status.pods.is_empty());
    let reasons: Vec<&str> = status.warnings.iter().map(|w| w.reason.as_str()).collect();
    assert_eq!(reasons, ["FailedCreate", "TrainJobResourcesCreationFailed"]);
    assert!(status.warnings[1].is_refusal());
    assert!(!status.warnings[0].is_refusal());
    assert_eq!(server.unmatched(), Vec::<String>::new());
}
