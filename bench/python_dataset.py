"""Samples/s of a user's own torch Dataset (bench/folder_dataset.py) into a Python loop that only
touches each batch: through hetgen's Python workers (`hetgen.Loader`, local mode: the same
worker processes a data host runs, one per core) or through `torch.utils.data.DataLoader`
(`num_workers` = the cores), on the same CPU set.

    python bench/python_dataset.py hetgen|dataloader FOLDER CORES SECONDS

Prints `rate SAMPLES_PER_S`. bench/python_dataset.sh alternates the two and takes the ratio.
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests" / "fixtures"))
sys.path.insert(0, str(BENCH))
import hetgen_fixtures  # noqa: E402

BATCH = 32
WARMUP = 4


def hetgen_batches(folder, cores):
    import hetgen

    spec = hetgen_fixtures.load("py-dataset")
    spec["instance_group"][0]["count"] = 1
    spec["channel"][0]["uri"] = folder
    spec["pipeline"]["source"]["dataset"] = "folder_dataset.py:make"
    spec["pipeline"]["batch_size"] = BATCH
    spec["pipeline"]["shard_size"] = BATCH * 4
    spec["trainer"]["deterministic"] = False
    code = tempfile.mkdtemp()
    shutil.copy(BENCH / "folder_dataset.py", code)
    Path(code, "train.py").write_text("")
    os.environ["HETGEN_CODE_DIR"] = code
    path = hetgen_fixtures.write(Path(code) / "hetgen.toml", spec)
    loader = hetgen.Loader(str(path), mode="local", threads=cores, channels={"training": folder})
    while True:
        yield from loader


def dataloader_batches(folder, cores):
    import torch
    from folder_dataset import Folder

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        Folder(folder), batch_size=BATCH, shuffle=True, num_workers=cores, persistent_workers=True
    )
    while True:
        yield from loader


def main():
    which, folder, cores, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    # Both loaders (and their workers, which inherit it) run on the same CPUs.
    os.sched_setaffinity(0, set(range(cores)))
    batches = {"hetgen": hetgen_batches, "dataloader": dataloader_batches}[which](folder, cores)
    for _ in range(WARMUP):
        next(batches)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        images, labels = next(batches)
        images[0, 0, 0, 0]  # touch it, as a training step would read it
        samples += len(labels)
    print(f"rate {samples / (time.perf_counter() - start):.1f}")
    os._exit(0)  # leave the workers behind at once


if __name__ == "__main__":
    main()
