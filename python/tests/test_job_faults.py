"""Issue #49 end to end: real local jobs on AWS's PyTorch image (the training toolkit from PyPI
starts every host, as in `test_script_mode.py`) whose dataset or script misbehaves, or which
are stopped. The job must say exactly what went wrong, where, and with which sample, and a stop
must end the way SageMaker expects."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import binary, processes_of
from test_script_mode import stopped_once_streaming

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


def project(tmp_path: Path, example: str) -> Path:
    made = hetgen("new", "digits", "--example", example, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path / "digits"


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} changed: {old!r} is not in it"
    path.write_text(text.replace(old, new))


def job_record(root: Path) -> dict:
    (path,) = root.glob("build/digits/local/*/job-record.json")
    return json.loads(path.read_text())


def deploy(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    assert hetgen("render", cwd=root).returncode == 0
    run = hetgen("deploy", "--local", *args, cwd=root, timeout=400)
    return run, run.stdout + run.stderr


def failed_with(root: Path, run: subprocess.CompletedProcess, output: str) -> str:
    """The reason of a job that must have failed, as its record and the CLI give it."""
    assert run.returncode == 1, output
    record = job_record(root)
    assert record["status"] == "Failed", output
    reason = record["failure_reason"]
    # SageMaker's FailureReason holds 1024 characters; the local run keeps to them.
    assert len(reason) <= 1024, reason
    assert processes_of(root / "build") == []
    return reason


# -- 1. the reason names the host that failed on its own ------------------------------------


def test_a_data_host_that_fails_at_start_is_the_job_s_reason_not_the_trainer_it_stopped(tmp_path):
    # A dataset whose label is a string fails every data host at start; the trainers' torchrun
    # then fails on the job's stop (`SignalException: got signal: 15`), which is no reason.
    root = project(tmp_path, "pytorch-dataset")
    edit(root / "data.py", "return self.transform(image), label", 'return self.transform(image), "label"')
    run, output = deploy(root)
    reason = failed_with(root, run, output)
    assert reason.startswith("AlgorithmError: algo-"), reason
    assert "(data_group): " in reason and "is a str" in reason, reason
    assert "SignalException" not in reason and "signal: 15" not in reason, reason
    # What the run said when it stopped the job is the job's reason.
    assert f"stopping the job: {reason}" in output, output


# -- 3. the reason keeps the sample, the data host and the user's frames ---------------------


def test_a_sample_that_raises_is_named_with_its_data_host_and_frames_in_the_job_s_reason(tmp_path):
    root = project(tmp_path, "pytorch-dataset")
    edit(
        root / "data.py",
        "        path, label = self.files[i]\n",
        "        path, label = self.files[i]\n"
        "        if i == 57:\n"
        "            record = {'image': path}\n"
        "            label = record['label']\n",
    )
    run, output = deploy(root)
    reason = failed_with(root, run, output)
    # The sample and the data host that ran it, the user's frames on both sides (where the
    # script read the batch, where the dataset raised) and the error itself.
    assert "sample 57" in reason, reason
    assert re.search(r"data host algo-\d", reason), reason
    assert re.search(r'File "[^"]*/code/train\.py", line \d+, in main', reason), reason
    assert re.search(r'File "[^"]*/code/data\.py", line \d+, in __getitem__', reason), reason
    assert "label = record['label']" in reason, reason
    assert re.search(r"\nKeyError: 'label' \(algo-\d in dnn_group, exit code 1\)$", reason), reason


# -- 11. a stop ends as SageMaker expects ----------------------------------------------------

# A script whose SIGTERM handler takes longer than torchrun's own 30 s to save its checkpoint
# (SageMaker gives 120 s), then exits 0, as a stopped script that saved its state does.
STOPPABLE = """\
import os, signal, sys, time
import torch.distributed as dist
import hetgen

OUT = os.path.join(os.environ["SAGEMAKER_BASE_DIR"], "output", "data")

def stopped(signum, frame):
    print(f"rank {dist.get_rank()} saving a checkpoint", flush=True)
    time.sleep(35)  # the checkpoint's own time: longer than torchrun's default grace
    open(os.path.join(OUT, "saved"), "w").write(f"rank {dist.get_rank()}")
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
dist.init_process_group("gloo")
loader = hetgen.Loader()
os.makedirs(OUT, exist_ok=True)
open(os.path.join(OUT, "ready"), "w").close()
while True:
    for batch in loader:
        pass
"""


def test_a_stopped_job_s_trainer_hosts_end_with_the_script_s_status_after_its_grace(tmp_path):
    root = project(tmp_path, "pytorch")
    (root / "train.py").write_text(STOPPABLE)
    assert hetgen("render", cwd=root).returncode == 0
    # The grace SageMaker gives between its SIGTERM and its SIGKILL.
    output = stopped_once_streaming(root, tmp_path / "deploy.log", "--grace", "120", wait=200)
    record = job_record(root)
    assert record["status"] == "Stopped", output
    # Each script had the time its checkpoint took, and exited 0: so did its host, with no
    # failure file blaming the script.
    saved = sorted(p.read_text() for p in root.glob("build/**/output/data/saved"))
    assert saved == ["rank 0", "rank 1"], output
    trainers = [h for h in record["hosts"] if h["group"] == "dnn_group"]
    for host in trainers:
        assert host["exit_code"] == 0 and host["signal"] is None, (host, output)
        assert not (Path(host["base_dir"]) / "output" / "failure").exists(), host["name"]
        assert "Reporting training SUCCESS" in Path(host["log"]).read_text(), host["name"]
    assert "SignalException" not in output, output
    assert processes_of(root / "build") == []


# -- 12b. a rank that never exits after its loader finished ----------------------------------

# Every rank reads its epoch and tells the data servers its host finished (one rank per host);
# then rank 1 never exits, as a process can at the end of a DDP script (torch's gloo teardown,
# docs/spec.md "Ending a DDP script").
NEVER_EXITS = """\
import threading
import torch.distributed as dist
import hetgen

dist.init_process_group("gloo")
rank = dist.get_rank()
loader = hetgen.Loader(epochs=1)
for batch in loader:
    pass
dist.barrier()
loader.shutdown()
print(f"rank {rank} finished training", flush=True)
dist.destroy_process_group()
if rank == 1:
    threading.Thread(target=threading.Event().wait).start()
"""


def test_a_rank_that_never_exits_after_the_data_ends_is_ended_and_named(tmp_path):
    root = project(tmp_path, "pytorch")
    (root / "train.py").write_text(NEVER_EXITS)
    # A rank may outlive the data servers 3 s here (60 by default); the job's max runtime is
    # far off.
    run, output = deploy(root, "--env", "HETGEN_LINGER_S=3", "--max-runtime", "300")
    assert "rank 1 finished training" in output, output
    reason = failed_with(root, run, output)
    assert job_record(root)["secondary_status"] == "Failed", reason
    assert re.search(
        r"rank 1 \(pid \d+\) of training script `train\.py` was still running 3 s after the "
        r"job's data servers stopped",
        reason,
    ), reason
    assert "del model" in reason, reason
