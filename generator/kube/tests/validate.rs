//! `hetgen_kube::validate::check` on the objects `hetgen render` writes for the pytorch
//! example (`data/sample.yaml`: a TrainingRuntime, then a TrainJob), and on mutations of them,
//! each refused at the line and column of the fault.

use std::path::PathBuf;

use hetgen_kube::validate::check;
use hetgen_spec::Problem;

const SAMPLE: &str = include_str!("data/sample.yaml");

fn run(text: &str) -> Vec<Problem> {
    check(&[(PathBuf::from("kubeflow/sample.yaml"), text.to_string())])
}

/// The sample with `from` (which must occur exactly once) replaced by `to`.
fn mutate(from: &str, to: &str) -> String {
    assert_eq!(
        SAMPLE.matches(from).count(),
        1,
        "`{from}` must occur once in the sample"
    );
    SAMPLE.replacen(from, to, 1)
}

fn show(found: &[Problem]) -> String {
    found
        .iter()
        .map(|d| {
            format!(
                "{} [{}] {} ({:?})\n",
                d.location(),
                d.code,
                d.message,
                d.help
            )
        })
        .collect()
}

/// The one problem with `code` at `line`:`column`; fails showing every problem otherwise.
fn at<'a>(found: &'a [Problem], code: &str, line: usize, column: usize) -> &'a Problem {
    let code = format!("hetgen::kube::{code}");
    let hits: Vec<&Problem> = found
        .iter()
        .filter(|d| d.code == code && d.line_col() == Some((line, column)))
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "want one {code} at {line}:{column}, got:\n{}",
        show(found)
    );
    hits[0]
}

/// Exactly one problem, `code` at `line`:`column`.
fn only<'a>(found: &'a [Problem], code: &str, line: usize, column: usize) -> &'a Problem {
    assert_eq!(found.len(), 1, "want only {code}, got:\n{}", show(found));
    at(found, code, line, column)
}

#[test]
fn the_rendered_sample_is_valid() {
    let found = run(SAMPLE);
    assert!(found.is_empty(), "{}", show(&found));
}

/// What the renderer itself writes for a fixture job, not a copy of it, passes too.
#[test]
fn the_renderer_s_own_output_is_valid() {
    let job = hetgen_fixtures::spec("py-script")
        .set("instance_group.0.count", 2)
        .set("instance_group.1.count", 2)
        .merge("[kubernetes]\nimage = \"registry.example.com/digits:1\"\n")
        .job();
    let objects = hetgen_kube::objects(&job).expect("a [kubernetes] section");
    let files: Vec<(PathBuf, String)> = objects
        .files()
        .into_iter()
        .map(|(name, text)| (PathBuf::from(name), text))
        .collect();
    assert!(
        files
            .iter()
            .all(|(_, text)| text.contains("apiVersion: trainer.kubeflow.org/v1alpha1")),
        "{files:?}"
    );
    let found = check(&files);
    assert!(found.is_empty(), "{}", show(&found));
}

#[test]
fn a_misspelled_field_is_refused_with_a_suggestion() {
    let found = run(&mutate("parallelism: 2", "parallelizm: 2"));
    let d = only(&found, "unknown-field", 33, 13);
    assert_eq!(
        d.path,
        "spec.template.spec.replicatedJobs[0].template.spec.parallelizm"
    );
    assert_eq!(
        d.message,
        "unknown field `parallelizm` in `spec.template.spec.replicatedJobs[0].template.spec`"
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `parallelism`?"));
    assert_eq!(d.location(), "kubeflow/sample.yaml:33:13");
}

#[test]
fn depends_on_a_missing_job_is_refused() {
    let found = run(&mutate(
        "        - name: data-group\n",
        "        - name: data-groop\n",
    ));
    let d = only(&found, "depends-on", 87, 17);
    assert_eq!(
        d.path,
        "spec.template.spec.replicatedJobs[1].dependsOn[0].name"
    );
    assert!(
        d.message
            .contains("`data-groop`, which is no replicatedJob"),
        "{}",
        d.message
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `data-group`?"));
}

#[test]
fn depends_on_a_later_job_is_refused() {
    let found = run(&mutate(
        "      - name: data-group\n        replicas: 1\n",
        "      - name: data-group\n        dependsOn:\n        - name: node\n          status: Ready\n        replicas: 1\n",
    ));
    let d = only(&found, "depends-on", 28, 17);
    assert!(d.message.contains("which comes after it"), "{}", d.message);
}

#[test]
fn depends_on_status_must_be_an_allowed_value() {
    let found = run(&mutate("status: Ready", "status: Readyy"));
    let d = only(&found, "enum", 88, 19);
    assert_eq!(
        d.message,
        "`spec.template.spec.replicatedJobs[1].dependsOn[0].status` is `Readyy`, not one of `Ready`, `Complete`"
    );
    assert_eq!(d.help.as_deref(), Some("did you mean `Ready`?"));
}

#[test]
fn depends_on_with_an_in_order_startup_is_refused_at_the_order() {
    let found = run(&mutate(
        "      replicatedJobs:\n",
        "      startupPolicy:\n        startupPolicyOrder: InOrder\n      replicatedJobs:\n",
    ));
    let d = only(&found, "rule", 26, 29);
    assert_eq!(
        d.path,
        "spec.template.spec.startupPolicy.startupPolicyOrder"
    );
    assert_eq!(
        d.message,
        "`spec.template.spec`: StartupPolicy and DependsOn APIs are mutually exclusive"
    );
}

#[test]
fn a_bad_quantity_is_refused() {
    let text = SAMPLE.replacen("cpu: \"3\"", "cpu: 3 cores", 1);
    let found = run(&text);
    let d = only(&found, "pattern", 75, 28);
    assert_eq!(
        d.path,
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.requests.cpu"
    );
    assert!(d.help.as_deref().unwrap_or("").contains("`500m`"), "{d:?}");
}

/// The TrainJob's `metadata.name`, the only one preceded by `kind: TrainJob`.
const TRAINJOB_NAME: &str = "kind: TrainJob\nmetadata:\n  name: pytorch-digits\n";

#[test]
fn a_trainjob_name_with_upper_case_is_refused() {
    let found = run(&mutate(
        TRAINJOB_NAME,
        "kind: TrainJob\nmetadata:\n  name: PyTorch-digits\n",
    ));
    // The CRD's CEL rule, located at the name it reads, and the server's own name check.
    let d = at(&found, "rule", 134, 9);
    assert_eq!(
        d.message,
        "the object: metadata.name must match RFC 1035 DNS label format"
    );
    at(&found, "name", 134, 9);
    // The TrainJob's runtimeRef still names the runtime.
    assert_eq!(found.len(), 2, "{}", show(&found));
}

#[test]
fn a_trainjob_name_longer_than_63_characters_is_refused() {
    let long = format!("pytorch-digits-{}", "x".repeat(50));
    let found = run(&mutate(
        TRAINJOB_NAME,
        &format!("kind: TrainJob\nmetadata:\n  name: {long}\n"),
    ));
    let d = at(&found, "rule", 134, 9);
    assert_eq!(
        d.message,
        "the object: metadata.name must be no more than 63 characters"
    );
    // Its pods' hostnames are longer still, one diagnostic per replicatedJob.
    let hostnames: Vec<_> = found
        .iter()
        .filter(|d| d.code == "hetgen::kube::hostname")
        .collect();
    assert_eq!(hostnames.len(), 2, "{}", show(&found));
    assert_eq!(found.len(), 3, "{}", show(&found));
}

#[test]
fn a_pod_name_over_57_characters_is_refused_as_jobsets_webhook_does() {
    // `<name>-data-group-0-1` is 58 characters: a DNS label, but with JobSet's 6-character
    // suffix it is 64, and JobSet's webhook refuses the JobSet.
    let name = format!("pytorch-digits-{}", "x".repeat(28));
    let found = run(&mutate(
        TRAINJOB_NAME,
        &format!("kind: TrainJob\nmetadata:\n  name: {name}\n"),
    ));
    let d = only(&found, "hostname", 134, 9);
    assert_eq!(
        d.message,
        format!(
            "pod name `{name}-data-group-0-1` is 58 characters long, more than the 57 JobSet allows before the pod's random suffix"
        )
    );
    // One character shorter fits.
    let name = format!("pytorch-digits-{}", "x".repeat(27));
    let found = run(&mutate(
        TRAINJOB_NAME,
        &format!("kind: TrainJob\nmetadata:\n  name: {name}\n"),
    ));
    assert!(
        found.iter().all(|d| d.code != "hetgen::kube::hostname"),
        "{}",
        show(&found)
    );
}

#[test]
fn num_proc_per_node_is_no_longer_a_torch_policy_field() {
    // Trainer v2.3.0 removed `torch.numProcPerNode` from the runtime's mlPolicy (#3239).
    let found = run(&mutate(
        "    torch: {}\n",
        "    torch:\n      numProcPerNode: auto\n",
    ));
    let d = only(&found, "unknown-field", 15, 7);
    assert_eq!(
        d.message,
        "unknown field `numProcPerNode` in `spec.mlPolicy.torch`"
    );
    assert_eq!(
        d.help.as_deref(),
        Some("`spec.mlPolicy.torch` takes `envInjection`")
    );
}

#[test]
fn num_proc_per_node_of_a_trainjob_must_be_an_integer() {
    let found = run(&mutate(
        "    numNodes: 2\n    resourcesPerNode:",
        "    numNodes: 2\n    numProcPerNode: auto\n    resourcesPerNode:",
    ));
    let d = only(&found, "type", 149, 21);
    assert_eq!(
        d.message,
        "`spec.trainer.numProcPerNode` must be an integer, not a string `auto`"
    );
}

#[test]
fn the_trainer_job_must_be_named_node() {
    let found = run(&mutate(
        "      - name: node\n        dependsOn:",
        "      - name: trainer\n        dependsOn:",
    ));
    let d = only(&found, "trainer-job", 85, 15);
    assert!(d.message.contains("is not named `node`"), "{}", d.message);
}

#[test]
fn the_trainer_job_needs_a_node_container() {
    let found = run(&mutate(
        "                - name: node\n",
        "                - name: main\n",
    ));
    let d = only(&found, "trainer-job", 100, 17);
    assert!(
        d.message.contains("no container named `node`"),
        "{}",
        d.message
    );
}

#[test]
fn the_runtime_ref_must_name_a_given_runtime() {
    let found = run(&mutate(
        "    kind: TrainingRuntime\n    name: pytorch-digits\n",
        "    kind: TrainingRuntime\n    name: pytorch-digit\n",
    ));
    let d = only(&found, "runtime-ref", 142, 11);
    assert_eq!(d.help.as_deref(), Some("did you mean `pytorch-digits`?"));

    let found = run(&mutate(
        "    kind: TrainingRuntime\n    name: pytorch-digits\n",
        "    kind: ClusterTrainingRuntime\n    name: pytorch-digits\n",
    ));
    let d = only(&found, "runtime-ref", 142, 11);
    assert_eq!(
        d.help.as_deref(),
        Some("`pytorch-digits` is a TrainingRuntime: set `kind: TrainingRuntime`")
    );
}

#[test]
fn a_trainjob_alone_may_name_a_runtime_of_the_cluster() {
    let trainjob = &SAMPLE[SAMPLE.find("---\n").unwrap()..];
    let found = run(&trainjob.replace("name: pytorch-digits\n", "name: torch-distributed\n"));
    assert!(found.is_empty(), "{}", show(&found));
}

#[test]
fn the_files_are_checked_together() {
    let (runtime, trainjob) = SAMPLE.split_at(SAMPLE.find("---\n").unwrap());
    let trainjob = trainjob.replace("    name: pytorch-digits\n", "    name: pytorch-digit\n");
    let found = check(&[
        (PathBuf::from("trainingruntime.yaml"), runtime.to_string()),
        (PathBuf::from("trainjob.yaml"), trainjob),
    ]);
    assert_eq!(found.len(), 1, "{}", show(&found));
    assert_eq!(found[0].location(), "trainjob.yaml:13:11");
}

#[test]
fn labels_are_checked_with_kubernetes_syntax() {
    let found = run(&mutate(
        "hetgen.io/group: data_group",
        "hetgen.io/group: data group",
    ));
    // Nested template labels are only `string` maps in the schema: the server does not check
    // them there, and neither does this; the top-level labels are the server's to check.
    assert!(found.is_empty(), "{}", show(&found));
    let found = run(&mutate(
        "    trainer.kubeflow.org/framework: torch\n",
        "    trainer.kubeflow.org/framework: torch cuda\n    Bad_Prefix/x: z\n",
    ));
    at(&found, "label", 10, 37);
    at(&found, "label", 11, 5);
    assert_eq!(found.len(), 2, "{}", show(&found));
}

#[test]
fn malformed_yaml_is_a_diagnostic_with_a_position() {
    let found = run(&mutate(
        "  mlPolicy:\n    numNodes: 2\n",
        "  mlPolicy:\n    numNodes: [2\n",
    ));
    assert_eq!(found.len(), 1, "{}", show(&found));
    assert_eq!(found[0].code, "hetgen::kube::yaml");
    assert!(
        found[0].message.starts_with("invalid YAML: "),
        "{}",
        found[0].message
    );
    assert!(found[0].line_col().unwrap().0 >= 13, "{}", show(&found));
}

#[test]
fn an_unknown_kind_is_refused() {
    let found = run("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n");
    only(&found, "unknown-kind", 2, 7);
    let found = run("apiVersion: trainer.kubeflow.org/v1\nkind: TrainJob\nmetadata:\n  name: x\n");
    let d = only(&found, "unknown-kind", 1, 13);
    assert_eq!(
        d.help.as_deref(),
        Some("`TrainJob` is served as `apiVersion: trainer.kubeflow.org/v1alpha1`")
    );
}

#[test]
fn the_label_points_at_the_offending_bytes() {
    use miette::Diagnostic as _;
    let text = mutate("parallelism: 2", "parallelizm: 2");
    let found = run(&text);
    let label = found[0].labels().unwrap().next().unwrap();
    assert!(text[label.offset()..].starts_with("parallelizm"));
    assert_eq!(
        label.label(),
        Some("`spec.template.spec.replicatedJobs[0].template.spec.parallelizm`")
    );
    assert_eq!(
        found[0].code().unwrap().to_string(),
        "hetgen::kube::unknown-field"
    );
    assert_eq!(found[0].to_json()["line"], 33);
    assert_eq!(
        found[0].to_json()["path"],
        "spec.template.spec.replicatedJobs[0].template.spec.parallelizm"
    );
}

#[test]
fn truncated_and_damaged_documents_never_panic() {
    // Every prefix at a character boundary, and every line dropped in turn: whatever comes
    // back, it comes back.
    let cuts = SAMPLE.char_indices().map(|(i, _)| i).step_by(7);
    for cut in cuts {
        let _ = run(&SAMPLE[..cut]);
    }
    let lines: Vec<&str> = SAMPLE.lines().collect();
    for skip in 0..lines.len() {
        let text: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, l)| *l)
            .collect();
        let _ = run(&text.join("\n"));
    }
    for odd in [
        "",
        "---",
        "- 1\n- 2",
        "a: !!int x",
        "a: &x [*x]",
        "x: .nan",
        "[",
        "\u{feff}a: 1",
        "? [a]\n: b",
    ] {
        let _ = run(odd);
    }
}

#[test]
fn an_unquoted_yes_is_a_boolean_as_kubectl_reads_it() {
    let found = run(&mutate("value: data_group\n", "value: yes\n"));
    let d = only(&found, "type", 52, 28);
    assert_eq!(
        d.message,
        "`spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[1].value` must be a string, not a boolean `true`"
    );
    assert!(
        d.help.as_deref().unwrap_or("").starts_with("quote it"),
        "{d:?}"
    );
}
