//! The `hetgen` command as a user meets it: exit codes, what goes to stdout and stderr, and
//! the files it writes (or refuses to write).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod aws;
mod bench;
mod completions;
mod fixture;
mod http;
mod kubeflow;
mod local;
mod logs;
mod prices;

pub use hetgen_fixtures::repo;

/// `hetgen args` in `cwd`, uncoloured, for a test to add to and run.
pub fn hetgen_command(args: &[&str], cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hetgen"));
    cmd.args(args).current_dir(cwd).env("NO_COLOR", "1");
    cmd
}

/// [`hetgen_command`], run to its end.
pub fn hetgen(args: &[&str], cwd: &Path) -> Output {
    hetgen_command(args, cwd).output().unwrap()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The stdout of a program that must have succeeded; its stderr says why when it did not.
#[track_caller]
pub fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
}

/// Fails, showing all of `text`, unless `part` is in it.
#[track_caller]
pub fn assert_contains(text: &str, part: &str) {
    assert!(text.contains(part), "`{part}` is not in:\n{text}");
}

/// A fresh folder holding `examples/{example}` as its hetgen.toml.
pub fn project_with(example: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("examples").join(example),
        dir.path().join("hetgen.toml"),
    )
    .unwrap();
    dir
}

/// `hetgen new NAME --example EXAMPLE` in `root`; returns the new project's folder.
#[track_caller]
pub fn new_project(root: &Path, name: &str, example: &str) -> PathBuf {
    let out = hetgen(&["new", name, "--example", example], root);
    assert_eq!(code(&out), 0, "{example}: {}", stderr(&out));
    root.join(name)
}

/// Every invalid spec, as the terminal shows it: exit code and diagnostics.
#[test]
fn invalid_specs_print_their_diagnostics() {
    hetgen_fixtures::snapshots("validate").bind(|| {
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

/// Every diagnostic code in hetgen's sources is written one way, `"hetgen::area::kebab-case"`:
/// a spec's problems and every other failure alike, so that whoever matches on codes (a CI
/// script, `validate --format json`) needs one rule.
#[test]
fn every_diagnostic_code_is_kebab_case() {
    fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                sources(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let kebab = |segment: &str| {
        !segment.is_empty()
            && !segment.starts_with('-')
            && !segment.ends_with('-')
            && !segment.contains("--")
            && segment
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let mut files = Vec::new();
    for part in ["generator", "runtime"] {
        for krate in std::fs::read_dir(repo().join(part)).unwrap().flatten() {
            let src = krate.path().join("src");
            if src.is_dir() {
                sources(&src, &mut files);
            }
        }
    }
    sources(&repo().join("python/src"), &mut files);
    let mut codes = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(
            !text.contains("code(hetgen::"),
            "{}: a code written as a path; write it as a string",
            file.display()
        );
        for (_, rest) in text
            .match_indices("\"hetgen::")
            .map(|(at, _)| text.split_at(at + 9))
        {
            let code = &rest[..rest.find('"').unwrap()];
            // `hetgen::kube::` alone is the prefix of a crate's `code!("name")` macro; its
            // names are checked below.
            if code.ends_with("::") && text.contains("macro_rules! code") {
                continue;
            }
            assert!(
                code.split("::").all(kebab),
                "{}: `hetgen::{code}` is not kebab-case",
                file.display()
            );
            codes += 1;
        }
        for (_, rest) in text
            .match_indices("code!(\"")
            .map(|(at, _)| text.split_at(at + 7))
        {
            let name = &rest[..rest.find('"').unwrap()];
            assert!(
                kebab(name),
                "{}: `code!(\"{name}\")` is not kebab-case",
                file.display()
            );
            codes += 1;
        }
    }
    // The walk found the codes, not an empty tree.
    assert!(codes > 100, "{codes} codes");
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
    let dir = project_with("mnist-hetero.toml");
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
        "pytorch",
    ] {
        let project = new_project(dir.path(), &format!("p-{example}"), example);
        let out = hetgen(&["validate"], &project);
        assert_eq!(code(&out), 0, "{example}: {}", stderr(&out));
    }
}

#[test]
fn the_pytorch_example_brings_its_script_and_the_digits() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "digits", "pytorch");
    assert_eq!(
        std::fs::read_to_string(project.join("train.py")).unwrap(),
        std::fs::read_to_string(repo().join("examples/pytorch/train.py")).unwrap()
    );
    let count = |split: &str| -> usize {
        std::fs::read_dir(project.join("data").join(split))
            .unwrap()
            .map(|label| std::fs::read_dir(label.unwrap().path()).unwrap().count())
            .sum()
    };
    // 1797 digits: every fifth held out.
    assert_eq!((count("train"), count("test")), (1437, 360));
    let png = std::fs::read(project.join("data/test/0/0000.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    assert_eq!(code(&hetgen(&["render"], &project)), 0);
    // It runs on AWS's PyTorch image: the bundle's entry point, no image to build.
    assert!(
        project
            .join("build/digits/bundle/hetgen_launcher.py")
            .exists()
    );
    assert!(!project.join("build/digits/Dockerfile").exists());
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
    let plan = json_report(&["plan", "examples/resnet50-p4d.toml", "--cpu-per-gpu", "20"]);
    assert_eq!(plan["gpus"], 8);
    // The example's channel reaches every host, so the p4d's 96 vCPUs less its default reserve
    // (one per GPU plus one) preprocess beside the data hosts' 144, as the runtime runs it.
    assert_eq!(plan["sides"][0]["side"], "trainer");
    assert_eq!(plan["sides"][0]["vcpus"], 87);
    assert_eq!(plan["sides"][1]["vcpus"], 144);
    assert_eq!(plan["demand"]["gpu_cap"], 1.0);

    let human = hetgen(
        &["plan", "examples/resnet50-p4d.toml", "--cpu-per-gpu", "20"],
        &repo(),
    );
    let table = String::from_utf8(human.stdout).unwrap();
    assert!(
        table.contains("predicted GPU utilisation cap: 100%") && table.contains("trainer (hybrid)"),
        "{table}"
    );

    let c = json_report(&[
        "compare",
        "--baseline",
        "examples/mnist-homogeneous.toml",
        "--baseline-step-ms",
        "200",
        "--candidate",
        "examples/mnist-hetero.toml",
        "--candidate-step-ms",
        "100",
    ]);
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

/// What `hetgen args --format json` prints from the repository, where it must succeed.
#[track_caller]
fn json_report(args: &[&str]) -> serde_json::Value {
    let out = hetgen(&[args, &["--format", "json"]].concat(), &repo());
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The subcommands `hetgen --help` lists.
fn subcommands() -> Vec<String> {
    let out = hetgen(&["--help"], &repo());
    let help = String::from_utf8(out.stdout).unwrap();
    help.split("Commands:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Every numeric flag of every command, as `(command, --flag)`: the flags whose value name in
/// `--help` is a number's (the CLI's own tests hold every numeric flag to these names).
fn numeric_flags() -> Vec<(String, String)> {
    const NUMERIC: [&str; 6] = ["<SECONDS>", "<N>", "<VCPUS>", "<RATE>", "<MS>", "<USD>"];
    let mut flags = Vec::new();
    for sub in subcommands() {
        let help = String::from_utf8(hetgen(&[&sub, "--help"], &repo()).stdout).unwrap();
        for line in help.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(i) = words.iter().position(|w| w.starts_with("--")) else {
                continue;
            };
            if words.get(i + 1).is_some_and(|v| NUMERIC.contains(v)) {
                flags.push((sub.clone(), words[i].to_owned()));
            }
        }
    }
    flags
}

#[test]
fn every_numeric_flag_refuses_nonsense_with_exit_two_and_no_panic() {
    let flags = numeric_flags();
    assert!(flags.len() >= 16, "{flags:?}");
    for (sub, flag) in &flags {
        for bad in [
            "inf",
            "nan",
            "-5",
            "1e400",
            "18446744073709551616",
            "2^64",
            "garbage",
        ] {
            let arg = format!("{flag}={bad}");
            let err = usage_error(&[sub, &arg]);
            assert!(
                err.contains(flag.as_str()) && err.contains("expected "),
                "{sub} {arg}: the flag and its range are named: {err}"
            );
        }
    }
}

#[test]
fn numbers_that_once_panicked_or_passed_as_nonsense_are_usage_errors() {
    // From the issue: each of these panicked (exit 101) or printed nonsense with exit 0.
    let spec = "examples/resnet50-p4d.toml";
    for args in [
        &["deploy", "--local", "--max-runtime", "inf"][..],
        &["deploy", "--local", "--max-runtime", "1e308"],
        &[
            "deploy",
            "--local",
            "--max-runtime",
            "99999999999999999999999",
        ],
        &["deploy", "--local", "--max-runtime", "9223372036854775808"],
        &["deploy", "--local", "--max-runtime", "nan"],
        &["deploy", "--local", "--grace", "nan"],
        &[
            "deploy",
            "--local",
            "--cpus-per-host",
            "6148914691236517206",
        ],
        &["plan", spec, "--cpu-per-gpu", "inf"],
        &["plan", spec, "--cpu-per-gpu", "nan"],
        &["plan", spec, "--cpu-per-gpu=-5"],
        // Subnormals passed "> 0": a job stopped after 0 s, `plan` printed a 320-digit number.
        &["deploy", "--local", "--max-runtime", "1e-320"],
        &["deploy", "--local", "--max-runtime", "0.5"],
        &["plan", spec, "--cpu-per-gpu", "1e-320"],
        &[
            "compare",
            "--baseline",
            spec,
            "--baseline-step-ms",
            "1e-320",
            "--candidate",
            spec,
            "--candidate-step-ms",
            "100",
        ],
        &["profile", "--seconds", "inf"],
        &["profile", "--threads", "18446744073709551615"],
        &["list", "--max=-1"],
        &[
            "compare",
            "--baseline",
            spec,
            "--baseline-step-ms",
            "200",
            "--candidate",
            spec,
            "--candidate-step-ms",
            "100",
            "--candidate-price",
            "nan",
        ],
    ] {
        usage_error(args);
    }
}

/// `hetgen args` as a usage error: exit 2, no panic, nothing on stdout. Returns its stderr.
#[track_caller]
fn usage_error(args: &[&str]) -> String {
    let out = hetgen(args, &repo());
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
    err
}

#[test]
fn a_spec_that_is_not_utf8_is_invalid_with_the_place_of_its_first_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain("version = 1\n".encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    for (bytes, at) in [
        (
            b"version = 1\n[job]\nname = \"caf\xe9\"\n".to_vec(),
            "enc.toml:3:12",
        ),
        (utf16, "enc.toml:1:1"),
    ] {
        std::fs::write(dir.path().join("enc.toml"), bytes).unwrap();
        let out = hetgen(&["validate", "enc.toml"], dir.path());
        let err = stderr(&out);
        assert_eq!(code(&out), 65, "{err}");
        assert!(
            err.contains("hetgen::spec::encoding") && err.contains(at),
            "{err}"
        );
        let json = hetgen(&["validate", "enc.toml", "--format", "json"], dir.path());
        assert_eq!(code(&json), 65);
    }
}

#[test]
fn printed_diagnostics_are_capped_and_say_how_many_more() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = std::fs::read_to_string(repo().join("examples/tiny-local.toml")).unwrap();
    // Every stage after a `normalize` is an error.
    let stages = "[[pipeline.stage]]\nop = \"horizontal_flip\"\n".repeat(5_000);
    std::fs::write(
        dir.path().join("many.toml"),
        tiny.replace("[trainer]", &format!("{stages}[trainer]")),
    )
    .unwrap();
    let out = hetgen(&["validate", "many.toml"], dir.path());
    let err = stderr(&out);
    assert_eq!(code(&out), 65);
    let tail = &err[err.rfind("… and ").expect(&err)..];
    // Fifty problems are shown, then the count of the rest, then the summary of them all.
    assert_eq!(err.matches("hetgen::spec::").count(), 50, "{err}");
    let more = report_count(tail, "… and ", " more problems");
    let errors = report_count(tail, "`many.toml`: ", " errors");
    assert!(errors >= 5_000 && more >= errors - 50, "{tail}");
    let json = hetgen(&["validate", "many.toml", "--format", "json"], dir.path());
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["problems"].as_array().unwrap().len(), more + 50);

    // A 10 MB job name is not echoed back whole.
    let name = "x".repeat(10 << 20);
    std::fs::write(
        dir.path().join("huge.toml"),
        tiny.replace("name = \"tiny-local\"", &format!("name = \"{name}\"")),
    )
    .unwrap();
    let out = hetgen(&["validate", "huge.toml"], dir.path());
    assert_eq!(code(&out), 65);
    assert!(
        out.stderr.len() < 64 << 10,
        "{} bytes of diagnostics",
        out.stderr.len()
    );
    assert!(stderr(&out).contains("huge.toml:7:8"), "{}", stderr(&out));
}

/// The number between `before` and `after` in `text`.
fn report_count(text: &str, before: &str, after: &str) -> usize {
    let from = text
        .find(before)
        .unwrap_or_else(|| panic!("no `{before}` in {text}"))
        + before.len();
    let to = from
        + text[from..]
            .find(after)
            .unwrap_or_else(|| panic!("no `{after}` in {text}"));
    text[from..to].parse().unwrap()
}
