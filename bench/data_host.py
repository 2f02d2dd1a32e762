"""One data host running a user's torch Dataset (bench/folder_dataset.py) with WORKERS worker
processes, streaming to one trainer process on the same machine (loopback): hetgen's data
server and `hetgen.Loader`, or the data plane of AWS's published sample (bench/aws_reference.py).
Samples/s into the trainer's loop, after the servers are up and 4 warm-up batches.

    python bench/data_host.py hetgen|aws FOLDER WORKERS SECONDS
    python bench/data_host.py hetgen-kill|aws-kill FOLDER WORKERS BATCHES

Prints `rate SAMPLES_PER_S`. The `-kill` forms kill a data host after BATCHES batches of one
epoch and print what the trainer saw: hetgen's job has two data hosts and goes on with the
other (`epoch N samples, each once: True`); the reference design has its one.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests" / "fixtures"))
sys.path.insert(0, str(BENCH.parent / "python" / "tests"))
import hetgen_fixtures  # noqa: E402


def hetgen_cluster(folder, workers, hosts):
    from conftest import Cluster

    root = Path(tempfile.mkdtemp())
    shutil.copy(BENCH / "folder_dataset.py", root)
    (root / "train.py").write_text("")
    spec = hetgen_fixtures.load("py-dataset")
    spec["instance_group"][0]["count"] = hosts
    spec["pipeline"]["source"]["dataset"] = "folder_dataset.py:make"
    spec["pipeline"]["batch_size"] = 32
    spec["pipeline"]["shard_size"] = 128
    spec["pipeline"]["threads"] = workers
    spec["trainer"]["deterministic"] = False
    hetgen_fixtures.write(root / "hetgen.toml", spec)
    env = {"HETGEN_CODE_DIR": str(root), "HETGEN_PYTHON": sys.executable}
    cluster = Cluster(root, root / "hetgen.toml", env)
    cluster.start(Path(folder))
    os.environ.update(cluster.trainer_env())
    return cluster


def hetgen_batches():
    import hetgen

    loader = hetgen.Loader(threads=0, audit=False)
    while True:
        yield from loader


def aws_server(folder, workers):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(BENCH / "aws_reference.py"), str(port), folder, str(workers)],
        stdout=subprocess.DEVNULL,
    )
    return server, port


def measure(batches, seconds):
    for _ in range(4):
        next(batches)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        images, labels = next(batches)
        images[0, 0, 0, 0]
        samples += len(labels)
    return samples / (time.perf_counter() - start)


def killed(which, folder, workers, after):
    if which == "hetgen-kill":
        import hetgen

        cluster = hetgen_cluster(folder, workers, 2)
        audit = Path(tempfile.mkdtemp()) / "audit.txt"
        os.environ["HETGEN_AUDIT_FILE"] = str(audit)
        try:
            loader = hetgen.Loader(threads=0, epochs=1)
            for n, _ in enumerate(loader):
                if n == after:
                    cluster.kill(cluster.data[0])
            ids = [line.split()[1] for line in audit.read_text().splitlines()]
            once = len(ids) == len(set(ids)) == loader.samples_per_epoch
            print(f"trainer finished the epoch with {cluster.data[0]} killed after {after} "
                  f"batches: {len(ids)} of {loader.samples_per_epoch} samples, each once: {once}; "
                  f"batches by host {loader.batches_by_source}", flush=True)
        finally:
            cluster.stop()
    else:
        from aws_reference import batches

        server, port = aws_server(folder, workers)
        source = batches(port)
        try:
            for n in range(10**9):
                next(source)
                if n == after:
                    server.kill()
        except Exception as e:  # what the sample's training loop would die of
            print(f"trainer failed after {n} batches: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:120]}", flush=True)


def main():
    which, folder, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if which.endswith("-kill"):
        killed(which, folder, workers, int(sys.argv[4]))
        os._exit(0)
    seconds = float(sys.argv[4])
    if which == "hetgen":
        cluster = hetgen_cluster(folder, workers, 1)
        try:
            print(f"rate {measure(hetgen_batches(), seconds):.1f}", flush=True)
        finally:
            cluster.stop()
    else:
        from aws_reference import batches

        server, port = aws_server(folder, workers)
        try:
            print(f"rate {measure(batches(port), seconds):.1f}", flush=True)
        finally:
            server.kill()
    os._exit(0)


if __name__ == "__main__":
    main()
