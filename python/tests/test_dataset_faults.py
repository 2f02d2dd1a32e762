"""A user's own dataset that misbehaves on the data hosts (`datasets/faults.py`): what the job
says then names what went wrong, where, and which sample; and the data host leaves nothing
behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import processes_of
from test_dataset import dataset_cluster, epoch_failure, use  # noqa: F401 (a fixture)

pytestmark = pytest.mark.timeout(300)


def wait_for(condition, what: str, limit: float = 120):
    """Polls `condition` until it holds; fails naming `what` after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {limit} s"
        time.sleep(0.05)


def log_of(cluster) -> str:
    return "".join(cluster.logs[h].read_text() for h in cluster.data)


def test_a_sample_that_crashes_every_worker_fails_the_job_naming_it_and_the_signal(
    dataset_cluster, monkeypatch
):
    cluster = dataset_cluster(dataset="faults.py:make", data_hosts=1)
    (cluster.data_folder / "crash-93").touch()
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "sample 93 kills the Python worker that makes it" in message, message
    assert "died 3 times" in message and "SIGSEGV" in message, message


def test_a_sample_that_hangs_fails_the_job_naming_it_and_where_it_hung(
    dataset_cluster, monkeypatch
):
    cluster = dataset_cluster(dataset="faults.py:make", HETGEN_SAMPLE_TIMEOUT_S="2")
    (cluster.data_folder / "hang-45").touch()
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "sample 45: `__getitem__` took longer than 2 s (`HETGEN_SAMPLE_TIMEOUT_S`)" in message, message
    assert 'faults.py", line' in message and "in wait_for_ever" in message, message
    assert "in __getitem__" in message and "worker.py" not in message, message
    assert "stalled" not in message, message


def test_a_field_of_another_type_on_one_sample_names_the_sample(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="faults.py:make", data_hosts=1)
    (cluster.data_folder / "str-29").touch()
    use(monkeypatch, cluster)
    message = epoch_failure()
    assert "sample 29: default collate: field `label` is a str" in message, message


@pytest.mark.parametrize("factory", ["iterable", "iterable_sized"])
def test_an_iterable_dataset_fails_the_data_host_naming_the_factory(dataset_cluster, factory):
    cluster = dataset_cluster(dataset=f"faults.py:{factory}", data_hosts=1)
    (host,) = cluster.data
    assert cluster.wait_stopped(120)[host] not in (0, None)
    failure = (cluster.root / host / "output" / "failure").read_text()
    assert (
        "a map-style dataset (`__len__` and `__getitem__`) or `hetgen.Shards` is required; "
        f"`faults.py:{factory}` returned an IterableDataset (`faults."
    ) in failure, failure
    assert "hetgen.Shards(shard_list, read)" in failure, failure
    assert "Traceback" not in failure, failure


def test_a_trainer_waiting_for_a_slow_factory_says_so_and_names_it_at_its_timeout(
    dataset_cluster, monkeypatch, capfd
):
    cluster = dataset_cluster(dataset="faults.py:slow_factory", data_hosts=1)
    (host,) = cluster.data
    wait_for((cluster.data_folder / "factory-started").exists, "factory")
    use(monkeypatch, cluster)
    import hetgen

    # The port answers while the factory runs: the trainer is told why it waits, and its
    # timeout names the building, not the network.
    with pytest.raises(hetgen.ConnectError) as raised:
        hetgen.Loader(epochs=1, connect_timeout=3)
    message = str(raised.value)
    assert f"data host {host} was still building its dataset" in message, message
    assert "raise `connect_timeout`" in message, message
    assert f"hetgen: waiting for {host}: dataset still building: " in capfd.readouterr().err
    # Once built, the same port serves the job.
    (cluster.data_folder / "factory-go").touch()
    with hetgen.Loader(epochs=1) as loader:
        assert sum(len(b["label"]) for b in loader) == 120


def workers_folder(cluster, host: str) -> Path:
    """The shared-memory folder of `host`'s Python workers (their script is in it)."""
    folders = set()

    def found():
        for pid in processes_of(cluster.root / host):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            folders.update(Path(a.decode()).parent for a in args if a.endswith(b"/worker.py"))
        return folders

    wait_for(found, "Python worker")
    (folder,) = folders
    return folder


@pytest.mark.parametrize(
    "when,how,group",
    [
        # As `deploy --local` and a stopped job signal a host: its whole process group.
        ("building", signal.SIGTERM, True),
        ("building", signal.SIGKILL, False),
        # Idle workers, as when a job's end kills the server.
        ("ready", signal.SIGKILL, False),
    ],
)
def test_a_data_host_that_ends_without_stopping_its_workers_leaves_no_shared_memory(
    dataset_cluster, when, how, group
):
    factory = "slow_factory" if when == "building" else "make"
    cluster = dataset_cluster(dataset=f"faults.py:{factory}", data_hosts=1)
    (host,) = cluster.data
    folder = workers_folder(cluster, host)
    if when == "building":
        wait_for((cluster.data_folder / "factory-started").exists, "factory")
        # A slow factory is not silent.
        wait_for(lambda: "building the dataset `faults.py:slow_factory`" in log_of(cluster), "log")
    else:
        wait_for(lambda: "Python dataset ready" in log_of(cluster), "ready dataset")
    # Before the server's handlers are in place, SIGTERM ends it as SIGKILL does: no
    # destructor runs.
    for pid in processes_of(cluster.root / host) if group else [cluster.servers[host].pid]:
        os.kill(pid, how)
    cluster.servers[host].wait()
    wait_for(lambda: not folder.exists(), f"removal of {folder}")
    wait_for(lambda: not processes_of(cluster.root / host), "end of the workers")


def test_a_start_that_fails_leaves_no_shared_memory(dataset_cluster):
    cluster = dataset_cluster(dataset="faults.py:slow_broken", data_hosts=1)
    (host,) = cluster.data
    folder = workers_folder(cluster, host)
    (cluster.data_folder / "factory-go").touch()
    assert cluster.wait_stopped(120)[host] not in (0, None)
    failure = (cluster.root / host / "output" / "failure").read_text()
    assert "RuntimeError: the index is corrupt" in failure, failure
    assert not folder.exists()


def test_a_data_host_stopping_its_busy_workers_logs_no_death(dataset_cluster, monkeypatch):
    cluster = dataset_cluster(dataset="faults.py:make", data_hosts=1)
    (cluster.data_folder / "slow").touch()
    use(monkeypatch, cluster)
    import hetgen

    with hetgen.Loader(epochs=1) as loader:
        next(iter(loader))
    # Leaving the loader tells the server training is over: it stops, its workers busy.
    (host,) = cluster.data
    assert cluster.wait_stopped(60)[host] == 0
    log = log_of(cluster)
    assert "Python dataset ready" in log, log
    for misleading in ("died", "OOM", "could not be built"):
        assert misleading not in log, log
