"""A dataset stored in shards (`hetgen.Shards`) on the data hosts: real data-server processes
whose Python workers read `datasets/shards.py`, through `hetgen.Loader` as a training script
would. Every sample once per epoch, with a host frozen and one killed; a shard that raises
named with the sample's position; a resumed epoch giving the same remaining samples; ranks
taking as many batches each though their shards differ in length."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import hetgen
from conftest import audit, run_script
from test_dataset import dataset_cluster, epoch_failure, use  # noqa: F401 (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent / "datasets"))
import shards  # noqa: E402

pytestmark = pytest.mark.timeout(300)

SCRIPTS = Path(__file__).resolve().parent / "scripts"


def epoch_ids(loader) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]


def test_every_sample_comes_once_per_epoch_from_two_hosts(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="shards.py:make")
    use(monkeypatch, cluster)
    with hetgen.Loader(epochs=2) as loader:
        assert loader.shards == len(shards.LENGTHS) and loader.samples_per_epoch == 0
        with pytest.raises(TypeError, match="no length before it is read"):
            len(loader)
        epochs = [epoch_ids(loader) for _ in range(2)]
        assert epoch_ids(loader) == []
    for ids in epochs:
        assert sorted(ids) == shards.ids()
    # Each epoch draws its own order of shards; a shard's samples keep theirs.
    assert epochs[0] != epochs[1]
    for ids in epochs:
        per_shard = {}
        for i in ids:
            per_shard.setdefault(i // 1000, []).append(i)
        assert all(v == sorted(v) for v in per_shard.values())


def test_a_frozen_host_and_a_killed_one_lose_and_double_nothing(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="shards.py:make", data_hosts=3)
    for shard in range(len(shards.LENGTHS)):
        (cluster.data_folder / f"slow-{shard}").touch()
    use(monkeypatch, cluster)
    frozen, killed = cluster.data[0], cluster.data[1]
    ids = []
    with hetgen.Loader(epochs=1, stall_timeout=3.0) as loader:
        os.kill(cluster.servers[frozen].pid, signal.SIGSTOP)
        try:
            for n, batch in enumerate(loader):
                ids += batch["id"].tolist()
                if n == 1:
                    cluster.kill(killed)
        finally:
            os.kill(cluster.servers[frozen].pid, signal.SIGCONT)
        by_source = loader.batches_by_source
    assert sorted(ids) == shards.ids(), Counter(ids).most_common(3)
    assert by_source[cluster.data[2]] > 0, by_source


def test_a_shard_that_raises_names_the_shard_and_the_sample_s_position(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="shards.py:make", data_hosts=1)
    (cluster.data_folder / "raise-4-6").touch()
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "__getitem__: shard 4 (`shard-4`), sample at position 6" in message, message
    # Named by shard and position, not by the number the data service makes of them.
    assert str((4 << 32) | 6) not in message, message
    assert "record 6 of shard-4 is truncated" in message, message
    assert "shards.py" in message, message


def test_a_state_saved_mid_epoch_resumes_with_the_same_remaining_samples(dataset_cluster, tmp_path):
    cluster = dataset_cluster(dataset="shards.py:make")
    env = cluster.trainer_env()
    state = str(tmp_path / "state.json")
    run_script("stream.py", env, "--epochs", "2", "--out", str(tmp_path / "whole"))
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "first"),
        "--stop-after", "5", "--state", state,
    )
    saved = json.loads(Path(state).read_text())
    assert saved["epoch"] == 0 and saved["shards"] == len(shards.LENGTHS), saved
    assert saved["partial"], "stopped inside a shard"
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "rest"),
        "--resume", "--state", state,
    )
    lines = lambda name: [json.loads(l) for l in (tmp_path / name).read_text().splitlines()]
    whole, resumed = lines("whole"), lines("first") + lines("rest")
    # Batch for batch, bit for bit: the same samples, made the same way.
    assert [b["samples"] for b in resumed] == [b["samples"] for b in whole]
    assert sorted(i for b in whole for i in b["ids"]) == sorted(2 * shards.ids())


def test_ranks_take_as_many_batches_though_their_shards_differ(dataset_cluster, tmp_path):
    """Two DDP ranks (gloo, stepping in lockstep) over three data hosts, one frozen and then
    one killed once batches flow: the ranks take as many batches each epoch, and together
    receive every sample of every shard exactly once per epoch (the audit counts what a rank
    leaves unused too: it was delivered to it, to no one else)."""
    cluster = dataset_cluster(dataset="shards.py:make", data_hosts=3, processes=2)
    for shard in range(len(shards.LENGTHS)):
        (cluster.data_folder / f"slow-{shard}").touch()
    env = {**os.environ, **cluster.trainer_env(), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(cluster.port + 5000), "WORLD_SIZE": "2"}
    frozen, killed = cluster.data[0], cluster.data[1]
    ranks = []

    def wait_for_batches(n):
        out, deadline = tmp_path / "rank0.jsonl", time.monotonic() + 120
        while not (out.exists() and len(out.read_text().splitlines()) >= n):
            assert time.monotonic() < deadline and ranks[0].poll() is None, (
                (tmp_path / "rank0.log").read_text())
            time.sleep(0.02)

    try:
        for rank in range(2):
            log = (tmp_path / f"rank{rank}.log").open("w")
            ranks.append(subprocess.Popen(
                [sys.executable, str(SCRIPTS / "stream.py"), "--distributed", "--epochs", "2",
                 "--out", str(tmp_path / f"rank{rank}.jsonl")],
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank),
                     "HETGEN_AUDIT_FILE": str(tmp_path / f"audit{rank}.txt")},
                stderr=log,
            ))
        wait_for_batches(1)
        os.kill(cluster.servers[frozen].pid, signal.SIGSTOP)
        wait_for_batches(3)
        cluster.kill(killed)
        codes = []
        for process in ranks:
            try:
                codes.append(process.wait(timeout=240))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        os.kill(cluster.servers[frozen].pid, signal.SIGCONT)
        for process in ranks:
            if process.poll() is None:
                process.kill()
    logs = "".join((tmp_path / f"rank{r}.log").read_text() for r in range(2))
    assert codes == [0, 0], logs
    per_rank = [[json.loads(l) for l in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()]
                for r in range(2)]
    every = sorted((s << 32) | p for s, n in enumerate(shards.LENGTHS) for p in range(n))
    audited = audit(tmp_path / "audit0.txt") + audit(tmp_path / "audit1.txt")
    for epoch in range(2):
        counts = [len([b for b in r if b["epoch"] == epoch]) for r in per_rank]
        assert counts[0] == counts[1] > 0, counts
        # 10 shards, 5 per rank: every shard read, each sample delivered once.
        assert sorted(i for e, i in audited if e == epoch) == every
    # Shards of unequal lengths: some rank has more batches in some epoch and leaves them.
    assert "unused, so that every rank takes as many batches" in logs, logs


def test_the_shards_example_trains_from_its_tar_shards_through_aws_toolkit(tmp_path):
    """`hetgen new --example pytorch-shards`: the example's own script writes the digits as
    tar shards (standard library only), the data hosts read them with the example's reader
    (torchvision decoding and augmentation) through AWS's training toolkit, and the model
    learns. Each epoch the ranks together receive the samples of the shards dealt to them
    exactly once; ranks end each epoch together (one leaves its surplus batches unused)."""
    from test_script_mode import hetgen as hetgen_command, processes_of, project

    root = project(tmp_path, "pytorch-shards")
    made = subprocess.run([sys.executable, "make_shards.py"], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert len(list((root / "data" / "shards" / "train").glob("*.tar"))) == 15
    assert hetgen_command("render", cwd=root).returncode == 0
    audit_file = tmp_path / "audit.txt"
    run = hetgen_command(
        "deploy", "--local", "--env", f"HETGEN_AUDIT_FILE={audit_file}", cwd=root, timeout=400
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "Completed" in output and "Reporting training SUCCESS" in output
    (metrics,) = {p.resolve() for p in root.glob("build/**/model/metrics.json")}
    report = json.loads(metrics.read_text())
    assert report["ranks"] == 2 and report["accuracy"] >= 0.90, report
    lines = audit(audit_file)
    assert max(Counter(lines).values()) == 1, "no sample twice in an epoch"
    per_epoch = Counter(epoch for epoch, _ in lines)
    # 14 of the 15 shards (one sits each epoch out: 15 is not a multiple of 2 ranks), each
    # whole: 100 samples, or the last shard's 37.
    for epoch in range(report["epochs"]):
        assert per_epoch[epoch] in (1400, 1337), per_epoch
    assert "unused, so that every rank takes as many batches" in output
    assert processes_of(root / "build") == []


def test_hetgen_profile_measures_a_dataset_of_shards_with_a_shard_per_worker(dataset_cluster):
    from conftest import binary

    cluster = dataset_cluster(dataset="shards.py:make", start=False)
    done = subprocess.run(
        [binary("HETGEN_BIN"), "profile", "--python", sys.executable, "--threads", "2",
         "--seconds", "1"],
        cwd=cluster.root, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "of 10 shards" in done.stderr, done.stderr
    runs = json.loads((cluster.root / "profile.json").read_text())["dataset"]["runs"]
    assert [r["workers"] for r in runs] == [1, 2], runs
    assert all(r["samples"] > 0 and r["samples_per_s"] > 0 for r in runs), runs


@pytest.mark.parametrize("deterministic", [True, False])
def test_local_mode_reads_every_shard_once_per_epoch(dataset_cluster, monkeypatch, deterministic):
    """`Loader(mode="local")`: the same workers on this host, a shard per worker at once (one
    at a time, in plan order, when deterministic)."""
    cluster = dataset_cluster(dataset="shards.py:make", start=False)
    monkeypatch.setenv("HETGEN_CODE_DIR", str(cluster.root))
    monkeypatch.setenv("HETGEN_PYTHON", sys.executable)
    loader = hetgen.Loader(str(cluster.spec), mode="local", epochs=2, deterministic=deterministic,
                           channels={"training": str(cluster.data_folder)})
    epochs = [epoch_ids(loader) for _ in range(2)]
    loader.close()
    assert [sorted(ids) for ids in epochs] == [shards.ids()] * 2
    again = hetgen.Loader(str(cluster.spec), mode="local", epochs=1, deterministic=deterministic,
                          channels={"training": str(cluster.data_folder)})
    if deterministic:
        assert epoch_ids(again) == epochs[0], "plan order, every time"
    again.close()
