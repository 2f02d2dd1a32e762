"""The whole of hetgen from one `pip install`: the wheel's `hetgen` command, with no checkout,
no Rust toolchain and none of the project's caches, scaffolds, renders and runs the pytorch
example through AWS's training toolkit, and deploys it to an S3 and SageMaker emulator (moto's
server) with that same wheel in the uploaded bundle.

The wheel is the one `make wheel` built (HETGEN_WHEEL), installed into a new venv (conftest's
`installed`); the local
run's image stands on this interpreter's environment (PyTorch and AWS's toolkit), whose own
hetgen the hosts never see: each host's toolkit installs the bundle's wheel.
"""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import hetgen_fixtures

REGION = "us-east-1"


def user_env(installed: Path, home: Path, **more: str) -> dict:
    """A user's shell with the wheel's venv first on PATH, then an environment with PyTorch and
    AWS's toolkit (what `deploy --local` stands the image on), then the system: no cargo, no
    rustc, no hetgen variables, and a HOME without hetgen's caches."""
    home.mkdir(exist_ok=True)
    path = os.pathsep.join([str(installed), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=path) is None, f"{tool} is on the user's PATH"
    assert shutil.which("hetgen", path=path) == str(installed / "hetgen")
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", **more}


def hetgen(env: dict, *args: str, cwd: Path, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(["hetgen", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def project(env: dict, tmp_path: Path) -> Path:
    new = hetgen(env, "new", "digits", "--example", "pytorch", cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    root = tmp_path / "digits"
    render = hetgen(env, "render", cwd=root)
    assert render.returncode == 0, render.stderr
    return root


def run_dir(root: Path) -> Path:
    [run] = (root / "build" / "digits" / "local").iterdir()
    return run


def wheel_files(data: bytes) -> dict:
    """{name: sha256} of a wheel's files, less its RECORD and the `hetgen` command (which a
    bundle's wheel leaves out: no host runs it)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: hashlib.sha256(z.read(n)).hexdigest() for n in z.namelist()
                if not n.endswith((".dist-info/RECORD", ".data/scripts/hetgen"))}


def test_the_wheel_alone_runs_the_pytorch_example_through_aws_toolkit(installed, wheel,
                                                                      tmp_path):
    env = user_env(installed, tmp_path / "home")
    root = project(env, tmp_path)
    run = hetgen(env, "deploy", "--local", cwd=root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Completed" in run.stdout + run.stderr
    record = json.loads((run_dir(root) / "job-record.json").read_text())
    assert record["status"] == "Completed", record
    # Every host's toolkit installed the bundle's wheel into that host's own Python, whose
    # native module is the very file of the wheel installed above.
    bundle_wheel = root / "build" / "digits" / "sourcedir" / wheel.name
    assert wheel_files(bundle_wheel.read_bytes()) == wheel_files(wheel.read_bytes())
    native = next(installed.parent.glob("lib/python3*/site-packages/hetgen/_native*.so"))
    for host in record["hosts"]:
        log = (run_dir(root) / "hosts" / host["name"] / "output" / "log.txt").read_text()
        assert f"Processing ./{wheel.name}" in log, host["name"]
        assert "Successfully installed hetgen-" in log, host["name"]
        [host_native] = (run_dir(root) / "image" / host["name"]).glob(
            "lib/python3*/site-packages/hetgen/_native*.so")
        assert host_native.read_bytes() == native.read_bytes()


def test_a_broken_wheel_fails_the_local_job_as_sagemaker_would(installed, wheel, tmp_path):
    env = user_env(installed, tmp_path / "home")
    root = project(env, tmp_path)
    # The wheel without its native module: it installs, and `import hetgen` then fails.
    broken = tmp_path / "broken" / wheel.name
    broken.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if "/_native" not in item.filename:
                dst.writestr(item, src.read(item.filename))
    run = hetgen(env, "deploy", "--local", "--wheel", str(broken), cwd=root, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "Failed" in out, out[-3000:]
    assert "_native" in out and "Error" in out, out[-3000:]


@pytest.fixture(scope="module")
def moto():
    """moto's server (S3 and SageMaker): yields its URL."""
    binary = os.environ.get("HETGEN_MOTO_SERVER")
    if not binary:
        pytest.fail("HETGEN_MOTO_SERVER is not set: point it at moto's `moto_server` "
                    "(make test does)")
    with hetgen_fixtures.moto_server(binary) as url:
        yield url


def test_the_wheel_alone_deploys_a_bundle_holding_that_same_wheel(installed, wheel, moto,
                                                                  tmp_path):
    import boto3

    aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": REGION, "AWS_ENDPOINT_URL": moto}
    env = user_env(installed, tmp_path / "home", **aws)
    root = project(env, tmp_path)
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.create_bucket(Bucket="example-bucket")
    deploy = hetgen(env, "deploy", "--region", REGION, cwd=root, timeout=120)
    assert deploy.returncode == 0, deploy.stderr
    uploads = [o["Key"] for o in s3.list_objects_v2(Bucket="example-bucket")["Contents"]
               if o["Key"].endswith("sourcedir.tar.gz")]
    assert len(uploads) == 1, uploads
    body = s3.get_object(Bucket="example-bucket", Key=uploads[0])["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        shipped = tar.extractfile(wheel.name).read()
    assert wheel_files(shipped) == wheel_files(wheel.read_bytes())


def test_what_needs_a_checkout_says_so(installed, tmp_path):
    env = user_env(installed, tmp_path / "home")
    # The tiny example trains with hetgen's built-in libtorch trainer, whose launcher is built
    # from hetgen's Rust source.
    assert hetgen(env, "new", "tiny", cwd=tmp_path).returncode == 0
    root = tmp_path / "tiny"
    assert hetgen(env, "render", cwd=root).returncode == 0
    run = hetgen(env, "deploy", "--local", cwd=root, timeout=60)
    assert run.returncode != 0
    said = flat(run.stderr)
    assert "hetgen's built-in trainer runs a launcher built from hetgen's Rust source" in said, said
    assert "make build" in said, said
    assert not (root / "build" / "tiny" / "local").exists()
    # Its PNG pipeline profiles from the wheel; a JPEG one needs libjpeg-turbo, which the
    # wheel's command leaves out.
    profile = hetgen(env, "profile", "--seconds", "0.5", cwd=root, timeout=60)
    assert profile.returncode == 0, profile.stderr
    assert (root / "profile.json").is_file()
    spec = root / "hetgen.toml"
    spec.write_text(spec.read_text().replace('encoding = "png"', 'encoding = "jpeg"'))
    profile = hetgen(env, "profile", "--seconds", "0.5", "--out", "jpeg.json", cwd=root,
                     timeout=60)
    assert profile.returncode != 0
    said = flat(profile.stderr)
    assert "no JPEG decoder" in said and "make build" in said, said
    assert not (root / "jpeg.json").exists()


def flat(message: str) -> str:
    """A diagnostic's words on one line, without the margin it wraps its lines behind."""
    return " ".join(w for w in message.split() if w != "│")
