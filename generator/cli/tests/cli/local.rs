//! `hetgen deploy --local`, `profile` and `bench` on a project made by `hetgen new`: the real
//! rendered launcher, built by cargo, running the real runtime as one process per host.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{code, hetgen, hetgen_command, new_project, stderr, stdout};

/// `hetgen new demo` + `hetgen render` in a fresh folder; returns the project folder.
fn project(root: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    assert_eq!(code(&hetgen(&["new", "demo"], root)), 0);
    let dir = root.join("demo");
    let spec = dir.join("hetgen.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    std::fs::write(&spec, edit(text)).unwrap();
    let out = hetgen(&["render"], &dir);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    dir
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// Processes whose working directory is inside `dir` (every host runs in its own tree there).
fn processes_in(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            let zombie = std::fs::read_to_string(entry.path().join("stat"))
                .is_ok_and(|s| s.contains(") Z "));
            if cwd.starts_with(dir) && !zombie {
                out.push(pid);
            }
        }
    }
    out
}

#[test]
fn deploy_local_runs_the_tiny_example_to_completion() {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| t);
    let job_dir = root.path().join("run");
    let out = hetgen(
        &["deploy", "--local", "--job-dir", job_dir.to_str().unwrap()],
        &dir,
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(err.contains("Completed"), "{err}");
    assert!(
        err.contains("data_group] ") && err.contains("dnn_group] "),
        "host output is prefixed: {err}"
    );
    let record = read_json(&job_dir.join("job-record.json"));
    assert_eq!(record["status"], "Completed");
    let hosts = record["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 3);
    assert!(hosts.iter().all(|h| h["exit_code"] == 0), "{record:#}");
    // Each host's layout and its process stand side by side, not nested.
    assert_eq!(hosts[0]["name"], "algo-1", "{record:#}");
    assert!(hosts[0]["address"].as_str().unwrap().starts_with("127."));
    assert_eq!(record["summary"]["steps"], 60);
    assert!(job_dir.join("model").join("model.safetensors").is_file());
    assert!(processes_in(&job_dir).is_empty());

    // `hetgen logs` on the job folder prints the hosts' lines as the run did.
    let run_lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with('['))
        .filter(|l| !l.contains(" started, pid ") && !l.ends_with(" exit code 0"))
        .collect();
    let logs = hetgen(&["logs", job_dir.to_str().unwrap()], &dir);
    assert_eq!(code(&logs), 0, "{}", stderr(&logs));
    let logged = stdout(&logs);
    assert_eq!(logged.lines().collect::<Vec<_>>(), run_lines);
    assert!(
        stderr(&logs).contains("trainer: 60 steps"),
        "{}",
        stderr(&logs)
    );
    let json = hetgen(
        &[
            "logs",
            job_dir.to_str().unwrap(),
            "--format",
            "json",
            "--group",
            "dnn_group",
        ],
        &dir,
    );
    let lines: Vec<serde_json::Value> = stdout(&json)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["group"] == "dnn_group"), "{lines:?}");
    assert_eq!(
        lines.len(),
        run_lines
            .iter()
            .filter(|l| l.contains("dnn_group]"))
            .count()
    );
    // `--since`: an age takes the whole run, a time after it takes nothing.
    let dir_arg = job_dir.to_str().unwrap();
    let recent = hetgen(&["logs", dir_arg, "--since", "1h"], &dir);
    assert_eq!(stdout(&recent).lines().count(), run_lines.len());
    let later = hetgen(&["logs", dir_arg, "--since", "2099-01-01T00:00:00Z"], &dir);
    assert_eq!(code(&later), 0, "{}", stderr(&later));
    assert_eq!(stdout(&later), "");
}

/// The same tiny job rendered for Kubeflow Trainer, run as its pods: each pod's command and
/// environment from the rendered objects, the built-in trainer and the data servers learning
/// their cluster from the pod variables (no `resourceconfig.json` is written).
#[test]
fn deploy_local_runs_the_tiny_example_as_its_kubeflow_pods() {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| {
        t + "\n[kubernetes]\nimage = \"registry.example.com/demo:1\"\n"
    });
    assert!(dir.join("build/demo/kubeflow/trainjob.yaml").is_file());
    let job_dir = root.path().join("run");
    let out = hetgen(
        &[
            "deploy",
            "--local",
            "--engine",
            "kubeflow",
            "--job-dir",
            job_dir.to_str().unwrap(),
        ],
        &dir,
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let record = read_json(&job_dir.join("job-record.json"));
    assert_eq!(record["status"], "Completed", "{record:#}");
    let hosts = record["hosts"].as_array().unwrap();
    let names: Vec<&str> = hosts.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "demo-data-group-0-0",
            "demo-data-group-0-1",
            "demo-node-0-0"
        ]
    );
    assert!(hosts.iter().all(|h| h["exit_code"] == 0), "{record:#}");
    for host in hosts {
        let base = PathBuf::from(host["base_dir"].as_str().unwrap());
        assert!(!base.join("input/config/resourceconfig.json").exists());
    }
    assert_eq!(record["summary"]["steps"], 60);
    assert!(err.contains("demo-data-group-0-1.demo"), "{err}");
    assert!(processes_in(&job_dir).is_empty());
    // JobSet's order: the trainer pod starts once every data pod answers SERVING.
    let line_of = |pod: &str, text: &str| {
        err.lines()
            .position(|l| l.starts_with(&format!("[{pod} ")) && l.contains(text))
            .unwrap_or_else(|| panic!("no `{text}` from {pod} in: {err}"))
    };
    let trainer_started = line_of("demo-node-0-0", "started, pid");
    for pod in ["demo-data-group-0-0", "demo-data-group-0-1"] {
        assert!(
            line_of(pod, "data server listening") < trainer_started,
            "{err}"
        );
    }

    late_trainer_node_still_finds_its_data_servers(
        root.path(),
        &dir,
        record["launcher"].as_str().unwrap(),
    );
}

/// A trainer node that comes long after the data servers' watchdog (as a GPU node scaled up
/// for the job does): the servers wait for their first trainer, and the job completes. The
/// stand-in image's launcher takes 3 s to start on the trainer's node.
fn late_trainer_node_still_finds_its_data_servers(root: &Path, dir: &Path, launcher: &str) {
    let slow = root.join("slow-node-launcher");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nif [ \"$HETGEN_KUBE_GROUP\" = dnn_group ]; then sleep 3; fi\nexec '{launcher}' \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let late_dir = root.join("late");
    let out = hetgen(
        &[
            "deploy",
            "--local",
            "--engine",
            "kubeflow",
            "--launcher",
            slow.to_str().unwrap(),
            "--env",
            "HETGEN_WATCHDOG_S=1",
            "--job-dir",
            late_dir.to_str().unwrap(),
        ],
        dir,
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    assert!(!err.contains("watchdog"), "{err}");
    let record = read_json(&late_dir.join("job-record.json"));
    assert_eq!(record["status"], "Completed", "{record:#}");
    assert_eq!(record["summary"]["steps"], 60);
    assert!(processes_in(&late_dir).is_empty());
}

#[test]
fn deploy_local_refuses_stale_rendered_files() {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| t);
    let spec = dir.join("hetgen.toml");
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("steps = 60", "steps = 61");
    std::fs::write(&spec, text).unwrap();
    let out = hetgen(&["deploy", "--local"], &dir);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("stale"), "{}", stderr(&out));
    assert!(!dir.join("build/demo/local").exists(), "nothing ran");
}

#[test]
fn a_data_host_killed_mid_run_fails_the_job_and_leaves_no_process() {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| t.replace("steps = 60", "steps = 1000000"));
    let job_dir = root.path().join("run");
    let args = [
        "deploy",
        "--local",
        "--grace",
        "2",
        "--job-dir",
        job_dir.to_str().unwrap(),
    ];
    let mut child = hetgen_command(&args, &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the trainer's first step (its log is in its tree), then kill a data host. Generous:
    // on a cold cache this includes building the launcher crate.
    let started = Instant::now();
    let victim = loop {
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "the job never started training"
        );
        std::thread::sleep(Duration::from_millis(200));
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("hetgen ended ({status}) before its trainer's first step:\n{err}");
        }
        let Ok(hosts) = std::fs::read_dir(job_dir.join("hosts")) else {
            continue;
        };
        let trees: Vec<PathBuf> = hosts.flatten().map(|e| e.path()).collect();
        let training = trees.iter().any(|t| {
            std::fs::read_to_string(t.join("output/log.txt"))
                .is_ok_and(|l| l.contains("hetgen-step"))
        });
        let data = trees.iter().find(|t| {
            std::fs::read_to_string(t.join("input/config/resourceconfig.json")).is_ok_and(|c| {
                c.contains("\"current_group_name\":\"data_group\"")
                    || c.contains("\"current_group_name\": \"data_group\"")
            })
        });
        if let (true, Some(data)) = (training, data) {
            let pids = processes_in(data);
            if let Some(pid) = pids.first() {
                break *pid;
            }
        }
    };
    assert!(
        Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    let record = read_json(&job_dir.join("job-record.json"));
    assert_eq!(record["status"], "Failed", "{record:#}");
    assert!(
        record["failure_reason"]
            .as_str()
            .unwrap()
            .contains("SIGKILL"),
        "{record:#}"
    );
    assert!(
        processes_in(&job_dir).is_empty(),
        "processes left behind: {:?}",
        processes_in(&job_dir)
    );
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn profile_writes_what_plan_reads() {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| t);
    let out = hetgen(
        &[
            "profile",
            "--seconds",
            "1",
            "--threads",
            "1",
            "--gpu-samples-per-s",
            "2000",
            "--out",
            "p.json",
            "--format",
            "json",
        ],
        &dir,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let profile = read_json(&dir.join("p.json"));
    assert_eq!(printed, profile);
    let (rate, cpu) = (
        profile["samples_per_s"].as_f64().unwrap(),
        profile["cpu_seconds_per_sample"].as_f64().unwrap(),
    );
    assert!(rate > 0.0 && cpu > 0.0, "{profile:#}");
    assert_eq!(profile["threads"], 1);
    let stages: Vec<&str> = profile["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        stages,
        vec!["source", "decode+random_resized_crop", "horizontal_flip"]
    );
    let vcpus = profile["vcpus_per_gpu"].as_f64().unwrap();
    assert!((vcpus - 2000.0 * cpu).abs() < 1e-9);

    let mnist = super::repo().join("examples/mnist-hetero.toml");
    let plan = hetgen(
        &[
            "plan",
            mnist.to_str().unwrap(),
            "--profile",
            "p.json",
            "--format",
            "json",
        ],
        &dir,
    );
    assert_eq!(code(&plan), 0, "{}", stderr(&plan));
    let by_flag = hetgen(
        &[
            "plan",
            mnist.to_str().unwrap(),
            "--cpu-per-gpu",
            &vcpus.to_string(),
            "--format",
            "json",
        ],
        &dir,
    );
    let json = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let (plan, by_flag) = (json(&plan), json(&by_flag));
    assert_eq!(
        plan["demand"], by_flag["demand"],
        "--profile means --cpu-per-gpu of the profile"
    );
    // And the profile's rate per thread predicts each side's samples/s.
    let rate = profile["samples_per_s"].as_f64().unwrap() / profile["threads"].as_f64().unwrap();
    let data = &plan["sides"][1];
    let predicted = data["samples_per_s"].as_f64().unwrap();
    assert!((predicted - rate * data["vcpus"].as_f64().unwrap()).abs() < 1e-6 * predicted);
    assert!(by_flag["sides"][1]["samples_per_s"].is_null());

    // A profile without a GPU rate cannot size a cluster, and says how to fix that.
    assert_eq!(
        code(&hetgen(
            &["profile", "--seconds", "0.2", "--out", "q.json"],
            &dir
        )),
        0
    );
    let refused = hetgen(
        &["plan", mnist.to_str().unwrap(), "--profile", "q.json"],
        &dir,
    );
    assert_ne!(code(&refused), 0);
    assert!(
        stderr(&refused).contains("--gpu-samples-per-s"),
        "{}",
        stderr(&refused)
    );

    // Not a profile: where and why, once.
    std::fs::write(dir.join("r.json"), "{\"x\": 1}").unwrap();
    let malformed = hetgen(
        &["plan", mnist.to_str().unwrap(), "--profile", "r.json"],
        &dir,
    );
    assert_ne!(code(&malformed), 0);
    let err = stderr(&malformed);
    assert!(
        err.contains("line 1, column 8: missing field `samples_per_s`")
            && !err.contains(" at line "),
        "{err}"
    );
}

/// `hetgen bench --steps 12` on the tiny project with `flags`: its output and results folder.
fn bench(flags: &[&str]) -> (std::process::Output, PathBuf, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let dir = project(root.path(), |t| t);
    let results = root.path().join("bench");
    let mut args = vec![
        "bench",
        "--steps",
        "12",
        "--results",
        results.to_str().unwrap(),
    ];
    args.extend(flags);
    let out = hetgen(&args, &dir);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    (out, results, root)
}

#[test]
fn bench_runs_all_three_configurations_and_writes_json_and_svg() {
    let (out, results, _root) = bench(&["--format", "json"]);
    let bench = read_json(&results.join("bench.json"));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, bench);
    for side in ["homogeneous", "heterogeneous", "hybrid"] {
        let c = &bench[side];
        assert_eq!(c["steps"], 12);
        assert!(c["mean_step_ms"].as_f64().unwrap() > 0.0, "{bench:#}");
        let cost =
            c["price_per_hour"].as_f64().unwrap() * c["mean_step_ms"].as_f64().unwrap() / 3.6e6;
        assert!((c["cost_per_step"].as_f64().unwrap() - cost).abs() < 1e-12);
    }
    assert_eq!(bench["homogeneous"]["instances"], 1);
    assert_eq!(bench["heterogeneous"]["instances"], 3);
    assert_eq!(bench["heterogeneous"]["configuration"], "remote-only");
    assert_eq!(bench["hybrid"]["instances"], 3);
    let rates: Vec<f64> = ["homogeneous", "heterogeneous", "hybrid"]
        .iter()
        .map(|c| bench[c]["samples_per_s"].as_f64().unwrap())
        .collect();
    let ratio = rates[2] / (rates[0] + rates[1]);
    assert!((bench["hybrid_ratio"].as_f64().unwrap() - ratio).abs() < 1e-12);
    // The hybrid run's trainer made batches itself and streamed the rest.
    let summary = trainer_summary(&bench["hybrid"]["job_dir"]);
    assert!(summary["local_threads"].as_u64().unwrap() >= 1, "{summary}");
    assert!(
        summary["batches_by_source"]["local"].as_u64().is_some(),
        "{summary}"
    );
    let (h, e) = (
        &bench["homogeneous"]["cost_per_step"],
        &bench["heterogeneous"]["cost_per_step"],
    );
    let improvement = 1.0 - e.as_f64().unwrap() / h.as_f64().unwrap();
    assert!((bench["improvement"].as_f64().unwrap() - improvement).abs() < 1e-12);
    let svg = std::fs::read_to_string(results.join("bench.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(svg.contains("homogeneous") && svg.contains("remote-only") && svg.contains("hybrid"));
}

/// The summary.json of the trainer host of a bench run's job folder.
fn trainer_summary(job_dir: &serde_json::Value) -> serde_json::Value {
    let hosts = std::path::PathBuf::from(job_dir.as_str().unwrap()).join("hosts");
    let text = std::fs::read_dir(hosts)
        .unwrap()
        .flatten()
        .find_map(|host| std::fs::read_to_string(host.path().join("output/data/summary.json")).ok())
        .expect("the trainer wrote a summary");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn bench_input_only_runs_no_model() {
    let (out, results, _root) = bench(&["--input-only"]);
    assert!(
        stdout(&out).contains("input only: no model ran"),
        "{}",
        stdout(&out)
    );
    let bench = read_json(&results.join("bench.json"));
    assert_eq!(bench["input_only"], true);
    for side in ["homogeneous", "heterogeneous", "hybrid"] {
        let summary = trainer_summary(&bench[side]["job_dir"]);
        assert_eq!(summary["model"], "none (input only)", "{side}: {summary}");
        assert_eq!(summary["steps"], 12, "{side}: {summary}");
        assert_eq!(summary["stall_fraction"], 1.0, "{side}: {summary}");
    }
    // Hybrid still takes batches from both sides.
    let hybrid = trainer_summary(&bench["hybrid"]["job_dir"]);
    assert!(hybrid["local_threads"].as_u64().unwrap() >= 1, "{hybrid}");
    assert!(
        hybrid["batches_by_source"]["local"].as_u64().is_some(),
        "{hybrid}"
    );
}

#[test]
fn deploy_local_of_a_job_on_aws_s_image_refuses_an_environment_without_the_toolkit() {
    let root = tempfile::tempdir().unwrap();
    let dir = new_project(root.path(), "digits", "pytorch");
    let out = hetgen(&["render"], &dir);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The bundle is made before the environment is looked at; its wheel only travels.
    let wheel = root.path().join(hetgen_render::wheel_file_name());
    std::fs::write(&wheel, "the wheel's bytes").unwrap();
    let args = ["deploy", "--local", "--wheel", wheel.to_str().unwrap()];
    let out = hetgen_command(&args, &dir)
        .env("PATH", "/usr/bin:/bin")
        .env("HETGEN_TORCH_VENV", root.path().join("no-venv"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 78, "{err}");
    assert!(
        err.contains("whose hosts start through AWS's training toolkit"),
        "{err}"
    );
    assert!(err.contains("scripts/torch-env.sh"), "{err}");
    // The image needs no hetgen of its own: each host installs the bundle's wheel.
    assert!(err.contains("hetgen is not needed"), "{err}");
    assert!(!dir.join("build/digits/local").exists(), "no host started");
}
