"""`python -m hetgen train`: the package's role launcher running real roles in a Python process.

On AWS's PyTorch image every host of a job runs the bundle's entry point, which calls
`hetgen.launcher.main(["train", "--", *hyperparameters])`: a data host serves batches until the
trainers are done, a trainer host runs the job's script under `torchrun`. Both must handle
SIGTERM (how SageMaker stops a job) inside the Python interpreter as the launcher binary does.
The package is the one `make wheel` installed into this interpreter's environment.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Cluster, hetgen_fixtures, processes_of

pytestmark = pytest.mark.timeout(300)

# The job's script: records its arguments and one epoch's batch count in its host's output
# folder; with `--forever` it then waits to be stopped, recording the signal that stops it.
TRAIN = """\
import json, os, signal, sys, time
import hetgen

out = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data")
os.makedirs(out, exist_ok=True)

def stopped(signum, frame):
    with open(os.path.join(out, "signal"), "w") as f:
        f.write(str(signum))
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
with open(os.path.join(out, "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
loader = hetgen.Loader()
batches = sum(1 for _ in loader)
with open(os.path.join(out, "batches"), "w") as f:
    f.write(str(batches))
if "--forever" in sys.argv:
    open(os.path.join(out, "ready"), "w").close()
    while True:
        time.sleep(0.1)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, done, limit: float, log: Path) -> None:
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {limit} s; log:\n{log.read_text()}")
        time.sleep(0.1)


@pytest.fixture
def script_job(tmp_path, digits):
    """A script-mode job (one data host, one trainer host) whose data host runs `python -m
    hetgen train`; the trainer host is each test's to start (`start_trainer`)."""
    made: list[Cluster] = []

    def make() -> Cluster:
        folder = tmp_path / "job"
        folder.mkdir()
        (folder / "train").symlink_to(digits / "train")
        (folder / "train.py").write_text(TRAIN)
        spec = hetgen_fixtures.write(folder / "hetgen.toml", "py-script")
        # No watchdog stops a data server here: only the launcher's word or a signal does.
        cluster = Cluster(folder, spec, extra_env={"HETGEN_WATCHDOG_S": "600"})
        made.append(cluster)
        return cluster.start(digits / "train", launcher=True)

    yield make
    for cluster in made:
        cluster.stop()
        for pid in processes_of(cluster.root):
            os.kill(pid, signal.SIGKILL)


def start_trainer(cluster: Cluster, *args: str) -> tuple[subprocess.Popen, Path]:
    """The trainer host: `python -m hetgen train ARGS` with the environment a job gives it,
    torchrun (this interpreter's) on PATH; its output goes to `trainer.log`."""
    log = cluster.root / "trainer.log"
    env = {
        **os.environ,
        **cluster.trainer_env(),
        "HETGEN_CODE_DIR": str(cluster.root),
        "HETGEN_RENDEZVOUS_PORT": str(free_port()),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RUST_LOG": "info",
    }
    with log.open("w") as out:
        trainer = subprocess.Popen(
            [sys.executable, "-m", "hetgen", "train", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return trainer, log


def output(cluster: Cluster, name: str) -> Path:
    return cluster.root / cluster.trainer / "output" / "data" / name


def test_data_hosts_run_by_the_package_feed_a_loader_and_stop_when_told(cluster_factory, digits):
    cluster = cluster_factory(data_hosts=2, launcher=True)
    script = Path(__file__).resolve().parent / "scripts" / "stream.py"
    run = subprocess.run(
        [sys.executable, str(script), "--out", str(cluster.root / "batches.jsonl"), "--shutdown"],
        env={**os.environ, **cluster.trainer_env()},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    lines = (cluster.root / "batches.jsonl").read_text().splitlines()
    ids = [i for line in lines for i in json.loads(line)["ids"]]
    # Every training image (four fifths of 1797) exactly once.
    assert len(ids) == len(set(ids)) == 1437
    assert cluster.wait_stopped(20) == {"algo-1": 0, "algo-2": 0}
    for log in cluster.logs.values():
        assert "launcher: data server stopped: trainer sent Shutdown" in log.read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_data_host_in_a_python_process_stops_cleanly_on(sig, cluster_factory):
    cluster = cluster_factory(data_hosts=1, launcher=True, extra_env={"HETGEN_WATCHDOG_S": "600"})
    server, log = cluster.servers["algo-1"], cluster.logs["algo-1"]
    wait_for(
        "listening data server",
        lambda: server.poll() is not None or "data server listening" in log.read_text(),
        60,
        log,
    )
    assert server.poll() is None, log.read_text()
    server.send_signal(sig)
    # Exit status 0, not death by the signal: the role stopped, then Python exited normally.
    assert cluster.wait_stopped(20) == {"algo-1": 0}, log.read_text()
    assert "launcher: data server stopped: stop signal received" in log.read_text()


def test_a_trainer_host_runs_the_script_under_torchrun_with_the_arguments_after_the_dashes(
    script_job,
):
    cluster = script_job()
    trainer, log = start_trainer(cluster, "--", "--lr", "0.1", "--name", "a b")
    assert trainer.wait(timeout=240) == 0, log.read_text()
    # The spec's `args`, then what came after `--` (on AWS's image, the hyperparameters).
    argv = json.loads(output(cluster, "argv.json").read_text())
    assert argv == ["--from-spec", "1", "--lr", "0.1", "--name", "a b"]
    assert int(output(cluster, "batches").read_text()) == 23  # ceil(1437 / 64)
    # The script never said it finished; the launcher told the data host for it.
    assert cluster.wait_stopped(20) == {"algo-1": 0}
    assert "launcher: training script finished" in log.read_text()
    assert "finished training" in cluster.logs["algo-1"].read_text()


def test_sigterm_to_a_trainer_host_reaches_the_script_through_torchrun(script_job):
    cluster = script_job()
    trainer, log = start_trainer(cluster, "--", "--forever")
    wait_for("ready script", lambda: output(cluster, "ready").exists(), 240, log)
    trainer.send_signal(signal.SIGTERM)
    code = trainer.wait(timeout=60)
    assert output(cluster, "signal").read_text() == str(int(signal.SIGTERM)), log.read_text()
    # A stop is not the script's failure: the host exits with the script's status (0 here)
    # and writes no failure file blaming it, as SageMaker expects of a stopped job; the data
    # host stops at once.
    assert code == 0, log.read_text()
    assert not (cluster.root / cluster.trainer / "output" / "failure").exists()
    assert "after the job was stopped (SIGTERM)" in log.read_text()
    assert cluster.wait_stopped(20) == {"algo-1": 0}
    assert processes_of(cluster.root / cluster.trainer) == []


def test_a_built_in_trainer_refuses_script_arguments(cluster_factory):
    cluster = cluster_factory(data_hosts=1, start=False)
    run = subprocess.run(
        [sys.executable, "-m", "hetgen", "train", "--", "--epochs", "3"],
        env={**os.environ, **cluster.trainer_env()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    assert "the arguments after `--` (--epochs 3) are for a training script" in run.stderr
