//! A job on AWS's PyTorch image: every host starts through the toolkit's `train` from a Python
//! environment of its own over the base environment's packages, as that image starts it (shell
//! scripts stand in for the toolkit and Python here; python/tests runs the real ones).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hetgen_local::{FrameworkRun, LocalError, RunOptions};
use hetgen_spec::Job;

use crate::{env_file, job, options, prepare, refused, run_to_completion, script};

/// The pytorch example: on AWS's image (no `image_uri`), 2 data + 2 trainer hosts.
const PYTORCH: &str = include_str!("../../../../examples/pytorch/hetgen.toml");

/// What a stand-in `train` records of its host, in `output/data`: its environment, its parent's
/// PID (the image's script), what `algo-1` resolves to and what its code folder holds.
const TRAIN: &str = r#"out="$SAGEMAKER_BASE_DIR/output/data"
mkdir -p "$out"
env > "$out/env"
echo $PPID > "$out/pid"
getent hosts algo-1 > "$out/algo-1" || true
ls -A "$SAGEMAKER_BASE_DIR/code" > "$out/code""#;

/// A base environment's `bin` in `dir`: a `train` with `body`; a `python` whose check prints
/// `missing` (`missing: …` lines) and its site folder, and which makes a venv as
/// `python -m venv --without-pip DIR` would (a copy of itself and a site folder); `torchrun`
/// only when `torchrun` is set. Its site folder holds a package and an installed hetgen.
fn environment(dir: &Path, body: &str, missing: &str, torchrun: bool) -> PathBuf {
    let bin = dir.join("env/bin");
    let site = dir.join("env/lib/python3.11/site-packages");
    for package in ["torch", "hetgen", "hetgen-0.1.0.dist-info"] {
        std::fs::create_dir_all(site.join(package)).unwrap();
    }
    std::fs::create_dir_all(&bin).unwrap();
    script(&bin, "train", body);
    script(
        &bin,
        "python",
        &format!(
            "if [ \"$1\" = -m ]; then mkdir -p \"$4/bin\" \"$4/lib/python3.11/site-packages\" \
             && cp \"$0\" \"$4/bin/python\"; exit; fi\n\
             printf '{missing}'; echo 'site: {}'",
            site.display()
        ),
    );
    script(&bin, "hetgen-launcher", "exit 1");
    if torchrun {
        script(&bin, "torchrun", "exit 0");
    }
    bin
}

/// The example in `dir` (channel folders made) and options for a run with `bin` first on the
/// caller's PATH, and a caller that exported hetgen's own job and code variables.
fn framework_job(dir: &Path, bin: &Path) -> (Job, RunOptions) {
    for channel in ["data/train", "data/test"] {
        std::fs::create_dir_all(dir.join(channel)).unwrap();
    }
    let mut opts = options(dir, Path::new("/nonexistent/launcher"));
    let path = format!(
        "{}:{}",
        bin.display(),
        opts.caller_env.get("PATH").cloned().unwrap_or_default()
    );
    opts.caller_env.insert("PATH".to_owned(), path);
    opts.caller_env
        .insert("HETGEN_JOB_FILE".to_owned(), "/caller/job.json".to_owned());
    opts.caller_env
        .insert("HETGEN_CODE_DIR".to_owned(), "/caller/code".to_owned());
    opts.framework = Some(FrameworkRun {
        bundle: dir.join("sourcedir.tar.gz"),
        hyperparameters: BTreeMap::from([
            (
                "sagemaker_program".to_owned(),
                "\"hetgen_launcher.py\"".to_owned(),
            ),
            (
                "sagemaker_submit_directory".to_owned(),
                "\"s3://example-bucket/digits/source/sourcedir.tar.gz\"".to_owned(),
            ),
        ]),
    });
    (job(PYTORCH), opts)
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn every_host_runs_the_toolkit_s_train_with_the_bundle_and_none_of_hetgen_s_own_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let bin = environment(dir.path(), TRAIN, "", true);
    let (job, opts) = framework_job(dir.path(), &bin);
    let machine_hosts = std::fs::read("/etc/hosts").ok();
    let local = prepare(&job, opts);
    run_to_completion(&local);
    assert_eq!(local.commands.len(), 4);
    // Contained hosts resolve the cluster's names; the machine's file stays as it was.
    assert_eq!(std::fs::read("/etc/hosts").ok(), machine_hosts);
    let contained = local.notes.is_empty();
    let algo_1 = local
        .layout
        .cluster
        .hosts
        .iter()
        .find(|h| h.name == "algo-1")
        .unwrap()
        .address;

    for command in &local.commands {
        let base = &command.base_dir;
        let out = base.join("output/data");
        let env = env_file(&out.join("env"));
        assert_eq!(env["SAGEMAKER_BASE_DIR"], base.display().to_string());
        assert_eq!(
            env["SAGEMAKER_TRAINING_MODULE"],
            "sagemaker_pytorch_container.training:main"
        );
        // The bundle's entry point sets these from where the toolkit unpacked it.
        assert!(!env.contains_key("HETGEN_JOB_FILE"), "{env:?}");
        assert!(!env.contains_key("HETGEN_CODE_DIR"), "{env:?}");
        for kept in [
            "HETGEN_JOB_TOKEN",
            "HETGEN_HOSTS_FILE",
            "HETGEN_RENDEZVOUS_PORT",
            "TRAINING_JOB_NAME",
            "TRAINING_JOB_ARN",
        ] {
            assert!(env.contains_key(kept), "{kept} missing: {env:?}");
        }
        // What the platform does not set is not there: the toolkit makes the `SM_*` variables
        // for the script from the files under /opt/ml.
        let platform_has_not: Vec<&String> = env
            .keys()
            .filter(|k| k.starts_with("SM_") && *k != "SM_STUDIO_LOCAL_MODE")
            .collect();
        assert!(platform_has_not.is_empty(), "{platform_has_not:?}");
        // The host's own Python environment: its `bin` first, the base's nowhere; it sees the
        // base's packages, but not hetgen's, and has the base's scripts but not hetgen's.
        let host_bin = local
            .layout
            .job_dir
            .join("image")
            .join(&command.host.name)
            .join("bin");
        assert_eq!(
            env["PATH"].split(':').next(),
            Some(host_bin.to_str().unwrap())
        );
        assert!(
            !env["PATH"].contains(bin.to_str().unwrap()),
            "{}",
            env["PATH"]
        );
        assert!(host_bin.join("train").is_file() && host_bin.join("python").is_file());
        assert!(!host_bin.join("hetgen-launcher").exists());
        let packages = local.layout.job_dir.join("image/site-packages");
        assert!(packages.join("torch").is_dir());
        assert!(
            !packages.join("hetgen").exists() && !packages.join("hetgen-0.1.0.dist-info").exists()
        );
        let pth = std::fs::read_dir(
            host_bin
                .parent()
                .unwrap()
                .join("lib/python3.11/site-packages"),
        )
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".pth"))
        .expect("a .pth names the image's packages");
        // As a site folder, so that the base's own `.pth` files there are read too.
        assert_eq!(
            std::fs::read_to_string(pth.path()).unwrap().trim(),
            format!(
                "import site; site.addsitedir({:?})",
                packages.display().to_string()
            )
        );
        // The request's hyperparameters, with the local bundle as the S3 object.
        let hps = crate::read_json(&base.join("input/config/hyperparameters.json"));
        assert_eq!(
            hps["sagemaker_submit_directory"],
            format!("\"{}\"", dir.path().join("sourcedir.tar.gz").display())
        );
        assert_eq!(hps["sagemaker_program"], "\"hetgen_launcher.py\"");
        // The toolkit unpacks only into an empty folder.
        assert_eq!(std::fs::read_to_string(out.join("code")).unwrap(), "");
        let pid = std::fs::read_to_string(out.join("pid")).unwrap();
        let resolved = std::fs::read_to_string(out.join("algo-1")).unwrap();
        if contained {
            // hetgen's start of the container is process 1, and the image's script, which
            // runs `train`, the first process it started.
            assert_eq!(pid.trim(), "2", "train's parent is process 2 of its host");
            assert!(
                resolved.starts_with(&format!("{algo_1} ")),
                "algo-1 is {resolved:?}, not {algo_1}"
            );
            assert!(!env.contains_key("SM_STUDIO_LOCAL_MODE"));
        } else {
            assert_eq!(env["SM_STUDIO_LOCAL_MODE"], "true");
        }
    }
}

#[test]
fn an_environment_without_the_toolkit_or_torchrun_is_refused_before_any_host_starts() {
    let dir = tempfile::tempdir().unwrap();
    let bin = environment(
        dir.path(),
        "exit 0",
        "missing: sagemaker-pytorch-training>=3,<4\\n",
        false,
    );
    let (job, opts) = framework_job(dir.path(), &bin);
    let err = refused(&job, opts);
    let LocalError::NoToolkit {
        environment,
        missing,
        fix,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(environment.as_deref(), bin.parent());
    assert_eq!(missing, &["`torchrun`", "sagemaker-pytorch-training>=3,<4"]);
    let message = err.to_string();
    assert!(
        message.contains("lacks `torchrun`, sagemaker-pytorch-training"),
        "{message}"
    );
    // The fix names this environment's own pip.
    assert!(
        fix.contains(&format!("{} -m pip install", bin.join("python").display())),
        "{fix}"
    );
    assert!(err.is_environment());
}

#[test]
fn a_contained_host_sees_the_cluster_s_names_in_either_kind_of_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etc-hosts");
    std::fs::write(
        &file,
        hetgen_local::framework::etc_hosts("127.9.8.7 algo-1\n"),
    )
    .unwrap();
    let check = script(
        dir.path(),
        "check",
        "[ $$ = 1 ] && getent hosts algo-1 | grep -q '^127.9.8.7 '",
    );
    let Some(unshare) = hetgen_local::framework::find_unshare("") else {
        return; // no util-linux: hosts are not contained, which the run says
    };
    let privileged = hetgen_local::framework::HostsBinding::privileged(&file);
    let user = hetgen_local::framework::HostsBinding::in_user_namespace(&file);
    assert!(user.is_user_namespace() && !privileged.is_user_namespace());
    // Whichever kinds this machine grants must give the names; the first it grants is chosen.
    let granted: Vec<bool> = [&privileged, &user]
        .iter()
        .map(|binding| {
            let works = hetgen_local::framework::contains(&unshare, binding, Path::new("true"));
            if works {
                assert!(
                    hetgen_local::framework::contains(&unshare, binding, &check),
                    "a contained host does not see algo-1 (user namespace: {})",
                    binding.is_user_namespace()
                );
            }
            works
        })
        .collect();
    let chosen = hetgen_local::framework::containment(&unshare, &file);
    match granted.iter().position(|g| *g) {
        Some(0) => assert!(!chosen.unwrap().is_user_namespace()),
        Some(_) => assert!(chosen.unwrap().is_user_namespace()),
        None => assert!(chosen.is_none()),
    }
    // Outside, nothing changed.
    let outside = std::process::Command::new("getent")
        .args(["hosts", "algo-1"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(!outside.contains("127.9.8.7"), "{outside}");
}

#[test]
fn a_script_on_its_own_image_needs_torchruns_python_to_import_hetgen() {
    // The same script on hetgen's own image: the launcher starts torchrun itself, no toolkit.
    let text = PYTORCH.replace(
        "[sagemaker]\n",
        "[sagemaker]\nimage_uri = \"123456789012.dkr.ecr.us-east-1.amazonaws.com/digits:1\"\n",
    );
    let job = job(&text);
    let dir = tempfile::tempdir().unwrap();
    for channel in ["data/train", "data/test"] {
        std::fs::create_dir_all(dir.path().join(channel)).unwrap();
    }
    std::fs::write(dir.path().join("train.py"), "import hetgen\n").unwrap();
    let bin = dir.path().join("env/bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A Python without hetgen, and a torchrun that runs scripts with it.
    let python = script(
        &bin,
        "python3",
        "echo \"ModuleNotFoundError: No module named 'hetgen'\" >&2; exit 1",
    );
    script(&bin, "torchrun", "exit 0");
    let torchrun = bin.join("torchrun");
    let body = std::fs::read_to_string(&torchrun).unwrap();
    let body = body.replacen("#!/bin/sh", &format!("#!{}", python.display()), 1);
    std::fs::write(&torchrun, body).unwrap();
    let mut opts = options(dir.path(), Path::new("/nonexistent/launcher"));
    let path = format!(
        "{}:{}",
        bin.display(),
        opts.caller_env.get("PATH").cloned().unwrap_or_default()
    );
    opts.caller_env.insert("PATH".to_owned(), path);
    let err = refused(&job, opts);
    let LocalError::NoHetgen {
        python: seen,
        detail,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(seen, &python);
    assert_eq!(detail, "ModuleNotFoundError: No module named 'hetgen'");
    assert!(err.is_environment());
    let help = miette::Diagnostic::help(&err).unwrap().to_string();
    assert!(help.contains("make wheel"), "{help}");
}

/// hetgen's start of the container (`ContainerEntrypoint`), run as the request has it, over a
/// stand-in of the image's script that runs `body`: its process and where `marker` is.
fn start_container(dir: &Path, body: &str) -> std::process::Child {
    use hetgen_spec::framework::{CONTAINER_ARGUMENTS, CONTAINER_ENTRYPOINT};
    let bin = dir.join("image-bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("start_with_right_hostname.sh"),
        format!("[ \"$1\" = train ] || exit 99\n{body}\n"),
    )
    .unwrap();
    let [program, args @ ..] = CONTAINER_ENTRYPOINT;
    std::os::unix::process::CommandExt::process_group(
        std::process::Command::new(program)
            .args(args)
            .args(CONTAINER_ARGUMENTS),
        0,
    )
    .current_dir(dir)
    .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
    .spawn()
    .unwrap()
}

#[test]
fn the_container_s_start_passes_the_image_script_s_status_on() {
    let dir = tempfile::tempdir().unwrap();
    let status = start_container(dir.path(), "exit 3").wait().unwrap();
    assert_eq!(status.code(), Some(3));
}

/// Waits until `file` exists in `dir`, at most 10 s.
fn wait_for(dir: &Path, file: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !dir.join(file).exists() {
        assert!(std::time::Instant::now() < deadline, "no {file} after 10 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// As a local run stops a host: SIGTERM to the host's process group, where only the
/// container's first process is (as `docker stop` signals it alone). Then the container's exit
/// status, within 15 s.
fn stop(mut container: std::process::Child) -> std::process::ExitStatus {
    hetgen_env::process::signal_group(container.id(), hetgen_env::process::Signal::TERM).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(status) = container.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = container.kill();
            panic!("the container did not end within 15 s of the stop");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_stop_s_sigterm_reaches_the_launcher_while_what_relays_its_output_outlives_it() {
    let dir = tempfile::tempdir().unwrap();
    // The image's script pipes a child's output through a reader of its own, as the training
    // toolkit does with the launcher's. The child takes a while to stop and says so: those
    // lines must still be read, and the container must not end before the child has.
    let body = r#"perl -e '$|=1;$SIG{TERM}=sub{print "stopping\n";sleep 1;print "stopped\n";exit 0};
print "started\n";sleep 1 while 1' | while IFS= read -r line; do echo "$line" >> relayed; done
exit 7"#;
    let container = start_container(dir.path(), body);
    wait_for(dir.path(), "relayed");
    let status = stop(container);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("relayed")).unwrap(),
        "started\nstopping\nstopped\n",
        "the child saw SIGTERM, and what it printed then was still read"
    );
    // The image's script and the reader ignored the SIGTERM: the status is the script's own.
    assert_eq!(status.code(), Some(7));
}

#[test]
fn a_stop_reaches_a_process_that_starts_after_it() {
    let dir = tempfile::tempdir().unwrap();
    // The stop comes while the image still prepares (as during the toolkit's `pip install`,
    // which ignores it); the launcher that starts afterwards must be stopped all the same.
    let body = r#"touch begun; sleep 2
exec perl -e '$SIG{TERM}=sub{open my $f,">>","child";print $f "stopped\n";exit 0};
open my $f,">","child";print $f "started\n";close $f;sleep 1 while 1'"#;
    let container = start_container(dir.path(), body);
    wait_for(dir.path(), "begun");
    let status = stop(container);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("child")).unwrap(),
        "started\nstopped\n"
    );
    assert_eq!(status.code(), Some(0));
}
