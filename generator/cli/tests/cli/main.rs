//! The `hetgen` command as a user meets it: exit codes, what goes to stdout and stderr, and
//! the files it writes (or refuses to write).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod aws;
mod completions;
mod fixture;
mod local;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn hetgen(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hetgen"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// Every invalid spec, as the terminal shows it: exit code and diagnostics.
#[test]
fn invalid_specs_print_their_diagnostics() {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(repo().join("snapshots/validate"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::glob!("../../../../examples/invalid", "*.toml", |path| {
            let rel = format!(
                "examples/invalid/{}",
                path.file_name().unwrap().to_str().unwrap()
            );
            let out = hetgen(&["validate", &rel], &repo());
            let expected = if rel.contains("/warn-") { 0 } else { 65 };
            assert_eq!(code(&out), expected, "{rel}");
            assert!(out.stdout.is_empty(), "diagnostics go to stderr");
            insta::assert_snapshot!(format!("exit: {}\n{}", code(&out), stderr(&out)));
        });
    });
}

#[test]
fn validate_json_reports_every_problem_with_its_location() {
    let out = hetgen(
        &[
            "validate",
            "examples/invalid/many-errors.toml",
            "--format",
            "json",
        ],
        &repo(),
    );
    assert_eq!(code(&out), 65);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    let problems = report["problems"].as_array().unwrap();
    assert!(problems.len() >= 4, "{report:#}");
    for p in problems {
        assert_eq!(p["file"], "examples/invalid/many-errors.toml");
        assert!(p["line"].as_u64().unwrap() > 0 && p["column"].as_u64().unwrap() > 0);
        assert!(p["code"].as_str().unwrap().starts_with("hetgen::spec::"));
        assert!(p["help"].is_string());
    }
}

#[test]
fn valid_examples_validate_with_exit_zero() {
    for example in [
        "mnist-hetero",
        "mnist-homogeneous",
        "resnet50-p4d",
        "tiny-local",
    ] {
        let out = hetgen(&["validate", &format!("examples/{example}.toml")], &repo());
        assert_eq!(code(&out), 0, "{example}: {}", stderr(&out));
        assert!(stderr(&out).contains("valid: "));
    }
}

#[test]
fn missing_spec_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap();
    let out = hetgen(&["validate"], dir.path());
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("cannot read `hetgen.toml`"), "{err}");
    assert!(err.contains("hetgen new"), "{err}");
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(code(&hetgen(&["render", "--no-such-flag"], &repo())), 2);
}

#[test]
fn render_writes_nothing_for_an_invalid_spec() {
    let out_dir = tempfile::tempdir().unwrap();
    let spec = repo().join("examples/invalid/unknown-group.toml");
    let out = hetgen(
        &[
            "render",
            spec.to_str().unwrap(),
            "--out",
            out_dir.path().to_str().unwrap(),
        ],
        &repo(),
    );
    assert_eq!(code(&out), 65);
    assert_eq!(std::fs::read_dir(out_dir.path()).unwrap().count(), 0);
}

#[test]
fn render_then_check_detects_stale_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("examples/mnist-hetero.toml"),
        dir.path().join("hetgen.toml"),
    )
    .unwrap();
    let out = hetgen(&["render"], dir.path());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.contains("build/mnist-hetero/create-training-job.json"),
        "{listed}"
    );

    assert_eq!(code(&hetgen(&["render", "--check"], dir.path())), 0);

    let spec = std::fs::read_to_string(dir.path().join("hetgen.toml")).unwrap();
    std::fs::write(
        dir.path().join("hetgen.toml"),
        spec.replace("batch_size = 256", "batch_size = 128"),
    )
    .unwrap();
    let out = hetgen(&["render", "--check"], dir.path());
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(
        err.contains("-      \"batch_size\": 256,") && err.contains("+      \"batch_size\": 128,"),
        "{err}"
    );
    assert!(err.contains("run `hetgen render`"), "{err}");

    std::fs::remove_file(dir.path().join("build/mnist-hetero/Dockerfile")).unwrap();
    let out = hetgen(&["render", "--check"], dir.path());
    assert!(stderr(&out).contains("missing: build/mnist-hetero/Dockerfile"));
}

#[test]
fn new_scaffolds_a_project_that_validates_and_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out = hetgen(&["new", "my-job"], dir.path());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let project = dir.path().join("my-job");
    let spec = std::fs::read_to_string(project.join("hetgen.toml")).unwrap();
    assert!(spec.starts_with("#:schema .hetgen/hetgen.schema.json\n"));
    assert!(spec.contains("name = \"my-job\""));
    assert!(project.join(".gitignore").exists());
    let schema = std::fs::read_to_string(project.join(".hetgen/hetgen.schema.json")).unwrap();
    assert_eq!(
        schema,
        std::fs::read_to_string(repo().join("schema/hetgen.schema.json")).unwrap()
    );
    assert_eq!(code(&hetgen(&["validate"], &project)), 0);
    assert_eq!(code(&hetgen(&["render"], &project)), 0);
    assert!(project.join("build/my-job/job.json").exists());

    let again = hetgen(&["new", "my-job"], dir.path());
    assert_eq!(code(&again), 1);
    assert!(stderr(&again).contains("already exists"));
    assert_eq!(
        std::fs::read_to_string(project.join("hetgen.toml")).unwrap(),
        spec
    );

    let bad = hetgen(&["new", "my_job"], dir.path());
    assert_eq!(code(&bad), 1);
    assert!(!dir.path().join("my_job").exists());
}

#[test]
fn every_example_can_start_a_project() {
    let dir = tempfile::tempdir().unwrap();
    for example in [
        "tiny-local",
        "mnist-hetero",
        "mnist-homogeneous",
        "resnet50-p4d",
    ] {
        let name = format!("p-{example}");
        assert_eq!(
            code(&hetgen(&["new", &name, "--example", example], dir.path())),
            0
        );
        let out = hetgen(&["validate"], &dir.path().join(&name));
        assert_eq!(code(&out), 0, "{example}: {}", stderr(&out));
    }
}

#[test]
fn schema_prints_the_committed_schema() {
    let out = hetgen(&["schema"], &repo());
    assert_eq!(code(&out), 0);
    let committed = std::fs::read_to_string(repo().join("schema/hetgen.schema.json")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}

#[test]
fn plan_and_compare_report_as_json() {
    let out = hetgen(
        &[
            "plan",
            "examples/resnet50-p4d.toml",
            "--cpu-per-gpu",
            "20",
            "--format",
            "json",
        ],
        &repo(),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["gpus"], 8);
    assert_eq!(plan["demand"]["gpu_cap"], 1.0);

    let human = hetgen(
        &["plan", "examples/resnet50-p4d.toml", "--cpu-per-gpu", "20"],
        &repo(),
    );
    let table = String::from_utf8(human.stdout).unwrap();
    assert!(
        table.contains("predicted GPU utilisation cap: 100%"),
        "{table}"
    );

    let out = hetgen(
        &[
            "compare",
            "--baseline",
            "examples/mnist-homogeneous.toml",
            "--baseline-step-ms",
            "200",
            "--candidate",
            "examples/mnist-hetero.toml",
            "--candidate-step-ms",
            "100",
            "--format",
            "json",
        ],
        &repo(),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["price_per_hour", "cost_per_step"] {
        assert!(
            c["baseline"][key].is_f64() && c["candidate"][key].is_f64(),
            "{key}: {c}"
        );
    }
    assert_eq!(c["speedup"], 2.0);
    // ml.p3.2xlarge $3.825 against $3.825 + ml.c5.9xlarge $1.836 at half the step time.
    let expected = 1.0 - (3.825 + 1.836) * 100.0 / (3.825 * 200.0);
    assert!((c["improvement"].as_f64().unwrap() - expected).abs() < 1e-12);
}
