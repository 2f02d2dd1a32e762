"""A user's own Python dataset on the data hosts: real data-server processes whose Python
workers run `datasets/fields.py`, read through `hetgen.Loader` as a training script would."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import hetgen
import hetgen.torch
from conftest import TOKEN, Cluster, audit, run_script

sys.path.insert(0, str(Path(__file__).resolve().parent / "datasets"))
import fields  # noqa: E402
import hetgen_fixtures  # noqa: E402

pytestmark = pytest.mark.timeout(300)

DATASETS = Path(__file__).resolve().parent / "datasets"
SAMPLES = 120


@pytest.fixture
def dataset_cluster(tmp_path):
    """`make(dataset=..., **env)`: the `py-dataset` job with its code folder (the dataset file
    and a training script) and its data folder, started."""
    made: list[Cluster] = []

    def make(
        dataset: str = "fields.py:make",
        data_hosts: int = 2,
        start: bool = True,
        processes: int = 1,
        **env,
    ):
        folder = tmp_path / f"job{len(made)}"
        folder.mkdir()
        for module in DATASETS.glob("*.py"):
            shutil.copy(module, folder)
        (folder / "train.py").write_text("# the job's script; these tests read the loader\n")
        data = folder / "fields"
        data.mkdir()
        spec = hetgen_fixtures.load("py-dataset")
        spec["job"]["name"] = f"py-dataset-{len(made)}"
        spec["instance_group"][0]["count"] = data_hosts
        spec["pipeline"]["source"]["dataset"] = dataset
        if processes > 1:
            spec["trainer"]["processes_per_host"] = processes
        hetgen_fixtures.write(folder / "hetgen.toml", spec)
        cluster = Cluster(
            folder,
            folder / "hetgen.toml",
            {"HETGEN_CODE_DIR": str(folder), "HETGEN_PYTHON": sys.executable, **env},
        )
        cluster.data_folder = data
        made.append(cluster)
        if start:
            cluster.start(data)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


def use(monkeypatch, cluster: Cluster) -> None:
    for name, value in cluster.trainer_env().items():
        monkeypatch.setenv(name, value)


def samples_of(batch) -> dict[int, dict]:
    """A dataset batch cut back into its samples, by id: every field's per-sample array."""
    out = {}
    for k, i in enumerate(batch["id"].tolist()):
        target = batch["target"]
        out[i] = {
            "image": batch["image"][k],
            "mask": batch["mask"][k],
            "target": tuple(t[k] for t in target),
            "half": batch["half"][k],
            "flag": batch["flag"][k],
            "noise": batch["noise"][k],
            "jitter": batch["jitter"][k],
        }
    return out


def epoch_failure() -> str:
    """Read an epoch through the job's loader, which must fail: its message."""
    with pytest.raises(hetgen.HetgenError) as failed:
        with hetgen.Loader(epochs=1) as loader:
            for _ in loader:
                pass
    return str(failed.value)


def raw(value) -> bytes:
    return np.ascontiguousarray(value).tobytes()


def test_a_dict_of_fields_round_trips_bit_exact_from_two_data_hosts(dataset_cluster, monkeypatch):
    cluster = dataset_cluster()
    use(monkeypatch, cluster)
    seen = {}
    with hetgen.Loader(epochs=1) as loader:
        assert loader.mode == "remote" and len(loader.hosts) == 2
        assert loader.samples_per_epoch == SAMPLES
        for batch in loader:
            # The dataset's own structure: a dict, `target` a tuple, numbers stacked.
            assert isinstance(batch, dict) and isinstance(batch["target"], tuple)
            assert batch["image"].dtype == np.uint8 and batch["image"].shape[1:] == (3, 4, 5)
            assert batch["target"][0].dtype == np.float32
            assert batch["target"][1].dtype == np.int64
            assert batch["target"][2].dtype == np.float16
            assert batch["flag"].dtype == np.bool_ and batch["id"].dtype == np.int64
            assert batch["half"].dtype.names == ("bfloat16",)
            seen.update(samples_of(batch))
    assert sorted(seen) == list(range(SAMPLES))
    for i, got in seen.items():
        want = fields.expected(i)
        assert raw(got["image"]) == raw(want["image"])
        assert raw(got["mask"]) == raw(want["mask"])
        for g, w in zip(got["target"], want["target"]):
            assert raw(g) == raw(w), (i, g, w)
        assert raw(got["half"]) == want["half"].view(torch.int16).numpy().tobytes()
        assert bool(got["flag"]) == want["flag"]


def test_torch_gets_the_same_structure_as_tensors_without_a_copy(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(data_hosts=1)
    use(monkeypatch, cluster)
    with hetgen.Loader(epochs=1) as loader:
        batch = next(iter(loader))
        tensors = hetgen.torch.to_device(batch, "cpu")
        assert set(tensors) == set(batch)
        assert tensors["half"].dtype == torch.bfloat16
        assert tensors["target"][1].dtype == torch.int64
        ids = tensors["id"].tolist()
        assert torch.equal(tensors["half"][0], fields.expected(ids[0])["half"])
        on_host = hetgen.torch.tensors(batch)
        assert on_host["image"].data_ptr() == batch["image"].ctypes.data


def test_a_sample_is_byte_identical_whichever_host_or_process_makes_it(
    dataset_cluster, tmp_path
):
    cluster = dataset_cluster()
    env = cluster.trainer_env()
    addresses = {
        host: f"{cluster.net}.{n}:{cluster.port}" for n, host in enumerate(cluster.data + [cluster.trainer], 1)
    }
    records = {}
    for host in cluster.data:
        out = tmp_path / f"{host}.jsonl"
        run_script(
            "stream.py", env, "--spec", str(cluster.job_file), "--hosts", addresses[host],
            "--token", TOKEN, "--out", str(out),
        )
        records[host] = per_sample(out)
    # The same job in this machine's own workers (local mode, another process again).
    local = tmp_path / "local.jsonl"
    run_script(
        "stream.py", {"HETGEN_CODE_DIR": str(cluster.root), "HETGEN_PYTHON": sys.executable},
        "--spec", str(cluster.spec), "--mode", "local",
        "--channels", json.dumps({"training": str(cluster.data_folder)}), "--out", str(local),
    )
    records["local"] = per_sample(local)
    one, two = (records[h] for h in cluster.data)
    assert sorted(one) == sorted(two) == sorted(records["local"]) == list(range(SAMPLES))
    assert one == two == records["local"]


def per_sample(path: Path) -> dict[int, str]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out.update(zip(record["ids"], record["samples"]))
    return {int(k): v for k, v in out.items()}


def test_a_state_saved_mid_epoch_resumes_in_a_new_process_with_the_same_samples(
    dataset_cluster, tmp_path
):
    cluster = dataset_cluster()
    env = cluster.trainer_env()
    state = str(tmp_path / "state.json")
    run_script("stream.py", env, "--epochs", "2", "--out", str(tmp_path / "whole"))
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "first"),
        "--stop-after", "7", "--state", state,
    )
    saved = json.loads(Path(state).read_text())
    assert saved["epoch"] == 0 and saved["partial"], saved
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "rest"),
        "--resume", "--state", state,
    )
    lines = lambda name: [json.loads(l) for l in (tmp_path / name).read_text().splitlines()]
    whole, resumed = lines("whole"), lines("first") + lines("rest")
    assert len(whole) == 2 * SAMPLES // 8
    assert [r["ids"] for r in resumed] == [r["ids"] for r in whole]
    assert [r["sha256"] for r in resumed] == [r["sha256"] for r in whole]


def test_the_datasets_exception_fails_the_loader_naming_the_sample_host_and_traceback(
    dataset_cluster, monkeypatch
):
    cluster = dataset_cluster()
    (cluster.data_folder / "raise-57").touch()
    use(monkeypatch, cluster)
    started = time.monotonic()
    # A sample's failure is a data error (not the handshake's), with what failed as attributes.
    with pytest.raises(hetgen.DataError) as failed:
        with hetgen.Loader(epochs=1) as loader:
            for _ in loader:
                pass
    assert time.monotonic() - started < 30
    message = str(failed.value)
    assert "sample 57" in message, message
    assert "algo-" in message, message
    assert "ValueError: sample 57 is corrupt" in message, message
    assert 'fields.py", line' in message and "__getitem__" in message, message
    error = failed.value
    assert error.sample == 57 and error.stage == "__getitem__", vars(error)
    assert error.host in cluster.data, (error.host, cluster.data)
    assert error.traceback.endswith("ValueError: sample 57 is corrupt"), error.traceback
    # Every DataError has the attributes; None when no sample is to blame.
    assert hetgen.DataError("x").sample is None and hetgen.DataError("x").host is None


def test_killed_workers_are_replaced_and_every_sample_still_comes_once(
    dataset_cluster, monkeypatch, tmp_path
):
    audit_file = tmp_path / "audit.txt"
    cluster = dataset_cluster(HETGEN_AUDIT_FILE=str(audit_file))
    for i in (5, 61, 118):
        (cluster.data_folder / f"die-{i}").touch()
    use(monkeypatch, cluster)
    with hetgen.Loader(epochs=2) as loader:
        for _ in range(2):
            for _ in loader:
                pass
    lines = audit(audit_file)
    assert Counter(lines) == Counter((e, i) for e in range(2) for i in range(SAMPLES))
    logs = "".join(cluster.logs[h].read_text() for h in cluster.data)
    assert "a Python worker died" in logs and "SIGKILL" in logs, logs


def test_a_batch_that_kills_every_worker_fails_the_job_with_the_reason(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(data_hosts=1)
    (cluster.data_folder / "always-33").touch()
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "sample 33 kills the Python worker that makes it" in message, message
    assert "SIGKILL" in message, message


def test_a_module_that_does_not_import_fails_the_data_host_at_start(dataset_cluster):
    cluster = dataset_cluster(dataset="broken.py:make", data_hosts=1, start=False)
    cluster.start(cluster.data_folder, launcher=True)
    (host,) = cluster.data
    assert cluster.wait_stopped(60)[host] not in (0, None)
    failure = (cluster.root / host / "output" / "failure").read_text()
    assert "broken.py:make" in failure, failure
    assert "ModuleNotFoundError: No module named 'not_a_module_anyone_has'" in failure, failure


def test_hybrid_input_runs_the_same_dataset_on_this_host_identically(dataset_cluster, monkeypatch):
    cluster = dataset_cluster()
    use(monkeypatch, cluster)

    def stream(**options):
        # Not `with`: leaving it would tell the servers training is over.
        loader = hetgen.Loader(epochs=1, audit=False, **options)
        return loader, [b"".join(raw(a) for _, a in sorted(flat(b).items())) for b in loader]

    remote_loader, remote = stream(threads=0)
    hybrid_loader, hybrid = stream(threads=1, channels={"training": cluster.data_folder})
    # Deterministic order: the same batches, byte for byte, whichever side made each.
    assert hybrid == remote
    assert hybrid_loader.batches_by_source["local"] > 0, hybrid_loader.batches_by_source


def flat(node, path=""):
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flat(value, f"{path}.{key}").items()}
    if isinstance(node, (tuple, list)):
        return {k: v for i, value in enumerate(node) for k, v in flat(value, f"{path}.{i}").items()}
    return {path: node}


def test_a_batch_over_the_message_limit_fails_naming_the_limit(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="big.py:make", data_hosts=1)
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "8 samples is 335544320 bytes" in message, message
    assert "256 MiB gRPC message limit" in message and "batch_size" in message, message
