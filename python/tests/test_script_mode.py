"""Script mode end to end on AWS's PyTorch image: `hetgen new --example pytorch`, `hetgen
render`, `hetgen deploy --local` with two data hosts and two trainer hosts. Every host starts
as that image starts it, through AWS's training toolkit (`train`, from PyPI, in the project's
torch environment): it unpacks the source bundle, pip-installs its requirements and runs the
bundle's entry point, whose hetgen launcher serves data or runs the example's `train.py` under
`torchrun` (gloo on the CPU)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import audit, binary, processes_of, three_data_hosts, trainers_time

pytestmark = pytest.mark.timeout(420)


def hetgen(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary("HETGEN_BIN"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def project(tmp_path: Path, example: str = "pytorch") -> Path:
    made = hetgen("new", "digits", "--example", example, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path / "digits"


def job_record(root: Path) -> dict:
    (path,) = root.glob("build/digits/local/*/job-record.json")
    return json.loads(path.read_text())


def assert_learned_once_per_epoch(root: Path, audit_file: Path) -> None:
    """The example job's model learned the digits on both ranks, which together yielded every
    training sample of every epoch exactly once, and nothing of the job is left running."""
    # Rank 0's host wrote it; the job folder's `model` link points at the same file.
    (metrics,) = {p.resolve() for p in root.glob("build/**/model/metrics.json")}
    report = json.loads(metrics.read_text())
    assert report["ranks"] == 2
    assert report["accuracy"] >= 0.90, report
    lines = audit(audit_file)
    assert max(Counter(lines).values()) == 1
    per_epoch = Counter(epoch for epoch, _ in lines)
    assert per_epoch == {epoch: 1436 for epoch in range(report["epochs"])}
    assert processes_of(root / "build") == []


def test_the_pytorch_example_trains_on_two_trainer_hosts_fed_by_two_data_hosts(tmp_path):
    root = project(tmp_path)
    rendered = hetgen("render", cwd=root)
    assert rendered.returncode == 0, rendered.stderr
    audit_file = tmp_path / "audit.txt"
    run = hetgen(
        "deploy", "--local", "--env", f"HETGEN_AUDIT_FILE={audit_file}", cwd=root, timeout=400
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Completed" in output
    # Each host went through the toolkit: it unpacked the bundle into its empty code folder,
    # ran the bundle's entry point and reported success.
    hosts = job_record(root)["hosts"]
    assert len(hosts) == 4
    for host in hosts:
        code = Path(host["base_dir"]) / "code"
        assert {"hetgen_launcher.py", "hetgen-job.json", "train.py"} <= {
            p.name for p in code.iterdir()
        }
        assert "Reporting training SUCCESS" in Path(host["log"]).read_text()
    # Batches reach DDP in the parameters' layout: no gradient copied into its buckets.
    assert "Grad strides do not match" not in output
    # A job starts from no checkpoint of an earlier one.
    assert "resumed from" not in output
    assert_learned_once_per_epoch(root, audit_file)

    # Continuing it, explicitly: every host starts with the checkpoint it left, at its end,
    # so the script resumes there and trains no further.
    (first,) = root.glob("build/digits/local/*/")
    again = hetgen("deploy", "--local", "--resume-from", first.name, cwd=root, timeout=400)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    epochs = json.loads(next(root.glob("build/**/model/metrics.json")).read_text())["epochs"]
    assert f"at epoch {epochs}" in output, output


def test_the_pytorch_dataset_example_trains_on_its_own_dataset_with_a_data_host_frozen(tmp_path):
    """The data hosts run the example's torch Dataset (data.py, torchvision augmentation) in
    their Python workers; one of them (its server and workers) is frozen for a few seconds
    mid-training. Nothing is lost or repeated, and the model learns."""
    root = project(tmp_path, "pytorch-dataset")
    assert hetgen("render", cwd=root).returncode == 0
    audit_file = tmp_path / "audit.txt"
    job = subprocess.Popen(
        [binary("HETGEN_BIN"), "deploy", "--local", "--env", f"HETGEN_AUDIT_FILE={audit_file}"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        # Once batches flow, freeze a data host: every process of it, server and workers.
        deadline = time.monotonic() + 300
        while not (audit_file.exists() and len(audit_file.read_text().splitlines()) > 1000):
            assert job.poll() is None and time.monotonic() < deadline, job.stdout.read()
            time.sleep(0.2)
        (hosts,) = root.glob("build/digits/local/*/hosts")
        data_host = next(
            h
            for h in sorted(hosts.iterdir())
            if json.loads((h / "input/config/resourceconfig.json").read_text())[
                "current_group_name"
            ]
            == "data_group"
        )
        frozen = processes_of(data_host)
        assert len(frozen) >= 3, frozen  # the toolkit, the server, its workers
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(4)
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        output, _ = job.communicate(timeout=400)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, output
    assert "Completed" in output
    assert "Python dataset ready" in output
    assert_learned_once_per_epoch(root, audit_file)


def test_a_data_host_frozen_mid_training_costs_the_trainers_little(tmp_path):
    """The pytorch example with three data hosts, run as is and with one of them frozen
    (SIGSTOP, then SIGCONT) for 8 s from its first batch: the trainer hosts, which pay for the
    GPUs, lose at most a fifth of the freeze (on a quiet machine about 2 %: BENCHMARKS.md), every
    sample comes once per epoch, and nothing of either run is left running. The frozen host's
    share of the shards goes to the others (hedging), and the trainer hosts do not wait for it
    at the end: it finds their Shutdown, or that the job is over, once it runs again."""
    freeze_s = 8.0
    times = {}
    for name, freeze in (("as-is", None), ("frozen", freeze_s)):
        (tmp_path / name).mkdir()
        root = project(tmp_path / name)
        three_data_hosts(root)
        assert hetgen("render", cwd=root).returncode == 0
        audit_file = tmp_path / f"{name}.txt"
        times[name] = trainers_time(root, audit_file, freeze)
        assert_learned_once_per_epoch(root, audit_file)
    lost = times["frozen"] - times["as-is"]
    assert lost <= 0.2 * freeze_s, times


FAILING = """\
import os
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 gives up on purpose")
dist.barrier()
"""


def test_a_script_that_raises_on_one_host_fails_the_job_and_stops_every_host(tmp_path):
    root = project(tmp_path)
    (root / "train.py").write_text(FAILING)
    assert hetgen("render", cwd=root).returncode == 0
    started = time.monotonic()
    run = hetgen("deploy", "--local", "--env", "HETGEN_WATCHDOG_S=600", cwd=root, timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "Failed" in output
    assert "rank 1 gives up on purpose" in output
    record = job_record(root)
    assert record["status"] == "Failed"
    # The failure file of the host that failed first, as SageMaker reports it.
    assert record["failure_reason"].startswith("AlgorithmError: ")
    reason = record["failure_reason"]
    assert "training script `train.py` exited with status 1" in reason
    # The script's own error, where it was raised, not torchrun's banner around it.
    assert re.search(r'File "[^"]*train\.py", line \d+, in <module>\n\w*Error: ', reason), reason
    assert "ChildFailedError" not in reason, reason
    # Nobody waited for a watchdog: the failure ended every host, the data hosts cleanly.
    assert time.monotonic() - started < 200
    # A data host ends 0 when its server stopped on the trainer's word before the run's
    # SIGTERM reached the container, 143 when the SIGTERM came first; never killed.
    data = [h for h in record["hosts"] if h["group"] == "data_group"]
    assert all(h["exit_code"] in (0, 143) and h["signal"] is None for h in data), data
    for host in data:
        assert "data server stopped" in Path(host["log"]).read_text(), host["name"]
    assert processes_of(root / "build") == []


STOPPABLE = """\
import os, signal, sys
import torch.distributed as dist
import hetgen

def stopped(signum, frame):
    # As a script saving a checkpoint would say so: its output still reaches the job's log.
    print(f"rank {dist.get_rank()} saving a checkpoint", flush=True)
    marker = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data", "sigterm")
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    open(marker, "w").write(f"rank {dist.get_rank()}")
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
dist.init_process_group("gloo")
loader = hetgen.Loader()
ready = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data", "ready")
os.makedirs(os.path.dirname(ready), exist_ok=True)
open(ready, "w").close()
while True:
    for batch in loader:
        pass
"""


def test_stopping_the_job_passes_sigterm_to_every_trainer_hosts_script(tmp_path):
    root = project(tmp_path)
    (root / "train.py").write_text(STOPPABLE)
    assert hetgen("render", cwd=root).returncode == 0
    # Its output goes to a file: a pipe nobody reads while the hosts start could fill up.
    output = stopped_once_streaming(root, tmp_path / "deploy.log")
    assert "Stopped" in output, output
    markers = sorted(p.read_text() for p in root.glob("build/**/output/data/sigterm"))
    assert markers == ["rank 0", "rank 1"], output
    for rank in (0, 1):
        assert f"rank {rank} saving a checkpoint" in output, output
    # The data servers drained and stopped on the SIGTERM, not at the grace period's SIGKILL.
    data = [h for h in job_record(root)["hosts"] if h["group"] == "data_group"]
    assert all(h["signal"] is None for h in data), data
    assert processes_of(root / "build") == []



def stopped_once_streaming(root: Path, log: Path, *args: str, wait: float = 120) -> str:
    """`hetgen deploy --local ARGS` in `root`, sent SIGTERM once both scripts stream (each wrote
    `output/data/ready`), as `hetgen stop` or SageMaker's max runtime would stop it, not after a
    fixed time: how long hosts take to start is this machine's business. Its output, once it
    ended (within `wait` s)."""
    with log.open("w") as out:
        deploy = subprocess.Popen(
            [binary("HETGEN_BIN"), "deploy", "--local", *args],
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"},
        )
    deadline = time.monotonic() + 240
    while len(list(root.glob("build/**/output/data/ready"))) < 2 and deploy.poll() is None:
        if time.monotonic() > deadline:
            deploy.kill()
            deploy.wait()
            raise AssertionError(f"the scripts never streamed:\n{log.read_text()}")
        time.sleep(0.2)
    deploy.send_signal(signal.SIGTERM)
    deploy.wait(timeout=wait)
    return log.read_text()

STREAMING = """\
import hetgen

loader = hetgen.Loader()
print("streaming", flush=True)
while True:
    for batch in loader:
        pass
"""


def test_data_servers_outlive_a_killed_trainer_only_until_their_watchdog(cluster_factory, tmp_path):
    cluster = cluster_factory(data_hosts=2, extra_env={"HETGEN_WATCHDOG_S": "3"})
    script = tmp_path / "stream_forever.py"
    script.write_text(STREAMING)
    trainer = subprocess.Popen(
        [sys.executable, str(script)],
        env={**os.environ, **cluster.trainer_env()},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert trainer.stdout.readline().strip() == "streaming"
    time.sleep(1)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    # No Shutdown ever came: each server stops by its watchdog, cleanly.
    assert cluster.wait_stopped(30) == {"algo-1": 0, "algo-2": 0}
    for log in cluster.logs.values():
        assert "no trainer" in log.read_text() or "watchdog" in log.read_text()
