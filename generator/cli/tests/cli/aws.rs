//! `hetgen deploy`, `status`, `stop` and `list` against moto's SageMaker emulator and a scripted
//! endpoint. Nothing here reaches AWS: every endpoint is on 127.0.0.1 and the credentials are
//! fake.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::fixture::Fixture;
use super::{assert_contains, code, hetgen_command, project_with, repo, stderr, stdout, succeeded};

/// moto's server, started for one test and killed when dropped.
pub struct Moto {
    child: Child,
    pub url: String,
}

impl Moto {
    pub fn start() -> Moto {
        let binary = std::env::var("HETGEN_MOTO_SERVER")
            .expect("set HETGEN_MOTO_SERVER to moto's `moto_server` (make test does)");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        // Readiness: the port accepts connections (bounded: 30 s).
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Moto {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `hetgen` with fake credentials and no access to the user's AWS configuration.
pub fn aws_command(args: &[&str], cwd: &Path, credentials: bool) -> Command {
    let mut cmd = hetgen_command(args, cwd);
    cmd.env("AWS_CONFIG_FILE", "/nonexistent/hetgen-test/config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/hetgen-test/credentials",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_SESSION_TOKEN");
    if credentials {
        cmd.env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing");
    } else {
        cmd.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY");
    }
    cmd
}

/// [`aws_command`], run to its end.
pub fn aws(args: &[&str], cwd: &Path, credentials: bool) -> Output {
    aws_command(args, cwd, credentials).output().unwrap()
}

/// `args` sent to `endpoint`, in us-east-1: how the job commands reach the emulators.
fn at_endpoint<'a>(args: &[&'a str], endpoint: &'a str) -> Vec<&'a str> {
    [args, &["--endpoint-url", endpoint, "--region", "us-east-1"]].concat()
}

/// `hetgen args` from the repository (the job commands read no project) against `endpoint`.
pub fn job_command(args: &[&str], endpoint: &str, credentials: bool) -> Output {
    aws(&at_endpoint(args, endpoint), &repo(), credentials)
}

/// `hetgen deploy` (and `extra`) of `project` to `endpoint`, with credentials.
fn deploy(endpoint: &str, project: &Path, extra: &[&str]) -> Output {
    let args = [&["deploy", "--endpoint-url", endpoint], extra].concat();
    aws(&args, project, true)
}

/// A project folder holding `example` as hetgen.toml, rendered into `build/`.
pub fn rendered_project(example: &str) -> tempfile::TempDir {
    let dir = project_with(example);
    let out = aws(&["render"], dir.path(), true);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    dir
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a test reads as one scenario, top to bottom"
)]
fn every_example_deploys_to_moto_with_its_groups_and_channels() {
    let moto = Moto::start();
    let mut names = Vec::new();
    for example in [
        "mnist-hetero.toml",
        "mnist-homogeneous.toml",
        "resnet50-p4d.toml",
    ] {
        let project = rendered_project(example);
        let out = deploy(&moto.url, project.path(), &[]);
        assert_eq!(code(&out), 0, "{example}: {}", stderr(&out));
        assert!(
            stdout(&out).starts_with("arn:aws:sagemaker:us-east-1:"),
            "{}",
            stdout(&out)
        );
        let base = example.trim_end_matches(".toml");
        let name = stderr(&out)
            .split('`')
            .nth(1)
            .expect("the job name is printed")
            .to_owned();
        assert!(
            name.starts_with(&format!("{base}-")) && name.len() == base.len() + 21,
            "{name}"
        );

        let status = aws(
            &at_endpoint(&["status", &name, "--format", "json"], &moto.url),
            project.path(),
            true,
        );
        assert_eq!(code(&status), 0, "{}", stderr(&status));
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let request: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                project
                    .path()
                    .join(format!("build/{base}/create-training-job.json")),
            )
            .unwrap(),
        )
        .unwrap();
        let rendered_groups: Vec<_> = request["ResourceConfig"]["InstanceGroups"]
            .as_array()
            .map(|groups| {
                groups
                    .iter()
                    .map(|g| {
                        (
                            g["InstanceGroupName"].clone(),
                            g["InstanceType"].clone(),
                            g["InstanceCount"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_else(|| {
                vec![(
                    "homogeneousCluster".into(),
                    request["ResourceConfig"]["InstanceType"].clone(),
                    request["ResourceConfig"]["InstanceCount"].clone(),
                )]
            });
        let described: Vec<_> = status["instance_groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g["name"].clone(),
                    g["instance_type"].clone(),
                    g["count"].clone(),
                )
            })
            .collect();
        assert_eq!(described, rendered_groups, "{example}");
        for (i, channel) in request["InputDataConfig"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
        {
            let s3 = &channel["DataSource"]["S3DataSource"];
            assert_eq!(status["channels"][i]["name"], channel["ChannelName"]);
            assert_eq!(status["channels"][i]["uri"], s3["S3Uri"]);
            let groups = s3
                .get("InstanceGroupNames")
                .cloned()
                .unwrap_or(serde_json::json!([]));
            assert_eq!(
                status["channels"][i]["instance_groups"], groups,
                "{example}"
            );
        }
        names.push(name);
    }

    let listed = job_command(&["list", "--format", "json"], &moto.url, true);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    for name in &names {
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j["name"] == name.as_str()),
            "{name} not listed: {listed}"
        );
    }
}

#[test]
fn unknown_job_is_a_clear_error() {
    let moto = Moto::start();
    for command in ["status", "logs"] {
        let out = job_command(&[command, "no-such-job"], &moto.url, true);
        assert_eq!(code(&out), 1, "{command}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("no training job named `no-such-job`"),
            "{command}: {}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("panicked"));
    }
}

#[test]
fn missing_credentials_exit_78() {
    let fixture = Fixture::start(&[("InProgress", "Starting", None)]);
    let out = job_command(&["status", "some-job"], &fixture.url, false);
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert_contains(&stderr(&out), "no AWS credentials found");
    assert!(
        fixture.calls().is_empty(),
        "nothing is sent without credentials"
    );
}

#[test]
fn deploy_refuses_stale_or_missing_renders() {
    let dir = project_with("mnist-hetero.toml");
    let out = aws(&["deploy", "--dry-run"], dir.path(), true);
    assert_eq!(code(&out), 1);
    assert_contains(&stderr(&out), "run `hetgen render`");
}

#[test]
fn dry_run_prints_the_request_with_a_unique_or_fixed_name() {
    let project = rendered_project("mnist-hetero.toml");
    let out = aws(&["deploy", "--dry-run"], project.path(), false);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let request: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name = request["TrainingJobName"].as_str().unwrap();
    assert!(
        name.starts_with("mnist-hetero-2") && name.len() == "mnist-hetero".len() + 21,
        "{name}"
    );
    assert_eq!(
        request["ResourceConfig"]["InstanceGroups"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let out = aws(
        &["deploy", "--dry-run", "--name", "exact-name"],
        project.path(),
        false,
    );
    let request: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(request["TrainingJobName"], "exact-name");
    assert_eq!(
        code(&aws(
            &["deploy", "--dry-run", "--name", "bad_name"],
            project.path(),
            false
        )),
        1
    );
}

#[test]
fn wait_follows_transitions_to_completed() {
    let fixture = Fixture::start(&[
        ("InProgress", "Starting", None),
        ("InProgress", "Starting", None),
        ("InProgress", "Training", None),
        ("Completed", "Completed", None),
    ]);
    let project = rendered_project("mnist-hetero.toml");
    let out = deploy(
        &fixture.url,
        project.path(),
        &["--wait", "--poll-interval", "0.05"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let starting = err.find("InProgress · Starting").expect(&err);
    let training = err.find("InProgress · Training").expect(&err);
    let completed = err.find("Completed · Completed").expect(&err);
    assert!(starting < training && training < completed, "{err}");
    assert_eq!(
        err.matches("InProgress · Starting").count(),
        1,
        "a state is shown once: {err}"
    );
    let calls = fixture.calls();
    assert_eq!(calls[0], "CreateTrainingJob");
    assert_eq!(
        calls.iter().filter(|c| *c == "DescribeTrainingJob").count(),
        4
    );
}

#[test]
fn a_bad_poll_interval_is_refused_before_the_job_is_submitted() {
    // `--poll-interval inf` once panicked after CreateTrainingJob had gone out.
    let fixture = Fixture::start(&[("Completed", "Completed", None)]);
    let project = rendered_project("mnist-hetero.toml");
    for bad in ["inf", "nan", "-1", "1e400", "0"] {
        let interval = format!("--poll-interval={bad}");
        let out = deploy(&fixture.url, project.path(), &["--wait", &interval]);
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert_contains(&stderr(&out), "--poll-interval");
        assert!(out.stdout.is_empty(), "no ARN: nothing was submitted");
    }
    assert_eq!(fixture.calls(), Vec::<String>::new());
}

#[test]
fn wait_on_a_failed_job_exits_non_zero_with_the_reason() {
    let fixture = Fixture::start(&[
        ("InProgress", "Starting", None),
        ("Failed", "Failed", Some("AlgorithmError: exit 1")),
    ]);
    let project = rendered_project("mnist-hetero.toml");
    let out = deploy(
        &fixture.url,
        project.path(),
        &["--wait", "--poll-interval", "0.05"],
    );
    assert_eq!(code(&out), 1);
    assert_contains(&stderr(&out), "ended Failed: AlgorithmError: exit 1");
}

#[test]
fn stop_sends_stop_training_job() {
    let fixture = Fixture::start(&[("Stopping", "Stopping", None)]);
    let out = job_command(&["stop", "fixture-job"], &fixture.url, true);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fixture.calls(), ["StopTrainingJob"]);
}

#[test]
fn service_errors_read_as_what_to_do() {
    let project = rendered_project("mnist-hetero.toml");

    let taken = Fixture::with_create_errors(&[], &[("ResourceInUse", "Job name already in use")]);
    let out = deploy(&taken.url, project.path(), &[]);
    assert_eq!(code(&out), 1);
    assert_contains(&stderr(&out), "already exists");

    let denied = Fixture::with_create_errors(
        &[],
        &[(
            "AccessDeniedException",
            "not authorized to perform sagemaker:CreateTrainingJob",
        )],
    );
    let out = deploy(&denied.url, project.path(), &[]);
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert_contains(&stderr(&out), "access denied: not authorized");

    let quota = Fixture::with_create_errors(
        &[],
        &[("ResourceLimitExceeded", "quota for ml.p3.2xlarge is 0")],
    );
    let out = deploy(&quota.url, project.path(), &[]);
    assert_eq!(code(&out), 1);
    assert_contains(
        &stderr(&out),
        "resource limit exceeded: quota for ml.p3.2xlarge is 0",
    );

    let invalid = Fixture::with_create_errors(
        &[],
        &[("ValidationException", "1 validation error detected")],
    );
    let out = deploy(&invalid.url, project.path(), &[]);
    assert_contains(
        &stderr(&out),
        "SageMaker rejected the request: 1 validation error detected",
    );
}

#[test]
fn throttling_is_retried_with_backoff() {
    let fixture = Fixture::with_create_errors(
        &[],
        &[
            ("ThrottlingException", "Rate exceeded"),
            ("ThrottlingException", "Rate exceeded"),
        ],
    );
    let project = rendered_project("mnist-hetero.toml");
    let out = deploy(&fixture.url, project.path(), &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fixture.calls(), ["CreateTrainingJob"; 3]);
}

/// The job token reaches every instance through the request's Environment, fresh per
/// submission, and never sits in a rendered file.
#[test]
fn each_submission_carries_a_fresh_job_token() {
    let project = rendered_project("mnist-hetero.toml");
    let token = |out: &Output| -> String {
        assert_eq!(code(out), 0, "{}", stderr(out));
        let request: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        request["Environment"]["HETGEN_JOB_TOKEN"]
            .as_str()
            .expect("a token")
            .to_owned()
    };
    let a = token(&aws(&["deploy", "--dry-run"], project.path(), false));
    let b = token(&aws(&["deploy", "--dry-run"], project.path(), false));
    assert!(
        a.len() == 64 && a.bytes().all(|c| c.is_ascii_hexdigit()),
        "{a}"
    );
    assert_ne!(a, b);
    let rendered = std::fs::read_to_string(
        project
            .path()
            .join("build/mnist-hetero/create-training-job.json"),
    )
    .unwrap();
    assert!(!rendered.contains("HETGEN_JOB_TOKEN"));
}

/// Runs `code` with boto3 from moto's own venv (beside `moto_server`) against `moto`, with
/// `URL` bound to its endpoint; returns its stdout.
fn boto3(moto: &Moto, code: &str) -> String {
    let server = std::path::PathBuf::from(std::env::var("HETGEN_MOTO_SERVER").unwrap());
    let python = server.parent().unwrap().join("python");
    let out = Command::new(python)
        .arg("-c")
        .arg(format!(
            "import boto3, io, json, tarfile\nURL = {:?}\n\
             s3 = boto3.client('s3', region_name='us-east-1', endpoint_url=URL, \
             aws_access_key_id='testing', aws_secret_access_key='testing')\n{code}",
            moto.url
        ))
        .output()
        .unwrap();
    succeeded(&out)
}

/// The pytorch example without `image_uri` (on AWS's PyTorch image), rendered, and a stand-in
/// for the wheel: the upload moves bytes, python/tests installs the real wheel.
fn framework_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let example = repo().join("examples/pytorch");
    let spec: String = std::fs::read_to_string(example.join("hetgen.toml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("image_uri"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.path().join("hetgen.toml"), spec).unwrap();
    std::fs::copy(example.join("train.py"), dir.path().join("train.py")).unwrap();
    let out = aws(&["render"], dir.path(), true);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let wheels = tempfile::tempdir().unwrap().keep();
    let wheel = wheels.join(hetgen_render::wheel_file_name());
    std::fs::write(&wheel, "the wheel's bytes").unwrap();
    (dir, wheel)
}

/// `hetgen deploy` of the project against moto, shipping `wheel`.
fn deploy_with_wheel(moto: &Moto, project: &Path, wheel: &Path) -> Output {
    deploy(&moto.url, project, &["--wheel", wheel.to_str().unwrap()])
}

#[test]
fn a_job_on_aws_s_image_uploads_its_bundle_then_submits() {
    let moto = Moto::start();
    let (project, wheel) = framework_project();
    boto3(&moto, "s3.create_bucket(Bucket='example-bucket')");
    let out = deploy_with_wheel(&moto, project.path(), &wheel);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let name = stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("submitted training job `"))
        .and_then(|l| l.split('`').next())
        .expect("the job name is printed")
        .to_owned();
    let key = format!("{name}/source/sourcedir.tar.gz");
    let members = boto3(
        &moto,
        &format!(
            "body = s3.get_object(Bucket='example-bucket', Key={key:?})['Body'].read()\n\
             tar = tarfile.open(fileobj=io.BytesIO(body), mode='r:gz')\n\
             print(json.dumps({{m.name: tar.extractfile(m).read().decode() for m in tar}}))"
        ),
    );
    let members: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&members).unwrap();
    for file in [
        "train.py",
        "hetgen_launcher.py",
        "requirements.txt",
        "hetgen-job.json",
    ] {
        assert!(members.contains_key(file), "{file}: {:?}", members.keys());
    }
    assert_eq!(
        members[&hetgen_render::wheel_file_name()],
        "the wheel's bytes"
    );
    // A gzip file as such, not a tar that HTTP clients should unpack on the way.
    let head = boto3(
        &moto,
        &format!(
            "h = s3.head_object(Bucket='example-bucket', Key={key:?})\n\
             print(h['ContentType'], h.get('ContentEncoding'))"
        ),
    );
    assert_eq!(head.trim(), "application/gzip None");

    // The job that was submitted downloads exactly that object, under its own name.
    let described = boto3(
        &moto,
        &format!(
            "sm = boto3.client('sagemaker', region_name='us-east-1', endpoint_url=URL, \
             aws_access_key_id='testing', aws_secret_access_key='testing')\n\
             print(json.dumps(sm.describe_training_job(TrainingJobName={name:?})['HyperParameters']))"
        ),
    );
    let hps: serde_json::Value = serde_json::from_str(&described).unwrap();
    assert_eq!(
        hps["sagemaker_submit_directory"],
        format!("\"s3://example-bucket/{key}\"")
    );
    assert_eq!(hps["sagemaker_job_name"], format!("\"{name}\""));
}

#[test]
fn a_failed_upload_submits_nothing() {
    let moto = Moto::start();
    let (project, wheel) = framework_project();
    // No bucket.
    let out = deploy_with_wheel(&moto, project.path(), &wheel);
    assert_eq!(code(&out), 78, "{}", stderr(&out));
    assert_contains(&stderr(&out), "no S3 bucket `example-bucket`");
    assert!(!stderr(&out).contains("submitted"), "{}", stderr(&out));
    let jobs = boto3(
        &moto,
        "sm = boto3.client('sagemaker', region_name='us-east-1', endpoint_url=URL, \
         aws_access_key_id='testing', aws_secret_access_key='testing')\n\
         print(len(sm.list_training_jobs()['TrainingJobSummaries']))",
    );
    assert_eq!(jobs.trim(), "0");

    // Without a wheel there is no bundle, and nothing is sent at all.
    let out = deploy_with_wheel(&moto, project.path(), Path::new("/nonexistent/x.whl"));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_contains(&stderr(&out), "no hetgen wheel at /nonexistent/x.whl");
}

/// `hetgen bundle` as `deploy` sources its wheel: `--wheel`, else `HETGEN_WHEEL`, else the
/// target folder's `wheels/` beside this hetgen.
fn bundle(project: &Path, wheel_flag: Option<&Path>, wheel_env: Option<&Path>) -> Output {
    let mut cmd = hetgen_command(&["bundle"], project);
    cmd.env_remove("HETGEN_WHEEL");
    if let Some(wheel) = wheel_flag {
        cmd.arg("--wheel").arg(wheel);
    }
    if let Some(wheel) = wheel_env {
        cmd.env("HETGEN_WHEEL", wheel);
    }
    cmd.output().unwrap()
}

#[test]
fn bundle_writes_the_archive_and_its_folder_with_the_wheel_it_finds() {
    let (project, wheel) = framework_project();
    let out = bundle(project.path(), Some(&wheel), None);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The archive's path alone on stdout, for scripts.
    assert_eq!(stdout(&out), "build/pytorch-digits/sourcedir.tar.gz\n");
    assert!(
        stderr(&out).starts_with("bundled `pytorch-digits`: "),
        "{}",
        stderr(&out)
    );
    let job = project.path().join("build/pytorch-digits");
    let archive = std::fs::read(job.join("sourcedir.tar.gz")).unwrap();
    assert_eq!(&archive[..2], b"\x1f\x8b", "a gzip file");
    let folder = job.join("sourcedir");
    for file in [
        "train.py",
        "hetgen_launcher.py",
        "requirements.txt",
        "hetgen-job.json",
    ] {
        assert!(folder.join(file).is_file(), "{file}");
    }
    let shipped = folder.join(hetgen_render::wheel_file_name());
    assert_eq!(std::fs::read(&shipped).unwrap(), b"the wheel's bytes");

    // The same wheel through the environment gives the same bytes.
    let out = bundle(project.path(), None, Some(&wheel));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        std::fs::read(job.join("sourcedir.tar.gz")).unwrap(),
        archive
    );

    // Else the one the project's build leaves beside this hetgen, if it is there: the release
    // build (`scripts/wheel.sh --release`) before the debug one (`make wheel`).
    let target = Path::new(env!("CARGO_BIN_EXE_hetgen"))
        .parent()
        .and_then(Path::parent)
        .unwrap();
    let name = hetgen_render::wheel_file_name();
    let release = target.join("wheels-release").join(&name);
    let beside = if release.is_file() {
        release
    } else {
        target.join("wheels").join(&name)
    };
    let out = bundle(project.path(), None, None);
    if beside.is_file() {
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(
            std::fs::read(&shipped).unwrap(),
            std::fs::read(&beside).unwrap()
        );
    } else {
        assert_eq!(code(&out), 1, "{}", stderr(&out));
        // The long path may wrap on the terminal's width.
        let squeezed: String = stderr(&out).split_whitespace().collect();
        assert!(
            squeezed.contains(&format!("nohetgenwheelat{}", beside.display())),
            "{}",
            stderr(&out)
        );
        assert_contains(&stderr(&out), "make wheel");
    }
}

#[test]
fn bundle_refuses_a_job_that_has_no_bundle_before_asking_for_a_render() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = Path::new("/nonexistent").join(hetgen_render::wheel_file_name());
    for (example, why) in [
        ("mnist-hetero.toml", "runs on its own image (`image_uri`)"),
        ("tiny-local.toml", "has no `[sagemaker]` section"),
    ] {
        std::fs::copy(
            repo().join("examples").join(example),
            dir.path().join("hetgen.toml"),
        )
        .unwrap();
        // Never rendered: the refusal comes first.
        let out = bundle(dir.path(), Some(&wheel), None);
        assert_eq!(code(&out), 1, "{}", stderr(&out));
        assert!(stderr(&out).contains(why), "{example}: {}", stderr(&out));
        assert!(!stderr(&out).contains("stale"), "{}", stderr(&out));
        assert!(!dir.path().join("build").exists());
    }
}

#[test]
fn the_upload_and_the_submission_share_one_credential_chain() {
    let moto = Moto::start();
    let (project, wheel) = framework_project();
    boto3(&moto, "s3.create_bucket(Bucket='example-bucket')");
    // A profile whose credentials come from a process that counts its calls: S3 and SageMaker
    // get them from the same chain, resolved once for both.
    let calls = project.path().join("credential-calls");
    let process = project.path().join("credentials.sh");
    std::fs::write(
        &process,
        format!(
            "#!/bin/sh\necho call >> '{}'\n\
             echo '{{\"Version\": 1, \"AccessKeyId\": \"testing\", \"SecretAccessKey\": \"testing\"}}'\n",
            calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &process,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = project.path().join("aws-config");
    std::fs::write(
        &config,
        format!(
            "[profile counted]\ncredential_process = {}\n",
            process.display()
        ),
    )
    .unwrap();
    // No credentials of its own: only the profile's process gives any.
    let args = [
        "deploy",
        "--profile",
        "counted",
        "--endpoint-url",
        &moto.url,
    ];
    let out = aws_command(&args, project.path(), false)
        .arg("--wheel")
        .arg(&wheel)
        .env("AWS_CONFIG_FILE", &config)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_contains(&stderr(&out), "uploaded the source bundle");
    // One call up front (so that a missing credential is reported as such, before any
    // request) and one that both clients' requests share.
    let calls = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(calls.lines().count(), 2, "{calls}");
}

/// The name `hetgen deploy` printed for the job it submitted.
fn submitted_name(out: &Output) -> String {
    stderr(out)
        .lines()
        .find_map(|l| l.strip_prefix("submitted training job `"))
        .and_then(|l| l.split('`').next())
        .expect("the job name is printed")
        .to_owned()
}

#[test]
fn each_job_keeps_its_checkpoints_apart_and_resume_from_continues_an_earlier_one() {
    let moto = Moto::start();
    let (project, wheel) = framework_project();
    boto3(&moto, "s3.create_bucket(Bucket='example-bucket')");
    let checkpoints = |name: &str| {
        boto3(
            &moto,
            &format!(
                "sm = boto3.client('sagemaker', region_name='us-east-1', endpoint_url=URL, \
                 aws_access_key_id='testing', aws_secret_access_key='testing')\n\
                 print(sm.describe_training_job(TrainingJobName={name:?})\
                 ['CheckpointConfig']['S3Uri'])"
            ),
        )
        .trim()
        .to_owned()
    };
    let prefix = "s3://example-bucket/checkpoints";
    let first = deploy_with_wheel(&moto, project.path(), &wheel);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let second = deploy_with_wheel(&moto, project.path(), &wheel);
    assert_eq!(code(&second), 0, "{}", stderr(&second));
    let (first, second) = (submitted_name(&first), submitted_name(&second));
    assert_ne!(first, second);
    assert_eq!(checkpoints(&first), format!("{prefix}/{first}/"));
    assert_eq!(checkpoints(&second), format!("{prefix}/{second}/"));

    // A third job continues the first: its checkpoints, and says so.
    let args = ["--wheel", wheel.to_str().unwrap(), "--resume-from", &first];
    let third = deploy(&moto.url, project.path(), &args);
    assert_eq!(code(&third), 0, "{}", stderr(&third));
    assert_contains(
        &stderr(&third),
        &format!(
            "continuing `{first}` (Completed): starting from its checkpoints in {prefix}/{first}/"
        ),
    );
    assert_eq!(
        checkpoints(&submitted_name(&third)),
        format!("{prefix}/{first}/")
    );

    // A job that does not exist is no start, nor is a job of another spec's `[job] name`
    // (its checkpoints are another model's); nothing is submitted either time.
    let submitted = || {
        let jobs = boto3(
            &moto,
            "sm = boto3.client('sagemaker', region_name='us-east-1', endpoint_url=URL, \
             aws_access_key_id='testing', aws_secret_access_key='testing')\n\
             print(len(sm.list_training_jobs()['TrainingJobSummaries']))",
        );
        jobs.trim().parse::<usize>().unwrap()
    };
    let before = submitted();
    let other = rendered_project("mnist-hetero.toml");
    let other = deploy(&moto.url, other.path(), &[]);
    assert_eq!(code(&other), 0, "{}", stderr(&other));
    let other = submitted_name(&other);
    for (earlier, why) in [
        (
            "no-such-job",
            "there is no training job of that name in us-east-1",
        ),
        (
            other.as_str(),
            "it trained `mnist-hetero`, not this spec's `pytorch-digits`",
        ),
    ] {
        let args = ["--wheel", wheel.to_str().unwrap(), "--resume-from", earlier];
        let refused = deploy(&moto.url, project.path(), &args);
        assert_eq!(code(&refused), 1, "{}", stderr(&refused));
        // The message as one line, however the report wraps it.
        let err = stderr(&refused).replace("\n  │ ", " ");
        assert_contains(&err, &format!("cannot continue `{earlier}`: {why}"));
        assert_contains(&err, "hetgen::deploy::resume-from");
    }
    assert_eq!(
        submitted(),
        before + 1,
        "only the other spec's job was submitted"
    );
}

#[test]
fn resume_from_refuses_a_job_still_running() {
    // Both jobs would sync one location, each writing over the other's checkpoints.
    let fixture = Fixture::start(&[("InProgress", "Training", None)]);
    let project = rendered_project("mnist-hetero.toml");
    let out = deploy(
        &fixture.url,
        project.path(),
        &["--resume-from", "fixture-job"],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_contains(
        &stderr(&out),
        "cannot continue `fixture-job`: it is still InProgress",
    );
    assert_contains(&stderr(&out), "hetgen stop fixture-job");
    assert_eq!(fixture.calls(), ["DescribeTrainingJob"]);
}
