"""hetgen.Loader against real data-server processes on loopback addresses, and in-process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import hetgen
import hetgen.torch
from conftest import SCRIPTS, TOKEN, audit, run_script

pytestmark = pytest.mark.timeout(300)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_plain_pytorch_loop_fed_by_two_data_servers_learns_the_digits(cluster_factory, digits):
    cluster = cluster_factory(data_hosts=2)
    result = run_script(
        "train_digits.py",
        cluster.trainer_env(),
        "--epochs",
        "8",
        "--test-folder",
        str(digits / "test"),
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["mode"] == "remote"
    assert len(report["hosts"]) == 2
    assert report["held_out"] == 360
    assert report["batches"] == 8 * report["batches_per_epoch"]
    assert report["accuracy"] >= 0.90, report
    # Leaving the `with` block told the servers to stop, and they did.
    assert cluster.wait_stopped(20) == {"algo-1": 0, "algo-2": 0}


def test_two_ranks_share_every_epoch_exactly_once_while_a_server_dies(cluster_factory, tmp_path):
    audit_file = tmp_path / "audit.txt"
    cluster = cluster_factory(
        data_hosts=3, batch_size=16, shard_size=48, extra_env={"HETGEN_AUDIT_FILE": str(audit_file)}
    )
    port = free_port()
    ranks = []
    for rank in range(2):
        env = {
            **os.environ,
            **cluster.trainer_env(),
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [sys.executable, str(SCRIPTS / "stream.py"), "--out", str(tmp_path / f"r{rank}")]
        command += ["--epochs", "2", "--distributed", "--sleep", "0.02", "--shutdown"]
        ranks.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))
    # Kill a server once a third of the first epoch has been yielded.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if audit_file.exists() and len(audit_file.read_text().splitlines()) >= 480:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the ranks never got a third of the way through the first epoch")
    cluster.kill("algo-2")
    for rank in ranks:
        _, err = rank.communicate(timeout=180)
        assert rank.returncode == 0, err

    per_rank = [records(tmp_path / f"r{rank}") for rank in range(2)]
    # Equal batch counts in every epoch (DDP's all-reduce would have hung otherwise).
    for epoch in range(2):
        counts = [sum(1 for r in recs if r["epoch"] == epoch) for recs in per_rank]
        assert counts[0] == counts[1] > 0
    for epoch in range(2):
        ids = [
            {i for r in recs if r["epoch"] == epoch for i in r["ids"]} for recs in per_rank
        ]
        assert not ids[0] & ids[1], "ranks got the same samples"
        # 1437 training images, 718 per rank: one left over as the epoch plan's remainder.
        assert len(ids[0]) + len(ids[1]) == 1436
    # The audit file (what Python received, from both processes) has every sample once.
    lines = audit(audit_file)
    assert len(lines) == 2 * 1436
    assert max(Counter(lines).values()) == 1
    # Rank 0 stopped the two servers left standing after both ranks passed the barrier.
    codes = cluster.wait_stopped(20)
    assert codes["algo-1"] == 0 and codes["algo-3"] == 0


def test_a_state_saved_mid_epoch_resumes_in_a_new_process_byte_for_byte(cluster_factory, tmp_path):
    cluster = cluster_factory(data_hosts=2, batch_size=32, shard_size=96, deterministic=True)
    env = cluster.trainer_env()
    state = str(tmp_path / "state.json")
    run_script("stream.py", env, "--epochs", "2", "--out", str(tmp_path / "whole"))
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "first"),
        "--stop-after", "31", "--state", state,
    )
    saved = json.loads(Path(state).read_text())
    assert saved["epoch"] == 0 and saved["partial"], saved
    run_script(
        "stream.py", env, "--epochs", "2", "--out", str(tmp_path / "rest"),
        "--resume", "--state", state,
    )
    whole = records(tmp_path / "whole")
    resumed = records(tmp_path / "first") + records(tmp_path / "rest")
    assert len(whole) == 2 * 45
    assert [r["sha256"] for r in resumed] == [r["sha256"] for r in whole]
    assert [r["ids"] for r in resumed] == [r["ids"] for r in whole]


def test_local_and_remote_mode_yield_identical_batches(cluster_factory, digits, tmp_path):
    cluster = cluster_factory(data_hosts=2, deterministic=True)
    run_script("stream.py", cluster.trainer_env(), "--out", str(tmp_path / "remote"))
    run_script(
        "stream.py",
        {},
        "--spec", str(cluster.spec), "--mode", "local",
        "--channels", json.dumps({"training": str(digits / "train")}),
        "--out", str(tmp_path / "local"),
    )
    remote, local = records(tmp_path / "remote"), records(tmp_path / "local")
    assert len(remote) == len(local) == 45
    assert [r["sha256"] for r in remote] == [r["sha256"] for r in local]


def test_batches_reach_numpy_and_torch_without_a_copy(cluster_factory, monkeypatch, digits):
    cluster = cluster_factory(data_hosts=1)
    for name, value in cluster.trainer_env().items():
        monkeypatch.setenv(name, value)
    local = hetgen.Loader(cluster.spec, channels={"training": digits / "train"}, epochs=1)
    with hetgen.Loader() as remote:
        for loader in (remote, local):
            images, labels = batch = next(iter(loader))
            assert images.dtype == np.uint8 and images.shape == (32, 8, 8, 1)
            assert labels.dtype == np.int64 and labels.shape == (32,)
            assert images.flags.c_contiguous and images.flags.writeable
            # The array is a view of the batch's Rust buffer, which it keeps alive.
            assert type(images.base).__name__ == "BatchMemory"
            assert len(images.base) == images.nbytes
            tensor, _ = hetgen.torch.to_tensors(batch)
            assert tensor.data_ptr() == images.ctypes.data
            x, y = hetgen.torch.to_device(batch, "cpu", loader.normalization)
            assert x.shape == (32, 1, 8, 8) and x.dtype == torch.float32
            # Laid out as a model's parameters are, not in the batch's NHWC strides (with one
            # channel `is_contiguous()` holds for both, so the strides themselves are checked).
            assert x.stride() == (64, 64, 8, 1)
            expected = (images.astype(np.float32).transpose(0, 3, 1, 2) / 255 - 0.5) / 0.5
            assert np.allclose(x.numpy(), expected)
            assert torch.equal(y, torch.from_numpy(labels))
            nhwc, _ = hetgen.torch.to_device(
                batch, "cpu", loader.normalization, memory_format=torch.channels_last)
            assert nhwc.stride() == (64, 1, 8, 1)
            assert torch.equal(nhwc, x)


def test_epochs_lengths_and_state_follow_the_dataloader_idioms(digits, tmp_path):
    spec = tmp_path / "hetgen.toml"
    from conftest import write_spec

    write_spec(tmp_path, name="idioms", data_hosts=1, train=digits / "train", batch_size=100,
               shard_size=300, deterministic=True)
    loader = hetgen.Loader(spec, channels={"training": digits / "train"}, epochs=2,
                           rank=1, world_size=2)
    # 718 samples of this rank's half, shards of 300: 300 + 300 + 118 → 3 + 3 + 2 batches.
    assert len(loader) == 8
    epochs = [[b.epoch for b in loader] for _ in range(3)]
    assert epochs == [[0] * 8, [1] * 8, []]
    state = loader.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert state["epoch"] == 1 and len(state["done"]) == 3 and state["rank"] == 1

    other = hetgen.Loader(spec, channels={"training": digits / "train"}, epochs=2,
                          rank=0, world_size=2)
    with pytest.raises(hetgen.ConfigurationError, match="rank=1, this loader rank=0"):
        other.load_state_dict(state)
    # A list of every rank's state: each rank picks its own.
    other.load_state_dict([state, {**other.state_dict(), "epoch": 1, "done": [], "partial": []}])
    assert len(list(other)) == 8 and other.epoch == 2


def test_a_wrong_token_is_refused_with_the_servers_word(cluster_factory, monkeypatch):
    cluster = cluster_factory(data_hosts=1)
    for name, value in cluster.trainer_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HETGEN_JOB_TOKEN", "not-the-job-token-at-all")
    with pytest.raises(hetgen.HandshakeError, match="algo-1 refused the handshake: Unauthenticated"):
        hetgen.Loader(connect_timeout=20)


def test_an_unreachable_host_fails_naming_it_and_the_timeout(cluster_factory):
    cluster = cluster_factory(data_hosts=1, start=False)
    port = free_port()
    with pytest.raises(hetgen.ConnectError) as raised:
        hetgen.Loader(cluster.spec, hosts=[f"127.0.0.1:{port}"], token=TOKEN, connect_timeout=1)
    assert f"data host 127.0.0.1 could not be reached within 1s" in str(raised.value)
    assert isinstance(raised.value, hetgen.HetgenError)


def test_a_malformed_spec_names_the_file_line_and_column(tmp_path):
    spec = tmp_path / "hetgen.toml"
    spec.write_text('version = 1\n[job]\nname = "x"\nseed = "seven"\n')
    with pytest.raises(hetgen.SpecError, match=r"hetgen\.toml:4:8: "):
        hetgen.Loader(spec)


def test_bad_arguments_are_configuration_errors(cluster_factory):
    spec = cluster_factory(data_hosts=1, start=False).spec
    with pytest.raises(hetgen.ConfigurationError, match="rank 2 is not one of 2 ranks"):
        hetgen.Loader(spec, rank=2, world_size=2)
    with pytest.raises(hetgen.ConfigurationError, match="no job"):
        hetgen.Loader()
    with pytest.raises(hetgen.ConfigurationError, match="not `host:port`"):
        hetgen.Loader(spec, hosts=["algo-1"], token=TOKEN)
    with pytest.raises(hetgen.ConfigurationError, match="mode `fast` is neither"):
        hetgen.Loader(spec, mode="fast")


def test_ctrl_c_interrupts_a_loader_waiting_for_its_servers(cluster_factory):
    cluster = cluster_factory(data_hosts=1, start=False)
    # Python's own Ctrl-C handler, whatever the test runner inherited: a shell that starts a job
    # in the background hands it SIGINT ignored, and Python then never raises KeyboardInterrupt.
    code = (
        "import signal, sys, hetgen\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "print('waiting', flush=True)\n"
        "hetgen.Loader(connect_timeout=600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **cluster.trainer_env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(1)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=10)
    assert child.returncode != 0
    assert "KeyboardInterrupt" in err


def test_import_hetgen_leaves_torch_alone():
    code = "import sys, hetgen; import hetgen.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_hybrid_input_mixes_this_hosts_batches_with_the_servers_identically(
    cluster_factory, digits, monkeypatch
):
    cluster = cluster_factory(data_hosts=2, deterministic=True)
    for name, value in cluster.trainer_env().items():
        monkeypatch.setenv(name, value)

    def stream(**options):
        loader = hetgen.Loader(epochs=1, audit=False, **options)
        return loader, [(images.tobytes(), labels.tolist()) for images, labels in loader]

    remote_loader, remote = stream(threads=0)
    hybrid_loader, hybrid = stream(threads=1, channels={"training": digits / "train"})
    assert (remote_loader.threads, hybrid_loader.threads) == (0, 1)
    # Deterministic mode: the same batches in the same order, whichever side made each.
    assert hybrid == remote
    sources = hybrid_loader.batches_by_source
    assert sources["local"] > 0, sources
    assert sum(sources.values()) == len(hybrid), sources
    assert "local" not in remote_loader.batches_by_source


def test_rank_0_prints_progress_lines_hetgen_reads_as_the_jobs_stall(digits, tmp_path, capsys):
    from conftest import write_spec

    spec = tmp_path / "hetgen.toml"
    write_spec(tmp_path, name="progress", data_hosts=1, train=digits / "train", batch_size=50,
               shard_size=300, deterministic=True)
    channels = {"training": digits / "train"}
    loader = hetgen.Loader(spec, channels=channels, epochs=1, progress_every=4)
    for _ in loader:
        time.sleep(0.01)  # the "step"
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("hetgen-step ")]
    # 1437 samples / 50 = 29 batches; lines after batches 5, 9, … 29 (the first is warm-up).
    assert [int(l.split()[1].split("=")[1]) for l in lines] == [5, 9, 13, 17, 21, 25, 29]
    for line in lines:
        fields = dict(kv.split("=") for kv in line.split()[1:])
        assert set(fields) == {"step", "step_ms", "wait_ms", "samples_per_s"}
        assert float(fields["step_ms"]) >= 10.0
        assert 0.0 <= float(fields["wait_ms"]) <= float(fields["step_ms"])
        assert float(fields["samples_per_s"]) > 0.0

    # Only rank 0 speaks for the job, and 0 turns it off.
    for kwargs in ({"rank": 1, "world_size": 2}, {"progress_every": 0}):
        quiet = hetgen.Loader(spec, channels=channels, epochs=1, **kwargs)
        list(quiet)
        assert "hetgen-step" not in capsys.readouterr().out
    with pytest.raises(hetgen.ConfigurationError, match="progress_every"):
        hetgen.Loader(spec, channels=channels, progress_every=-1)
