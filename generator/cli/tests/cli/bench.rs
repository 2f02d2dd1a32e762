//! `hetgen bench` of a script-mode job on AWS's PyTorch image, whose source is the user's
//! Python Dataset: every host starts through AWS's training toolkit (from the project's torch
//! environment, as `hetgen deploy --local` runs it) from a source bundle that ships the hetgen
//! wheel `make wheel` built (or `HETGEN_WHEEL`).

use std::path::{Path, PathBuf};

use super::{assert_contains, code, hetgen, new_project, stderr};

/// The pytorch-dataset example, made small: one data host and one trainer host, one epoch,
/// and a step line every 5 batches (of about 45) so that a short run has several; rendered.
fn small_dataset_project(root: &Path) -> PathBuf {
    let dir = new_project(root, "digits", "pytorch-dataset");
    edit(&dir.join("hetgen.toml"), |spec| {
        spec.replace("count = 2", "count = 1").replace(
            "max_runtime = \"1h\"",
            "max_runtime = \"1h\"\nhyperparameters = { epochs = 1 }",
        )
    });
    edit(&dir.join("train.py"), |script| {
        script.replace("hetgen.Loader()", "hetgen.Loader(progress_every=5)")
    });
    let out = hetgen(&["render"], &dir);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    dir
}

fn edit(path: &Path, change: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let changed = change(text.clone());
    assert_ne!(changed, text, "{} unchanged", path.display());
    std::fs::write(path, changed).unwrap();
}

/// A profile as `hetgen profile` writes it, with the keys bench reads.
fn profile(dir: &Path, gpu_samples_per_s: Option<f64>) -> PathBuf {
    let path = dir.join("profile.json");
    let json = serde_json::json!({
        "samples_per_s": 400.0,
        "threads": 2,
        "cpu_seconds_per_sample": 0.004,
        "gpu_samples_per_s": gpu_samples_per_s,
    });
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn bench_runs_a_script_on_its_own_dataset_every_way_and_predicts_from_a_profile() {
    let root = tempfile::tempdir().unwrap();
    let dir = small_dataset_project(root.path());
    let profile = profile(root.path(), Some(1500.0));
    let results = root.path().join("bench");
    let out = hetgen(
        &[
            "bench",
            "--format",
            "json",
            "--profile",
            profile.to_str().unwrap(),
            "--results",
            results.to_str().unwrap(),
        ],
        &dir,
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let text = std::fs::read_to_string(results.join("bench.json")).unwrap();
    let bench: serde_json::Value = serde_json::from_str(&text).unwrap();
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, bench);
    assert_eq!(bench["script"], "train.py");
    assert_eq!(
        bench["steps"],
        serde_json::Value::Null,
        "a script runs its own length"
    );
    for side in ["homogeneous", "heterogeneous", "hybrid"] {
        let c = &bench[side];
        let number = |key: &str| {
            c[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{side}.{key}: {c:#}"))
        };
        // Measured from the Loader's step lines, the first window left out.
        assert!(c["steps"].as_u64().unwrap() >= 5, "{side}: {c:#}");
        assert!(number("mean_step_ms") > 0.0, "{side}: {c:#}");
        assert!(number("samples_per_s") > 0.0, "{side}: {c:#}");
        assert!(
            (0.0..=1.0).contains(&number("stall_fraction")),
            "{side}: {c:#}"
        );
        assert_eq!(c["trainer_processes"], 1, "{side}: {c:#}");
        let cost = number("price_per_hour") * number("mean_step_ms") / 3.6e6;
        assert!((number("cost_per_step") - cost).abs() < 1e-12);
        let predicted = &c["predicted"];
        let rate = predicted["samples_per_s"].as_f64().unwrap();
        let stall = predicted["stall_fraction"].as_f64().unwrap();
        assert!(rate > 0.0 && (0.0..=1.0).contains(&stall), "{side}: {c:#}");
        // The trainer host's cores and the data hosts' never overlap.
        let cores = |key: &str| -> Vec<u64> {
            c[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect()
        };
        let (trainer, data) = (cores("trainer_cores"), cores("data_cores"));
        assert!(!trainer.is_empty(), "{side}: {c:#}");
        assert!(trainer.iter().all(|n| !data.contains(n)), "{side}: {c:#}");
    }
    // Homogeneous: the trainer host alone, its Loader on its own cores.
    let homogeneous = &bench["homogeneous"];
    assert_eq!(homogeneous["instances"], 1);
    assert_eq!(homogeneous["data_cores"], serde_json::json!([]));
    assert_eq!(bench["heterogeneous"]["instances"], 2);
    assert_eq!(bench["heterogeneous"]["configuration"], "remote-only");
    assert!(
        !bench["heterogeneous"]["data_cores"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Each run's hosts started from a bundle whose job is that run's: the homogeneous one has
    // no data group, and its trainer host reads the `training` channel itself.
    let bundled = dir.join("build/digits/bench-bundles/homogeneous/sourcedir/hetgen-job.json");
    let job: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bundled).unwrap()).unwrap();
    let groups = job["job"]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{job:#}");
    assert_eq!(groups[0]["role"], "trainer", "{job:#}");
    let run = PathBuf::from(homogeneous["job_dir"].as_str().unwrap());
    let host = std::fs::read_dir(run.join("hosts"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert!(host.path().join("input/data/training").is_dir());
    let svg = std::fs::read_to_string(results.join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("remote-only"));
}

#[test]
fn bench_of_a_script_says_what_it_cannot_do() {
    let root = tempfile::tempdir().unwrap();
    let dir = small_dataset_project(root.path());
    // A script is not cut at N steps: its own arguments bound it.
    let out = hetgen(&["bench", "--steps", "5"], &dir);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert_contains(&err, "a script runs its own length");
    assert_contains(&err, "the job's hyperparameters");
    // A prediction needs the trainer's rate; said before anything runs.
    let profile = profile(root.path(), None);
    let out = hetgen(&["bench", "--profile", profile.to_str().unwrap()], &dir);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert_contains(&err, "it has no `gpu_samples_per_s`");
    assert_contains(&err, "hetgen profile --trainer");
    assert!(!dir.join("build/digits/bench").exists(), "nothing ran");

    // Without data hosts there is nothing to compare.
    edit(&dir.join("hetgen.toml"), |spec| {
        let data_group = spec
            .find("[[instance_group]]\nname = \"data_group\"")
            .unwrap();
        let next = data_group + spec[data_group + 1..].find("[[instance_group]]").unwrap() + 1;
        let spec = format!("{}{}", &spec[..data_group], &spec[next..]);
        spec.replace("[\"data_group\"]", "[\"dnn_group\"]")
    });
    let out = hetgen(&["render"], &dir);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = hetgen(&["bench"], &dir);
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert_contains(&err, "the job has no data group");
    assert_contains(
        &err,
        "bench compares a job with data hosts against its trainer alone",
    );
}
