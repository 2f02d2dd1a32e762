"""The rendered SDK files send exactly the rendered CreateTrainingJob request.

Each example with a `[sagemaker]` section is rendered, and its `estimator.py` (SDK 3.x) and
`estimator_sdk2.py` (SDK 2.x) are run as a user runs them, `python estimator.py`, each with the
real SDK from its own venv (requirements/sdk3.txt, requirements/sdk2.txt), against moto's server
with request recording on. The CreateTrainingJob request moto received is compared with
`create-training-job.json` member by member. What may differ is listed below, per SDK, with the
exact value it must have; the rendered files say the same in their docstrings.

A script-mode example without `image_uri` runs on AWS's PyTorch image: `hetgen bundle` writes
its source bundle first (with the wheel `make test` built, HETGEN_WHEEL), the SDK uploads it to
moto's S3, and the test reads the uploaded archive back: the script, hetgen's entry point and
requirements, the job file and the very wheel that was built.
"""

import base64
import hashlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import tomllib

import boto3

import pytest

REPO = pathlib.Path(os.environ.get("HETGEN_REPO") or pathlib.Path(__file__).resolve().parents[2])
# moto's server, as the package's tests start it too (tests/fixtures).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fixtures"))
import hetgen_fixtures  # noqa: E402
# Single-file examples and the project examples (a folder with hetgen.toml and its script).
EXAMPLES = sorted(p for p in [*(REPO / "examples").glob("*.toml"),
                              *(REPO / "examples").glob("*/hetgen.toml")]
                  if "sagemaker" in tomllib.loads(p.read_text()))
TOKEN_VAR = "HETGEN_JOB_TOKEN"
# The files hetgen adds to a source bundle beside the user's.
BUNDLE_FILES = {"hetgen_launcher.py", "requirements.txt", "hetgen-job.json"}


def on_aws_image(spec):
    """A script without `image_uri`: the job runs on AWS's PyTorch training image."""
    return "script" in spec.get("trainer", {}) and "image_uri" not in spec["sagemaker"]


def sdk3_framework_additions(request):
    """What SDK 3.x's ModelTrainer sends for a job on AWS's image beyond the rendered request
    (estimator.py's docstring says why): its own driver, the bundle and its drivers as
    channels, only the user's hyperparameters, and no metrics time series."""
    algorithm = dict(request["AlgorithmSpecification"])
    del algorithm["EnableSageMakerMetricsTimeSeries"]
    algorithm["ContainerEntrypoint"] = ["/bin/bash"]
    algorithm["ContainerArguments"] = [
        "-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && "
        "/opt/ml/input/data/sm_drivers/sm_train.sh"]
    # ModelTrainer sends strings as they are and JSON-encodes other values.
    user = {k: v if not isinstance(json.loads(v), str) else json.loads(v)
            for k, v in request.get("HyperParameters", {}).items()
            if not k.startswith("sagemaker_")}
    return {"AlgorithmSpecification": algorithm, "HyperParameters": user}


class Sdk:
    """One SDK major: the file written for it, the venv that runs it, what it adds."""

    def __init__(self, file, python_var, name_suffix, additions):
        self.file = file
        self.python_var = python_var
        # The SDK's job-name suffix, after a prefix of the rendered name.
        self.name_suffix = name_suffix
        # (request) -> {member: value} the SDK sends beyond the rendered request.
        self.additions = additions

    def python(self):
        python = os.environ.get(self.python_var)
        if not python:
            pytest.fail(f"{self.python_var} is not set: point it at the SDK venv's python "
                        "(make test does)")
        return python


SDKS = {
    "sdk3": Sdk(
        "estimator.py", "HETGEN_SDK3_PYTHON", r"-\d{14}",
        # ModelTrainer always sends HyperParameters, empty when the job has none.
        lambda request: {} if "HyperParameters" in request else {"HyperParameters": {}}),
    "sdk2": Sdk(
        "estimator_sdk2.py", "HETGEN_SDK2_PYTHON", r"-\d{4}(-\d{2}){5}-\d{3}",
        # Estimator always sends a ProfilerConfig; disable_profiler=True makes it the API's "off".
        lambda request: {"ProfilerConfig": {"DisableProfiler": True}}),
}


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    """moto's server with request recording on: yields (url, recording file)."""
    binary = os.environ.get("HETGEN_MOTO_SERVER")
    if not binary:
        pytest.fail("HETGEN_MOTO_SERVER is not set: point it at moto's `moto_server` "
                    "(make test does)")
    recording = tmp_path_factory.mktemp("moto") / "recording.jsonl"
    recording.touch()
    env = {"MOTO_ENABLE_RECORDING": "True", "MOTO_RECORDER_FILEPATH": str(recording)}
    with hetgen_fixtures.moto_server(binary, env) as url:
        yield url, recording


def sent_requests(recording):
    """The CreateTrainingJob bodies moto recorded, in order."""
    bodies = []
    for line in recording.read_text().splitlines():
        # Only SageMaker calls are parsed: moto records uploads made in parallel (SDK 3.x
        # uploads the bundle's files on several threads) as lines that may run into each other.
        if "SageMaker.CreateTrainingJob" not in line:
            continue
        entry = json.loads(line)
        if entry["headers"].get("X-Amz-Target") != "SageMaker.CreateTrainingJob":
            continue
        body = entry["body"]
        bodies.append(json.loads(base64.b64decode(body) if entry["body_encoded"] else body))
    return bodies


def differences(got, want, path=""):
    """Every member where `got` and `want` differ, as `path: got != want`."""
    if isinstance(got, dict) and isinstance(want, dict):
        out = []
        for key in sorted(set(got) | set(want)):
            where = f"{path}.{key}" if path else key
            if key not in want:
                out.append(f"{where}: sent but not in the rendered request: {got[key]!r}")
            elif key not in got:
                out.append(f"{where}: in the rendered request but not sent: {want[key]!r}")
            else:
                out += differences(got[key], want[key], where)
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{path}[{i}]")]
    return [] if got == want and type(got) is type(want) else [f"{path}: {got!r} != {want!r}"]


def submit(sdk, job_dir, moto_url, home):
    """Runs the SDK file as a user would, with fake credentials, against moto only."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),  # no SageMaker or AWS config of the user's
        "LANG": "C.UTF-8",
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": "/nonexistent/hetgen-test/config",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/hetgen-test/credentials",
        "AWS_EC2_METADATA_DISABLED": "true",
        # SDK 3 checks the role with iam:SimulatePrincipalPolicy, which moto does not emulate.
        "SAGEMAKER_VALIDATE_ROLE": "false",
        "SAGEMAKER_SUPPRESS_V2_WARNING": "1",
    }
    run = subprocess.run([sdk.python(), sdk.file], cwd=job_dir, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, f"python {sdk.file} failed:\n{run.stdout}\n{run.stderr}"


def bundle(hetgen_bin, example, out):
    """`hetgen bundle` with the wheel the suite built."""
    wheel = os.environ.get("HETGEN_WHEEL")
    if not wheel:
        pytest.fail("HETGEN_WHEEL is not set: point it at the built hetgen wheel (make test does)")
    run = subprocess.run([hetgen_bin, "bundle", str(example), "--out", str(out), "--wheel", wheel],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"hetgen bundle failed:\n{run.stderr}"
    return pathlib.Path(wheel)


def s3(moto_url):
    return boto3.client("s3", region_name="us-east-1", endpoint_url=moto_url,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def uploaded_members(moto_url, uri):
    """The files of the gzip tar at `s3://bucket/key` in moto: {name: bytes}."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = s3(moto_url).get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read()
                for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("sdk", SDKS)
@pytest.mark.parametrize("example", EXAMPLES or [None], ids=lambda p: p.stem if p else "none")
def test_sdk_file_sends_the_rendered_request(example, sdk, moto, tmp_path, hetgen_bin):
    assert example, f"no examples/*.toml with [sagemaker] in {REPO}"
    sdk = SDKS[sdk]
    moto_url, recording = moto
    render = subprocess.run([hetgen_bin, "render", str(example), "--out", str(tmp_path / "build")],
                            capture_output=True, text=True, timeout=120)
    assert render.returncode == 0, f"hetgen render failed:\n{render.stderr}"
    [job_dir] = (tmp_path / "build").iterdir()
    want = json.loads((job_dir / "create-training-job.json").read_text())
    spec = tomllib.loads(example.read_text())
    fixed_name = spec["job"].get("fixed_name", False)
    framework = on_aws_image(spec)
    if framework:
        wheel = bundle(hetgen_bin, example, tmp_path / "build")
        bucket = json.loads(want["HyperParameters"]["sagemaker_submit_directory"])
        s3(moto_url).create_bucket(Bucket=bucket.removeprefix("s3://").split("/")[0])

    recording.write_text("")
    (tmp_path / "home").mkdir()
    submit(sdk, job_dir, moto_url, tmp_path / "home")
    [got] = sent_requests(recording)

    # The job token: fresh, 64 hex digits, and the only variable added to Environment.
    token = got.get("Environment", {}).pop(TOKEN_VAR, "")
    assert re.fullmatch(r"[0-9a-f]{64}", token), f"{TOKEN_VAR}={token!r}"
    if got.get("Environment") == {} and "Environment" not in want:
        del got["Environment"]

    # The job name: the rendered one, or a prefix of it followed by the SDK's suffix.
    name, wanted = got.pop("TrainingJobName"), want.pop("TrainingJobName")
    if fixed_name and sdk.file == "estimator_sdk2.py":
        assert name == wanted
    else:
        match = re.fullmatch(r"(.+)" + sdk.name_suffix, name)
        assert match and wanted.startswith(match[1]) and len(name) <= 63, name

    if framework and sdk.file == "estimator_sdk2.py":
        # The SDK names the job, then writes that name into the script-mode hyperparameters
        # and uploads the bundle under it, as `hetgen deploy` does.
        hps = got["HyperParameters"]
        assert json.loads(hps["sagemaker_job_name"]) == name
        submitted = json.loads(hps["sagemaker_submit_directory"])
        assert submitted == json.loads(want["HyperParameters"]["sagemaker_submit_directory"]) \
            .replace(f"/{wanted}/source/", f"/{name}/source/")
        hps["sagemaker_job_name"] = want["HyperParameters"]["sagemaker_job_name"]
        hps["sagemaker_submit_directory"] = want["HyperParameters"]["sagemaker_submit_directory"]
        check_bundle(uploaded_members(moto_url, submitted), example, wheel)
    if framework and sdk.file == "estimator.py":
        channels = got["InputDataConfig"][-2:]
        assert [c["ChannelName"] for c in channels] == ["code", "sm_drivers"]
        del got["InputDataConfig"][-2:]
        want.update(sdk3_framework_additions(want))
        if not want["HyperParameters"]:
            del want["HyperParameters"]

    # Checkpoints go under `checkpoint_uri` and a name of the job's own, as with `hetgen
    # deploy`: SDK 2.x's file names the job itself; SDK 3.x's ModelTrainer names it only when it
    # submits it, so its file gives the location a name of the submission's own.
    if "CheckpointConfig" in want:
        uri = got["CheckpointConfig"]["S3Uri"]
        prefix = want["CheckpointConfig"]["S3Uri"].removesuffix(f"{wanted}/")
        if sdk.file == "estimator_sdk2.py":
            assert uri == f"{prefix}{name}/", uri
        else:
            own = re.escape(prefix + wanted) + r"-\d{8}-\d{6}-[0-9a-f]{4}/"
            assert re.fullmatch(own, uri), uri
        got["CheckpointConfig"]["S3Uri"] = want["CheckpointConfig"]["S3Uri"]

    additions = sdk.additions(want)
    for member, value in additions.items():
        assert got.pop(member, None) == value, f"{member} should be {value!r}"
    assert differences(got, want) == []


def check_bundle(members, example, wheel):
    """The uploaded bundle holds the user's script, hetgen's files and the built wheel."""
    spec = tomllib.loads(example.read_text())
    script = spec["trainer"]["script"]
    assert script in members, sorted(members)
    source = example.parent / spec["trainer"].get("source_dir", ".")
    assert members[script] == (source / script).read_bytes()
    assert BUNDLE_FILES <= set(members), sorted(members)
    assert members[wheel.name] and \
        hashlib.sha256(members[wheel.name]).digest() == hashlib.sha256(wheel.read_bytes()).digest()
    assert f"./{wheel.name}" in members["requirements.txt"].decode().splitlines()
    assert not any(m.startswith(("build/", ".")) for m in members), sorted(members)


def test_differences_name_each_member():
    want = {"A": {"B": [1, {"C": "x"}]}, "D": True}
    got = {"A": {"B": [1, {"C": "y"}]}, "D": 1, "E": 2}
    assert differences(got, want) == [
        "A.B[1].C: 'y' != 'x'",
        "D: 1 != True",
        "E: sent but not in the rendered request: 2",
    ]
