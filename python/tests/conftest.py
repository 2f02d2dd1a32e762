"""Real data-server processes on 127.0.0.1 for the package's tests.

A `Cluster` lays out a hetgen job the way `hetgen deploy --local` does: `job.json` rendered by
the `hetgen` binary from a spec, one SageMaker tree per host (`resourceconfig.json`,
`inputdataconfig.json`, laid out by tests/fixtures as for the Rust tests), a hosts file giving
every host its own loopback address, and
`hetgen-data-server` processes for the data hosts. Training code runs either in this process
(`cluster.trainer_env()` applied with monkeypatch) or as a child process with that environment,
exactly as a script inside a job would.

The binaries come from `HETGEN_BIN` and `HETGEN_DATA_SERVER` (`make test` sets both). A cluster
made with `launcher=True` starts its data hosts as the role launcher of the installed `hetgen`
package instead (`python -m hetgen train`), as a job on AWS's PyTorch image does.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import tomllib
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The fixture specs and instance trees the Rust tests share (tests/fixtures).
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
import hetgen_fixtures  # noqa: E402
TOKEN = "python-tests-token-0123456789abcdef"
SCRIPTS = Path(__file__).resolve().parent / "scripts"
# The package's role launcher, as the bundle's entry point runs it on AWS's image; the data
# role ignores the script arguments after `--` (there, the job's hyperparameters).
LAUNCHER = [sys.executable, "-m", "hetgen", "train", "--", "--epochs", "3"]


def binary(var: str) -> str:
    path = os.environ.get(var)
    if not path or not Path(path).is_file():
        pytest.fail(f"{var} must name the built binary (make test sets it); it is {path!r}")
    return path


def png(pixels: bytes, width: int, height: int) -> bytes:
    """A grey 8-bit PNG, written by hand so the tests need no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + pixels[y * width : (y + 1) * width] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def digit_rows():
    """(index, 64 pixel values 0..=255, label) of the shipped digits data set."""
    text = gzip.decompress((REPO / "datasets/digits/digits.csv.gz").read_bytes()).decode()
    for n, line in enumerate(text.splitlines()):
        values = [int(float(v)) for v in line.split(",")]
        yield n, [min(v * 16, 255) for v in values[:64]], values[64]


@pytest.fixture(scope="session")
def digits(tmp_path_factory) -> Path:
    """`digits/{train,test}/<label>/<n>.png`, every fifth image held out (as the Rust tests)."""
    root = tmp_path_factory.mktemp("digits")
    for n, pixels, label in digit_rows():
        split = "test" if n % 5 == 0 else "train"
        folder = root / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n:04d}.png").write_bytes(png(bytes(pixels), 8, 8))
    return root


def write_spec(
    folder: Path,
    name: str,
    data_hosts: int,
    train: Path,
    batch_size: int,
    shard_size: int,
    deterministic: bool,
) -> Path:
    """`folder/hetgen.toml`: the `py-digits` fixture job as `name`, with `data_hosts` data hosts
    reading the digits at `train`."""
    spec = hetgen_fixtures.load("py-digits")
    spec["job"]["name"] = name
    spec["instance_group"][0]["count"] = data_hosts
    spec["channel"][0]["uri"] = str(train)
    spec["pipeline"]["batch_size"] = batch_size
    spec["pipeline"]["shard_size"] = shard_size
    spec["trainer"]["deterministic"] = deterministic
    return hetgen_fixtures.write(folder / "hetgen.toml", spec)


class Cluster:
    """The hetgen job of `spec`: its data servers (group `data_group`) and one trainer host
    (`dnn_group`), on loopback addresses."""

    _count = 0

    def __init__(self, root: Path, spec: Path, extra_env: dict | None = None):
        Cluster._count += 1
        self.root = root
        self.spec = spec
        # Distinct loopback subnets and ports per test process and cluster keep runs apart.
        pid = os.getpid()
        self.net = f"127.{pid % 200 + 30}.{Cluster._count % 250}"
        self.port = 30000 + (pid % 10000) + Cluster._count
        out = root / "build"
        subprocess.run(
            [binary("HETGEN_BIN"), "render", str(spec), "--out", str(out)],
            check=True,
            capture_output=True,
        )
        (self.job_file,) = out.glob("*/job.json")
        groups = hetgen_fixtures.lay_out(root, tomllib.loads(spec.read_text()))
        hosts = {group["instance_group_name"]: group["hosts"] for group in groups}
        self.data = hosts["data_group"]
        (self.trainer,) = hosts["dnn_group"]
        hetgen_fixtures.write_hosts_file(
            root, self.data + [self.trainer], lambda n: f"{self.net}.{n}"
        )
        self.extra_env = extra_env or {}
        self.servers: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def common_env(self) -> dict[str, str]:
        return {
            "HETGEN_JOB_FILE": str(self.job_file),
            "HETGEN_JOB_TOKEN": TOKEN,
            "HETGEN_HOSTS_FILE": str(self.root / "hosts.txt"),
            "HETGEN_DATA_PORT": str(self.port),
            **self.extra_env,
        }

    def trainer_env(self) -> dict[str, str]:
        """What the launcher gives a training script on the trainer host."""
        return {
            **self.common_env(),
            "SAGEMAKER_BASE_DIR": str(self.root / self.trainer),
        }

    def start(self, train_folder: Path, launcher: bool = False) -> Cluster:
        command = LAUNCHER if launcher else [binary("HETGEN_DATA_SERVER")]
        for host in self.data:
            log = self.root / f"{host}.log"
            env = {
                **os.environ,
                **self.common_env(),
                "SAGEMAKER_BASE_DIR": str(self.root / host),
                "SM_CHANNEL_TRAINING": str(train_folder),
                "RUST_LOG": "info",
            }
            self.servers[host] = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log.open("w"),
            )
            self.logs[host] = log
        return self

    def kill(self, host: str) -> None:
        self.servers[host].send_signal(signal.SIGKILL)
        self.servers[host].wait()

    def wait_stopped(self, limit: float) -> dict[str, int | None]:
        """Exit codes of the data servers after at most `limit` seconds (None: still running)."""
        deadline = time.monotonic() + limit
        codes = {}
        for host, server in self.servers.items():
            try:
                codes[host] = server.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[host] = None
        return codes

    def stop(self) -> None:
        for server in self.servers.values():
            if server.poll() is None:
                server.kill()
                server.wait()


@pytest.fixture
def cluster_factory(tmp_path, digits):
    made: list[Cluster] = []

    def make(
        data_hosts: int = 2,
        batch_size: int = 32,
        shard_size: int = 128,
        deterministic: bool = False,
        extra_env: dict | None = None,
        start: bool = True,
        launcher: bool = False,
    ) -> Cluster:
        folder = tmp_path / f"job{len(made)}"
        folder.mkdir()
        spec = write_spec(
            folder,
            name=f"py-{len(made)}",
            data_hosts=data_hosts,
            train=digits / "train",
            batch_size=batch_size,
            shard_size=shard_size,
            deterministic=deterministic,
        )
        cluster = Cluster(folder, spec, extra_env)
        made.append(cluster)
        if start:
            cluster.start(digits / "train", launcher=launcher)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


def processes_of(folder: Path) -> list[int]:
    """Processes whose environment names `folder` (every host's SAGEMAKER_BASE_DIR does)."""
    found = []
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def run_script(name: str, env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run `tests/scripts/NAME` with the job's environment added, as a training script."""
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{name} exited {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n"
            f"{result.stderr}"
        )
    return result


def audit(path: Path) -> list[tuple[int, int]]:
    """`(epoch, sample id)` lines of an audit file."""
    out = []
    for line in path.read_text().splitlines():
        epoch, sample = line.split()
        out.append((int(epoch), int(sample)))
    return out


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The wheel `make wheel` built (HETGEN_WHEEL)."""
    path = os.environ.get("HETGEN_WHEEL")
    if not path or not Path(path).is_file():
        pytest.fail(f"HETGEN_WHEEL must name the built wheel (make test sets it); it is {path!r}")
    return Path(path)


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """A new venv of this interpreter with only the wheel (and its one dependency, numpy)
    installed, so nothing of the test environment's own hetgen is used: its `bin`."""
    venv = tmp_path_factory.mktemp("wheel-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", str(wheel)],
        capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    return venv / "bin"


def three_data_hosts(root: Path) -> None:
    """The example's spec with a third data host."""
    spec = root / "hetgen.toml"
    text, count = re.subn(
        r'(name = "data_group"\ninstance_type = "[^"]+"\ncount = )2', r"\g<1>3", spec.read_text()
    )
    assert count == 1
    spec.write_text(text)


def trainers_time(root: Path, audit_file: Path, freeze_s: float | None) -> float:
    """Run the job locally; seconds from its first batch until every process of its trainer
    hosts has exited. With `freeze_s`, one data host (its server and everything else of it) is
    frozen as soon as batches flow, for that long."""
    # The output goes to a file: a pipe nobody reads while the job runs would fill and stop it.
    log = audit_file.with_suffix(".log")
    earlier = set(root.glob("build/digits/local/*/hosts"))
    job = subprocess.Popen(
        [binary("HETGEN_BIN"), "deploy", "--local", "--env", f"HETGEN_AUDIT_FILE={audit_file}"],
        cwd=root,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        deadline = time.monotonic() + 300
        while not (audit_file.exists() and audit_file.read_text()):
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        started = time.monotonic()
        (hosts,) = set(root.glob("build/digits/local/*/hosts")) - earlier
        groups = {
            h: json.loads((h / "input/config/resourceconfig.json").read_text())[
                "current_group_name"
            ]
            for h in sorted(hosts.iterdir())
        }
        trainers = [h for h, g in groups.items() if g == "dnn_group"]
        frozen = []
        if freeze_s:
            frozen = processes_of([h for h, g in groups.items() if g == "data_group"][1])
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
        thaw_at = time.monotonic() + (freeze_s or 0)
        trainers_done = None
        while job.poll() is None or frozen:
            if frozen and time.monotonic() >= thaw_at:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
                frozen = []
            if trainers_done is None and not any(processes_of(h) for h in trainers):
                trainers_done = time.monotonic()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, log.read_text()
    return (trainers_done or time.monotonic()) - started
