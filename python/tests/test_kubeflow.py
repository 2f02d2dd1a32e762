"""The pytorch example as a Kubeflow Trainer job, run here as its pods: `hetgen new --example
pytorch`, `hetgen render` (which writes kubeflow/trainingruntime.yaml and kubeflow/trainjob.yaml
beside the SageMaker files), `hetgen deploy --local --engine kubeflow`. Each of the 2 data and 2
trainer pods runs its container's command with its environment as the rendered objects write
them (Trainer's PET_* variables, the downward API's JobSet name and pod index, the token from
the job's Secret), names resolving as JobSet's pod DNS names; the trainer pods run the example's
train.py under torchrun (gloo on the CPU), fed by the data pods."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import binary, processes_of
from test_script_mode import FAILING, assert_learned_once_per_epoch, project

pytestmark = pytest.mark.timeout(420)


def twin(root: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """`hetgen deploy --local --engine kubeflow` with the workspace's launcher standing in for
    the image's (the one the rendered Dockerfile builds from the same code)."""
    return subprocess.run(
        [
            binary("HETGEN_BIN"),
            "deploy",
            "--local",
            "--engine",
            "kubeflow",
            "--launcher",
            binary("HETGEN_LAUNCHER"),
            *args,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def job_record(root: Path) -> dict:
    (path,) = root.glob("build/digits/local/*/job-record.json")
    return json.loads(path.read_text())


def test_the_pytorch_example_s_kubeflow_pods_train_every_sample_once_per_epoch(tmp_path):
    root = project(tmp_path)
    rendered = subprocess.run(
        [binary("HETGEN_BIN"), "render"], cwd=root, capture_output=True, text=True
    )
    assert rendered.returncode == 0, rendered.stderr
    assert (root / "build/digits/kubeflow/trainjob.yaml").is_file()
    audit_file = tmp_path / "audit.txt"
    run = twin(root, "--env", f"HETGEN_AUDIT_FILE={audit_file}")
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Completed" in output
    hosts = job_record(root)["hosts"]
    assert sorted(h["name"] for h in hosts) == [
        "digits-data-group-0-0",
        "digits-data-group-0-1",
        "digits-node-0-0",
        "digits-node-0-1",
    ]
    # The data pods ended on the trainers' word, not killed at the end of the job.
    for host in hosts:
        assert host["exit_code"] == 0 and host["signal"] is None, host
    data_log = Path(next(h for h in hosts if h["group"] == "data_group")["log"])
    assert "data server stopped" in data_log.read_text()
    # The second trainer pod took its rank and its master from Trainer's PET_* variables
    # (PET_MASTER_ADDR, the first node pod's DNS name, resolved to its address).
    node_0, node_1 = (
        next(h for h in hosts if h["name"] == f"digits-node-0-{i}") for i in (0, 1)
    )
    started = Path(node_1["log"]).read_text()
    assert f"node_rank=1 processes=1 master={node_0['address']}:29500" in started, started
    assert_learned_once_per_epoch(root, audit_file)
    # The trainers' /opt/ml/model is the example's output claim, `digits/model` on it (the run's
    # `claims/` folder stands for the claim), so the model outlives the pods.
    on_claim = Path(job_record(root)["job_dir"]) / "claims/digits-outputs/digits/model"
    assert (on_claim / "metrics.json").is_file(), sorted(p.name for p in on_claim.parent.glob("*"))


def test_a_raising_script_fails_the_kubeflow_job_with_its_own_error(tmp_path):
    root = project(tmp_path)
    (root / "train.py").write_text(FAILING)
    assert subprocess.run([binary("HETGEN_BIN"), "render"], cwd=root).returncode == 0
    run = twin(root, "--env", "HETGEN_WATCHDOG_S=600", timeout=300)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "rank 1 gives up on purpose" in output
    record = job_record(root)
    assert record["status"] == "Failed"
    reason = record["failure_reason"]
    assert "training script `train.py` exited with status 1" in reason
    assert re.search(r'File "[^"]*train\.py", line \d+, in <module>\n\w*Error: ', reason), reason
    assert processes_of(root / "build") == []
