//! The spec contract: examples are valid, every invalid case fails for its own reason, the
//! committed schema is current, and no input makes the checker panic.

use std::path::{Path, PathBuf};

use hetgen_spec::{Severity, check};
use proptest::prelude::*;

/// At run time, not compile time: a test binary reused by another checkout must read that one.
fn repo() -> PathBuf {
    Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"))
        .join("../..")
}

fn specs(dir: &str) -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        // A project folder's spec too (`examples/pytorch/hetgen.toml`), named for the folder.
        .map(|p| if p.is_dir() { p.join("hetgen.toml") } else { p })
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let stem = if p.ends_with("hetgen.toml") {
                p.parent().unwrap()
            } else {
                &p
            };
            let name = stem.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_is_valid() {
    let examples = specs("examples");
    assert!(examples.len() >= 4, "the examples are missing");
    for (name, text) in examples {
        let checked = check(&name, &text);
        let errors: Vec<_> = checked
            .report
            .problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        assert!(checked.job.is_some(), "{name} did not resolve");
    }
}

/// Each file in `examples/invalid/` is named for the problem it shows. Checked as files, as
/// `hetgen validate` checks them: the files they name (`train.py`, `data.py`) are there.
#[test]
fn every_invalid_case_reports_its_own_code() {
    let cases = specs("examples/invalid");
    assert!(
        cases.len() >= 30,
        "the invalid corpus has {} cases",
        cases.len()
    );
    for (name, text) in cases {
        let file = repo().join(format!("examples/invalid/{name}.toml"));
        let checked = hetgen_spec::check_file(&file, text.as_bytes());
        let report = &checked.report;
        let codes: Vec<&str> = report.problems.iter().map(|p| p.code).collect();
        let expected = match name.as_str() {
            "unknown-op" => "hetgen::spec::unknown-value".to_owned(),
            "hyperparameter-value" => "hetgen::spec::hyperparameter".to_owned(),
            "many-errors" => {
                assert!(report.errors() >= 4, "many-errors: {codes:?}");
                continue;
            }
            warning if warning.starts_with("warn-") => {
                assert!(checked.job.is_some(), "{name} should only warn: {codes:?}");
                assert!(report.warnings() > 0);
                format!("hetgen::spec::{}", &warning[5..])
            }
            _ => {
                assert!(checked.job.is_none(), "{name} resolved despite errors");
                format!("hetgen::spec::{name}")
            }
        };
        assert!(
            codes.contains(&expected.as_str()),
            "{name}: expected {expected}, got {codes:?}"
        );
        for p in &report.problems {
            assert!(p.span.is_some(), "{name}: `{}` has no location", p.code);
            assert!(p.help.is_some(), "{name}: `{}` has no help", p.code);
        }
    }
}

#[test]
fn problems_carry_line_and_column() {
    let text = std::fs::read_to_string(repo().join("examples/invalid/instance-type.toml")).unwrap();
    let report = check("instance-type.toml", &text).report;
    let problem = &report.problems[0];
    let (line, column) = problem.line_col().unwrap();
    let line_text = text.lines().nth(line - 1).unwrap();
    assert_eq!(&line_text[column - 1..], "\"ml.c5.9xlarg\"");
    assert_eq!(
        problem.help.as_deref().unwrap().split('?').next(),
        Some("did you mean `ml.c5.9xlarge`")
    );
    let json = problem.to_json();
    assert_eq!(json["line"], line);
    assert_eq!(json["code"], "hetgen::spec::instance-type");
}

#[test]
fn resolved_job_round_trips_through_json() {
    for (name, text) in specs("examples") {
        let job = check(&name, &text).job.unwrap();
        let json = serde_json::to_string(&job).unwrap();
        let back: hetgen_spec::Job = serde_json::from_str(&json).unwrap();
        assert_eq!(job, back, "{name}");
    }
}

#[test]
fn committed_schema_is_current() {
    let path = repo().join("schema/hetgen.schema.json");
    let fresh = hetgen_spec::schema();
    if std::env::var_os("HETGEN_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "schema/hetgen.schema.json is stale: run `make schema` and commit it"
    );
    let schema: serde_json::Value = serde_json::from_str(&fresh).unwrap();
    let description = schema["properties"]["instance_group"]["description"]
        .as_str()
        .unwrap();
    assert!(
        description.contains("instance groups"),
        "doc comments become descriptions"
    );
}

/// Values that break naive code: huge, negative, non-finite, empty, long, odd unicode, nested.
fn nasty_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("9223372036854775807".to_owned()),
        Just("-9223372036854775808".to_owned()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("nan".to_owned()),
        Just("-inf".to_owned()),
        Just("1e308".to_owned()),
        Just("\"\"".to_owned()),
        Just("\"ä\u{200b}🦀\"".to_owned()),
        Just(format!("\"{}\"", "x".repeat(5000))),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("[[[[1]]]]".to_owned()),
        Just(format!("{}{}", "[".repeat(200), "]".repeat(200))),
        Just("1979-05-27T07:32:00Z".to_owned()),
        Just("true".to_owned()),
        "[a-z_]{0,12}".prop_map(|s| format!("\"{s}\"")),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
    ]
}

/// A mutation of a valid example: replace a value, drop or duplicate a line, or cut the file.
fn mutated_spec() -> impl Strategy<Value = String> {
    let examples: Vec<String> = specs("examples").into_iter().map(|(_, t)| t).collect();
    (
        0..examples.len(),
        any::<prop::sample::Index>(),
        0u8..4,
        nasty_value(),
        any::<prop::sample::Index>(),
    )
        .prop_map(move |(which, line_index, kind, value, cut)| {
            let text = &examples[which];
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let i = line_index.index(lines.len());
            match kind {
                0 => {
                    if let Some((key, _)) = lines[i].split_once(" = ") {
                        lines[i] = format!("{key} = {value}");
                    }
                }
                1 => {
                    lines.remove(i);
                }
                2 => {
                    let line = lines[i].clone();
                    lines.insert(i, line);
                }
                _ => {
                    let joined = lines.join("\n");
                    let mut at = cut.index(joined.len().max(1));
                    while !joined.is_char_boundary(at) {
                        at -= 1;
                    }
                    return joined[..at].to_owned();
                }
            }
            lines.join("\n")
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let checked = check("fuzz.toml", &text);
        prop_assert!(checked.job.is_none() || !checked.report.has_errors());
    }

    #[test]
    fn mutated_specs_never_panic(text in mutated_spec()) {
        let checked = check("fuzz.toml", &text);
        // Every problem points somewhere real in the text.
        for p in &checked.report.problems {
            if let Some(span) = &p.span {
                prop_assert!(span.start <= text.len());
                let _ = p.line_col();
            }
        }
        prop_assert_eq!(checked.job.is_some(), !checked.report.has_errors());
    }
}

#[test]
fn absurd_nesting_is_refused_before_any_parser_sees_it() {
    let deep = format!(
        "version = 1\nx = {}{}\n",
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let report = check("deep.toml", &deep).report;
    let codes: Vec<&str> = report.problems.iter().map(|p| p.code).collect();
    assert_eq!(codes, ["hetgen::spec::too-deep"]);
}

/// A spec with `n` elements of one array of tables, element `k` lacking a key it needs; also
/// the 1-based line of every element's header.
fn array_spec(array: &str, n: usize, k: usize) -> (String, Vec<usize>) {
    let element = |i: usize| -> String {
        let broken = i == k;
        match array {
            "instance_group" => format!(
                "[[instance_group]]\nname = \"g{i}\"\n{}role = \"{}\"\n",
                if broken {
                    ""
                } else {
                    "instance_type = \"ml.c5.xlarge\"\n"
                },
                if i + 1 == n { "trainer" } else { "data" }
            ),
            "channel" => format!(
                "[[channel]]\nname = \"c{i}\"\n{}",
                if broken { "" } else { "uri = \"s3://b/c/\"\n" }
            ),
            "pipeline.stage" if broken => {
                "[[pipeline.stage]]\nop = \"normalize\"\nstd = [0.5, 0.5, 0.5]\n".into()
            }
            "pipeline.stage" => "[[pipeline.stage]]\nop = \"horizontal_flip\"\np = 0.5\n".into(),
            "sagemaker.metric" => format!(
                "[[sagemaker.metric]]\nname = \"m{i}\"\n{}",
                if broken {
                    ""
                } else {
                    "regex = \"loss=(\\\\S+)\"\n"
                }
            ),
            other => panic!("{other}"),
        }
    };
    let mut text = String::from("version = 1\n[job]\nname = \"arrays\"\n");
    let groups =
        "[[instance_group]]\nname = \"t\"\ninstance_type = \"ml.m5.xlarge\"\nrole = \"trainer\"\n";
    let pipeline =
        "[pipeline]\nsource = { format = \"synthetic\", shape = [8, 8, 3] }\nbatch_size = 4\n";
    let trainer = "[trainer]\nmodel = \"mlp\"\nsteps = 1\n";
    let sagemaker = "[sagemaker]\nregion = \"us-east-1\"\nrole_arn = \"arn:aws:iam::123456789012:role/R\"\nimage_uri = \"123456789012.dkr.ecr.us-east-1.amazonaws.com/h:1\"\noutput_path = \"s3://b/o/\"\n";
    let mut headers = Vec::new();
    let mut elements = |text: &mut String| {
        for i in 0..n {
            headers.push(text.lines().count() + 1);
            text.push_str(&element(i));
        }
    };
    match array {
        "instance_group" => {
            elements(&mut text);
            text += pipeline;
            text += trainer;
        }
        "channel" => {
            text += groups;
            elements(&mut text);
            text += pipeline;
            text += trainer;
        }
        "pipeline.stage" => {
            text += groups;
            text += pipeline;
            elements(&mut text);
            text += trainer;
        }
        _ => {
            text += groups;
            text += pipeline;
            text += trainer;
            text += sagemaker;
            elements(&mut text);
        }
    }
    (text, headers)
}

#[test]
fn a_missing_key_is_reported_at_the_table_that_lacks_it_in_every_array_of_tables() {
    for array in [
        "instance_group",
        "channel",
        "pipeline.stage",
        "sagemaker.metric",
    ] {
        let n = 4;
        for k in 0..n {
            let (text, headers) = array_spec(array, n, k);
            let checked = check("arrays.toml", &text);
            let problems = &checked.report.problems;
            assert_eq!(problems.len(), 1, "{array}[{k}]: {problems:#?}\n{text}");
            let problem = &problems[0];
            assert_eq!(problem.code, "hetgen::spec::missing-key", "{array}[{k}]");
            let (line, _) = problem.line_col().unwrap();
            let end = headers.get(k + 1).copied().unwrap_or(usize::MAX);
            assert!(
                (headers[k]..end).contains(&line),
                "{array}[{k}] lacks the key, but line {line} was named (its table starts on \
                 line {}):\n{text}",
                headers[k]
            );
        }
    }
}

#[test]
fn text_that_is_not_utf8_is_an_invalid_spec_at_its_first_bad_byte() {
    let latin1 = b"version = 1\n[job]\nname = \"caf\xe9\"\n".to_vec();
    let utf16_bom: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain("version = 1\n".encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let utf16_bare: Vec<u8> = "version = 1\n"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let utf16_big_endian: Vec<u8> = "version = 1\n"
        .encode_utf16()
        .flat_map(u16::to_be_bytes)
        .collect();
    // Once reported as UTF-16 text.
    let nuls = vec![0u8; 64];
    let truncated = b"version = 1\n\0\0\0\0".to_vec();
    for (bytes, at, what) in [
        (latin1, (3, 12), "not UTF-8 text (byte 0xe9)"),
        (utf16_bom, (1, 1), "UTF-16"),
        (utf16_bare, (1, 2), "UTF-16"),
        (utf16_big_endian, (1, 1), "UTF-16"),
        (nuls, (1, 1), "not text: it holds NUL bytes"),
        (truncated, (2, 1), "not text: it holds NUL bytes"),
    ] {
        let checked = hetgen_spec::check_bytes("enc.toml", &bytes);
        assert!(checked.job.is_none());
        let problems = &checked.report.problems;
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].code, "hetgen::spec::encoding");
        assert!(
            problems[0].message.contains(what),
            "{}",
            problems[0].message
        );
        assert_eq!(problems[0].line_col(), Some(at), "{what}");
        assert!(checked.report.has_errors());
    }
    // UTF-8 goes through as `check` would take it.
    let ok = hetgen_spec::check_bytes("ok.toml", "version = 1\n".as_bytes());
    assert!(
        ok.report
            .problems
            .iter()
            .all(|p| p.code != "hetgen::spec::encoding")
    );
}

#[test]
fn a_huge_value_quoted_in_a_message_is_cut_short() {
    let name = "x".repeat(1 << 20);
    let text = std::fs::read_to_string(repo().join("examples/tiny-local.toml"))
        .unwrap()
        .replace("name = \"tiny-local\"", &format!("name = \"{name}\""));
    let checked = check("huge.toml", &text);
    assert!(checked.report.has_errors());
    for p in &checked.report.problems {
        for text in [&p.message, &p.label].into_iter().chain(p.help.as_ref()) {
            assert!(text.chars().count() <= 241, "{} chars", text.len());
        }
    }
}

#[test]
fn many_errors_are_found_and_located_in_one_pass() {
    // Every stage after a `normalize` is an error: with the span lookup and line numbering
    // linear, a hundred thousand of them are checked and located at once (no timing asserted: a
    // quadratic lookup simply does not finish).
    let stages = "[[pipeline.stage]]\nop = \"horizontal_flip\"\n".repeat(100_000);
    let text = std::fs::read_to_string(repo().join("examples/tiny-local.toml"))
        .unwrap()
        .replace("[trainer]", &format!("{stages}[trainer]"));
    let checked = check("many.toml", &text);
    let report = &checked.report;
    assert!(report.errors() >= 100_000, "{}", report.errors());
    let json = report.to_json();
    let problems = json["problems"].as_array().unwrap();
    let last = problems.last().unwrap();
    assert!(last["line"].as_u64().unwrap() > 200_000, "{last}");
}

/// A job named `name` whose data group has `data` hosts and whose trainer group has `trainers`
/// hosts of `trainer_type`, reading the channel `training` (`data/train`) as 8×8 images:
/// `channel` and `pipeline` are lines added to those tables, `trainer` the `[trainer]` table's.
fn two_group_spec(
    name: &str,
    data: u32,
    (trainers, trainer_type): (u32, &str),
    channel: &str,
    pipeline: &str,
    trainer: &str,
) -> String {
    format!(
        r#"version = 1
[job]
name = "{name}"
[[instance_group]]
name = "data_group"
instance_type = "ml.c5.xlarge"
count = {data}
role = "data"
[[instance_group]]
name = "dnn_group"
instance_type = "{trainer_type}"
count = {trainers}
role = "trainer"
[[channel]]
name = "training"
uri = "data/train"
{channel}[pipeline]
source = {{ format = "image-folder", channel = "training" }}
batch_size = 32
{pipeline}[[pipeline.stage]]
op = "decode"
[[pipeline.stage]]
op = "resize"
size = [8, 8]
[trainer]
{trainer}
"#
    )
}

/// A script-mode spec with two trainer hosts of `trainer_type`, and `extra` lines in `[trainer]`.
fn script_spec(trainer_type: &str, extra: &str) -> String {
    let trainer = format!("script = \"train.py\"\n{extra}");
    two_group_spec("script-mode", 2, (2, trainer_type), "", "", &trainer)
}

#[test]
fn a_script_trainer_resolves_with_its_defaults_on_several_hosts() {
    let checked = check("hetgen.toml", &script_spec("ml.g5.12xlarge", ""));
    let job = checked
        .job
        .expect("a script-mode spec with two trainer hosts is valid");
    let script = job.trainer.script().unwrap();
    assert_eq!(script.script, "train.py");
    assert_eq!(script.source_dir, ".");
    assert_eq!(
        script.processes_per_host, 4,
        "one per GPU of ml.g5.12xlarge"
    );
    assert_eq!(script.base_image, hetgen_spec::model::DEFAULT_BASE_IMAGE);
    assert!(job.trainer.builtin().is_none());
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["trainer"]["script"]["script"], "train.py");

    let cpu = check("hetgen.toml", &script_spec("ml.c5.xlarge", ""))
        .job
        .unwrap();
    assert_eq!(cpu.trainer.script().unwrap().processes_per_host, 1);
    let given = script_spec(
        "ml.g5.12xlarge",
        "processes_per_host = 2\nargs = [\"--epochs\", \"3\"]\nbase_image = \"my/torch:1\"",
    );
    let given = check("hetgen.toml", &given).job.unwrap();
    let script = given.trainer.script().unwrap();
    assert_eq!(script.processes_per_host, 2);
    assert_eq!(script.args, ["--epochs", "3"]);
    assert_eq!(script.base_image, "my/torch:1");
}

#[test]
fn script_mode_values_are_checked() {
    for (extra, code) in [
        ("processes_per_host = 0", "hetgen::spec::processes-per-host"),
        ("processes_per_host = \"gpus\"", "hetgen::spec::wrong-type"),
        (
            "requirements = \"../reqs.txt\"",
            "hetgen::spec::script-path",
        ),
        ("source_dir = \"/abs/src\"", "hetgen::spec::script-path"),
        ("base_image = \"\"", "hetgen::spec::base-image"),
    ] {
        let checked = check("hetgen.toml", &script_spec("ml.g5.xlarge", extra));
        let codes: Vec<&str> = checked.report.problems.iter().map(|p| p.code).collect();
        assert!(checked.job.is_none(), "{extra}: {codes:?}");
        assert!(
            codes.contains(&code),
            "{extra}: expected {code}, got {codes:?}"
        );
        for p in &checked.report.problems {
            assert!(p.span.is_some(), "{extra}: `{}` has no location", p.code);
        }
    }
}

#[test]
fn a_spec_file_s_script_and_requirements_must_exist_next_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("hetgen.toml");
    let text = script_spec("ml.g5.xlarge", "requirements = \"requirements.txt\"");
    let codes = |checked: &hetgen_spec::Checked| -> Vec<(&'static str, String)> {
        checked
            .report
            .problems
            .iter()
            .map(|p| (p.code, p.message.clone()))
            .collect()
    };
    let missing = hetgen_spec::check_file(&spec, text.as_bytes());
    assert!(missing.job.is_none());
    let found = codes(&missing);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|(c, _)| *c == "hetgen::spec::not-found"));
    assert!(found[0].1.contains("train.py"), "{found:?}");

    std::fs::write(dir.path().join("train.py"), "print('hi')\n").unwrap();
    std::fs::write(dir.path().join("requirements.txt"), "\n").unwrap();
    let ok = hetgen_spec::check_file(&spec, text.as_bytes());
    assert!(ok.job.is_some(), "{:?}", codes(&ok));

    let elsewhere = script_spec("ml.g5.xlarge", "source_dir = \"src\"");
    let checked = hetgen_spec::check_file(&spec, elsewhere.as_bytes());
    assert_eq!(codes(&checked)[0].0, "hetgen::spec::not-found");
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::rename(dir.path().join("train.py"), dir.path().join("src/train.py")).unwrap();
    assert!(
        hetgen_spec::check_file(&spec, elsewhere.as_bytes())
            .job
            .is_some()
    );
    // Without the spec's folder nothing is looked for.
    assert!(check("hetgen.toml", &text).job.is_some());
}

/// A job of `data` data hosts and one trainer host reading a ShardedByS3Key channel that
/// reaches `groups`, with `pipeline_extra` in `[pipeline]`.
fn sharded_spec(data: u32, groups: &str, pipeline_extra: &str) -> String {
    two_group_spec(
        "sharded",
        data,
        (1, "ml.g5.xlarge"),
        &format!("instance_groups = {groups}\ndistribution = \"ShardedByS3Key\"\n"),
        &format!("{pipeline_extra}\n"),
        "model = \"mlp\"\nsteps = 10",
    )
}

#[test]
fn a_sharded_source_is_valid_only_where_one_host_runs_the_pipeline() {
    let codes = |text: String| -> Vec<&'static str> {
        check("hetgen.toml", &text)
            .report
            .problems
            .iter()
            .map(|p| p.code)
            .collect()
    };
    const SHARDED: &str = "hetgen::spec::sharded-source";
    // One data host alone reads it: it holds everything there is.
    assert!(!codes(sharded_spec(1, r#"["data_group"]"#, "")).contains(&SHARDED));
    // Two data hosts would each hold half, yet each may be given any shard.
    assert!(codes(sharded_spec(2, r#"["data_group"]"#, "")).contains(&SHARDED));
    // The trainer's own pipeline (hybrid input) makes a second host, unless it is off.
    let both = r#"["data_group", "dnn_group"]"#;
    let hybrid = check("hetgen.toml", &sharded_spec(1, both, ""));
    let problem = hybrid
        .report
        .problems
        .iter()
        .find(|p| p.code == SHARDED)
        .expect("the trainer's pipeline counts");
    assert!(
        problem
            .help
            .as_deref()
            .unwrap()
            .contains("trainer_threads = 0"),
        "{problem:?}"
    );
    assert!(!codes(sharded_spec(1, both, "trainer_threads = 0")).contains(&SHARDED));
}

#[test]
fn the_pipeline_never_reads_a_pipe() {
    const PIPED: &str = "hetgen::spec::piped-source";
    let piped = |text: String| {
        check("hetgen.toml", &text)
            .report
            .problems
            .into_iter()
            .find(|p| p.code == PIPED)
    };
    let channel = |mode: &str| {
        two_group_spec(
            "piped",
            2,
            (1, "ml.g5.xlarge"),
            &format!("input_mode = \"{mode}\"\n"),
            "",
            "model = \"mlp\"\nsteps = 10",
        )
    };
    // The channel's own mode is refused where it is written, with FastFile as the fix.
    let text = channel("Pipe");
    let problem = piped(text.clone()).expect("a piped source is refused");
    let line = text
        .lines()
        .position(|l| l == "input_mode = \"Pipe\"")
        .unwrap()
        + 1;
    assert_eq!(problem.line_col(), Some((line, 14)), "{problem:?}");
    assert!(problem.help.as_deref().unwrap().contains("FastFile"));
    assert!(piped(channel("FastFile")).is_none());
    assert!(piped(channel("File")).is_none());
    // The job's mode is the channel's when the channel says none; a channel's FastFile wins.
    let job_piped = sagemaker_spec("ml.g5.xlarge", "", "input_mode = \"Pipe\"");
    let problem = piped(job_piped.clone()).expect("the job's Pipe reaches the source");
    assert_eq!(problem.location().split(':').count(), 3, "{problem:?}");
    assert!(text_at(&job_piped, &problem).starts_with("\"Pipe\""));
    let overridden = job_piped.replace(
        "uri = \"s3://data-bucket/train/\"",
        "uri = \"s3://data-bucket/train/\"\ninput_mode = \"FastFile\"",
    );
    assert_ne!(overridden, job_piped);
    assert!(piped(overridden).is_none());
}

/// The text of `spec` from where `problem` points.
fn text_at<'a>(spec: &'a str, problem: &hetgen_spec::Problem) -> &'a str {
    &spec[problem.span.clone().unwrap().start..]
}

/// `script_spec` with a `[sagemaker]` section: `image` is its `image_uri` line (or nothing),
/// `more` further lines of the section.
fn sagemaker_spec(trainer_type: &str, image: &str, more: &str) -> String {
    format!(
        "{}[sagemaker]\nregion = \"eu-central-2\"\nrole_arn = \"arn:aws:iam::123456789012:role/R\"\n\
         output_path = \"s3://out-bucket/jobs/output/\"\n{image}\n{more}\n",
        script_spec(trainer_type, "").replace("\"data/train\"", "\"s3://data-bucket/train/\"")
    )
}

#[test]
fn a_script_without_an_image_runs_on_aws_s_pytorch_image() {
    let text = sagemaker_spec(
        "ml.g5.xlarge",
        "",
        "[sagemaker.hyperparameters]\nepochs = 3\nlr = 0.5\nname = \"digits\"\nfast = true",
    );
    let checked = check("hetgen.toml", &text);
    let job = checked
        .job
        .unwrap_or_else(|| panic!("{:#?}", checked.report.problems));
    let sm = job.sagemaker.unwrap();
    let framework = sm.framework.as_ref().expect("framework mode");
    // eu-central-2's images live in another account than most regions'; one GPU group makes
    // the whole job use the GPU image, as the SDK decides.
    assert_eq!(
        sm.image_uri,
        "380420809688.dkr.ecr.eu-central-2.amazonaws.com/pytorch-training:2.8.0-gpu-py312"
    );
    assert_eq!(
        (
            framework.framework_version.as_str(),
            framework.py_version.as_str()
        ),
        ("2.8.0", "py312")
    );
    assert_eq!(framework.code_location, "s3://out-bucket");
    assert_eq!(
        framework.submit_directory("j"),
        "s3://out-bucket/j/source/sourcedir.tar.gz"
    );
    // JSON-encoded as SDK 2.x's framework estimators send them: strings keep their quotes.
    let hps: Vec<(&str, &str)> = sm
        .hyperparameters
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        hps,
        [
            ("epochs", "3"),
            ("fast", "true"),
            ("lr", "0.5"),
            ("name", "\"digits\"")
        ]
    );

    let pinned = sagemaker_spec(
        "ml.c5.xlarge",
        "",
        "framework_version = \"2.5\"\ncode_location = \"s3://code-bucket/some/prefix/\"",
    );
    let sm = check("hetgen.toml", &pinned)
        .job
        .unwrap()
        .sagemaker
        .unwrap();
    assert_eq!(
        sm.image_uri,
        "380420809688.dkr.ecr.eu-central-2.amazonaws.com/pytorch-training:2.5.1-cpu-py311"
    );
    assert_eq!(
        sm.framework.unwrap().code_location,
        "s3://code-bucket/some/prefix"
    );

    // With its own image, a script keeps today's road: hyperparameters as written.
    let own = sagemaker_spec(
        "ml.g5.xlarge",
        "image_uri = \"123456789012.dkr.ecr.eu-central-2.amazonaws.com/mine:1\"",
        "[sagemaker.hyperparameters]\nname = \"digits\"",
    );
    let sm = check("hetgen.toml", &own).job.unwrap().sagemaker.unwrap();
    assert!(sm.framework.is_none());
    assert_eq!(
        sm.image_uri,
        "123456789012.dkr.ecr.eu-central-2.amazonaws.com/mine:1"
    );
    assert_eq!(sm.hyperparameters["name"], "digits");
}

#[test]
fn the_built_in_trainer_needs_its_own_image() {
    let text = sagemaker_spec("ml.g5.xlarge", "", "")
        .replace("script = \"train.py\"", "model = \"mlp\"\nsteps = 1");
    let checked = check("hetgen.toml", &text);
    assert!(checked.job.is_none());
    let problem = checked
        .report
        .problems
        .iter()
        .find(|p| p.code == "hetgen::spec::image-uri")
        .expect("a missing image_uri is reported");
    assert!(problem.message.contains("built-in trainer"), "{problem:?}");
    assert!(problem.span.is_some() && problem.help.is_some());
}

/// A script-mode job whose pipeline reads the channel `training` with the Python dataset
/// `source` (the inline table's keys after `format`); `trainer` is the `[trainer]` table's lines.
fn python_spec(source: &str, trainer: &str) -> String {
    format!(
        r#"version = 1
[job]
name = "python-source"
[[instance_group]]
name = "data_group"
instance_type = "ml.c5.xlarge"
role = "data"
[[instance_group]]
name = "dnn_group"
instance_type = "ml.g5.xlarge"
role = "trainer"
[[channel]]
name = "training"
uri = "data/train"
[pipeline]
source = {{ format = "python", {source}, channel = "training" }}
batch_size = 32
threads = 4
[trainer]
{trainer}
"#
    )
}

fn codes(checked: &hetgen_spec::Checked) -> Vec<&'static str> {
    checked.report.problems.iter().map(|p| p.code).collect()
}

#[test]
fn a_python_source_resolves_to_its_functions_and_no_stages() {
    use hetgen_spec::model::{Pipeline, PythonRef, Source};

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/lib")).unwrap();
    std::fs::write(dir.path().join("src/train.py"), "").unwrap();
    std::fs::write(
        dir.path().join("src/data.py"),
        "def make_train_set(path, hyperparameters):\n    return []\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("src/lib/batching.py"),
        "def collate(samples):\n    return samples\n",
    )
    .unwrap();
    let text = python_spec(
        r#"dataset = "data.py:make_train_set", collate = "lib/batching.py:collate""#,
        "script = \"train.py\"\nsource_dir = \"src\"",
    );
    let checked = hetgen_spec::check_file(&dir.path().join("hetgen.toml"), text.as_bytes());
    let job = checked
        .job
        .unwrap_or_else(|| panic!("{:#?}", checked.report.problems));
    let pipeline = &job.pipeline;
    assert_eq!(
        pipeline.source,
        Source::Python {
            dataset: PythonRef {
                file: "data.py".into(),
                name: "make_train_set".into(),
            },
            collate: Some(PythonRef {
                file: "lib/batching.py".into(),
                name: "collate".into(),
            }),
            channel: "training".into(),
        }
    );
    assert!(pipeline.stages.is_empty());
    assert_eq!(pipeline.output_shape, Pipeline::UNKNOWN_SHAPE);
    assert_eq!(pipeline.known_output_shape(), None);
    assert_eq!(pipeline.threads, Some(4));
    assert!(
        job.trainer_reads_source(),
        "the channel reaches every group"
    );
    let back: hetgen_spec::Job =
        serde_json::from_str(&serde_json::to_string(&job).unwrap()).unwrap();
    assert_eq!(back, job);

    // Without `collate`, batches are stacked as PyTorch stacks them.
    let text = python_spec(
        r#"dataset = "data.py:make_train_set""#,
        "script = \"train.py\"",
    );
    let job = check("hetgen.toml", &text).job.unwrap();
    assert!(matches!(
        job.pipeline.source,
        Source::Python { collate: None, .. }
    ));
}

#[test]
fn a_python_function_is_file_py_colon_name() {
    for (dataset, label) in [
        ("data.make_train_set", "no `:`"),
        ("data.py", "no `:`"),
        ("data.py:", "no function"),
        (":make_train_set", "no file"),
        ("/code/data.py:make_train_set", "absolute path"),
        ("../data.py:make_train_set", "leaves its folder"),
        ("src\\\\data.py:make_train_set", "`\\`"),
        ("data.txt:make_train_set", "not a `.py` file"),
        ("src/.py:make_train_set", "not a `.py` file"),
        ("data.py:make-train-set", "not a Python name"),
        ("data.py:make_train_set()", "not a Python name"),
        ("data.py:1st", "not a Python name"),
        ("data.py:class", "keyword"),
    ] {
        let text = python_spec(&format!("dataset = \"{dataset}\""), "script = \"train.py\"");
        let checked = check("hetgen.toml", &text);
        assert!(checked.job.is_none(), "{dataset}");
        let problem = &checked.report.problems[0];
        assert_eq!(codes(&checked), ["hetgen::spec::python-ref"], "{dataset}");
        assert!(
            problem.label.contains(label),
            "{dataset}: {}",
            problem.label
        );
        assert!(
            problem
                .help
                .as_deref()
                .unwrap()
                .contains("data.py:make_train_set")
        );
        let (line, column) = problem.line_col().unwrap();
        let line_text = text.lines().nth(line - 1).unwrap();
        assert!(
            line_text[column - 1..].starts_with('"'),
            "{dataset}: at the value"
        );
    }
    let collate = python_spec(
        r#"dataset = "data.py:make_train_set", collate = "data.collate""#,
        "script = \"train.py\"",
    );
    let checked = check("hetgen.toml", &collate);
    assert_eq!(codes(&checked), ["hetgen::spec::python-ref"]);
    assert!(
        checked.report.problems[0]
            .help
            .as_deref()
            .unwrap()
            .contains("data.py:collate")
    );
    for ok in [
        "data.py:make_train_set",
        "src/my-data.py:_Digits2",
        "d.py:données",
    ] {
        let text = python_spec(&format!("dataset = \"{ok}\""), "script = \"train.py\"");
        assert!(check("hetgen.toml", &text).job.is_some(), "{ok}");
    }
}

#[test]
fn a_python_function_must_be_defined_at_its_file_s_top_level() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("hetgen.toml");
    std::fs::write(dir.path().join("train.py"), "").unwrap();
    std::fs::write(
        dir.path().join("data.py"),
        "import torch\n\n\
         def make_train_set(path, hyperparameters):\n    \
             def nested_set(path, hyperparameters):\n        \
                 return []\n    \
             return nested_set(path, hyperparameters)\n\n\
         async def fetch(path):\n    pass\n\n\
         class Digits(torch.utils.data.Dataset):\n    \
             def __len__(self):\n        \
                 return 0\n\n\
         make_alias = make_train_set\n",
    )
    .unwrap();
    let checked = |dataset: &str| {
        let text = python_spec(&format!("dataset = \"{dataset}\""), "script = \"train.py\"");
        hetgen_spec::check_file(&spec, text.as_bytes())
    };
    for defined in ["make_train_set", "fetch", "Digits", "make_alias", "torch"] {
        let ok = checked(&format!("data.py:{defined}"));
        assert!(ok.job.is_some(), "{defined}: {:#?}", ok.report.problems);
    }

    let undefined = |name: &str| {
        let checked = checked(&format!("data.py:{name}"));
        assert_eq!(
            codes(&checked),
            ["hetgen::spec::python-undefined"],
            "{name}"
        );
        let problem = checked.report.problems[0].clone();
        assert_eq!(problem.message, format!("`data.py` defines no `{name}`"));
        problem.help.unwrap()
    };
    // Indented, inside the function: not what the workers find on the module.
    assert!(undefined("nested_set").contains("inside a block"));
    assert!(undefined("__len__").contains("inside a block"));
    assert_eq!(undefined("make_trainset"), "did you mean `make_train_set`?");
    assert!(undefined("build").contains("def build(path, hyperparameters):"));

    let missing = checked("lib/data.py:make_train_set");
    assert_eq!(codes(&missing), ["hetgen::spec::not-found"]);
    assert_eq!(
        missing.report.problems[0].message,
        "no file `lib/data.py` in `.`"
    );
    // Without the spec's folder nothing is looked for.
    let text = python_spec(
        r#"dataset = "lib/data.py:nowhere""#,
        "script = \"train.py\"",
    );
    assert!(check("hetgen.toml", &text).job.is_some());
}

#[test]
fn a_python_source_takes_a_script_and_no_stages() {
    let source = r#"dataset = "data.py:make_train_set""#;
    let builtin = check(
        "hetgen.toml",
        &python_spec(source, "model = \"mnist-cnn\"\nsteps = 10"),
    );
    // The model's input shape is not known, so only the trainer kind is reported.
    assert_eq!(codes(&builtin), ["hetgen::spec::python-trainer"]);
    let problem = &builtin.report.problems[0];
    assert!(
        problem
            .help
            .as_deref()
            .unwrap()
            .contains("script = \"train.py\"")
    );

    let staged = python_spec(source, "script = \"train.py\"").replace(
        "[trainer]",
        "[[pipeline.stage]]\nop = \"decode\"\n[[pipeline.stage]]\nop = \"resize\"\nsize = [8, 8]\n[trainer]",
    );
    let checked = check("hetgen.toml", &staged);
    assert!(checked.job.is_none());
    assert_eq!(codes(&checked), ["hetgen::spec::python-stages"]);
    let (line, _) = checked.report.problems[0].line_col().unwrap();
    assert_eq!(
        staged.lines().nth(line - 1),
        Some("[[pipeline.stage]]"),
        "at the first stage"
    );

    // Its channel is checked as any source's.
    let unknown = python_spec(source, "script = \"train.py\"")
        .replace("channel = \"training\" }", "channel = \"trainig\" }");
    assert_eq!(
        codes(&check("hetgen.toml", &unknown)),
        ["hetgen::spec::unknown-channel"]
    );
    let unreached = python_spec(source, "script = \"train.py\"").replace(
        "uri = \"data/train\"",
        "uri = \"data/train\"\ninstance_groups = [\"dnn_group\"]",
    );
    assert_eq!(
        codes(&check("hetgen.toml", &unreached)),
        ["hetgen::spec::channel-unreached"]
    );
}
