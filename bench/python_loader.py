"""Images/s into a Python training loop that only touches each batch, on the same JPEG folder
and the same CPU set, from one of:

- `hetgen`: `hetgen.Loader` (local mode), hetgen's own pipeline on Rust threads;
- `dataloader`: `torch.utils.data.DataLoader` over torchvision's `ImageFolder` with v2
  transforms, `num_workers` = the cores;
- `workers`: a user's own torch Dataset (bench/folder_dataset.py) through `hetgen.Loader`
  (local mode): hetgen's Python workers, one per core, the processes a data host runs;
- `dataset-dataloader`: the same Dataset in a DataLoader with as many workers;
- `light-workers`, `light-dataloader`: the same two with bench/light_dataset.py (torchvision's
  `decode_jpeg` and v2 transforms on tensors), a lighter sample;
- `ops-workers`, `ops-dataloader`: the same two with bench/ops_dataset.py, that Dataset written
  with hetgen's image operations (`hetgen.image`);
- `const-workers`, `const-dataloader`: the same two with bench/const_dataset.py, which returns
  one ready sample: what moving a batch costs, alone;
- `shards-workers`, `shards-dataloader`: a dataset stored in tar shards (bench/tar_shards.py,
  FOLDER their folder): `hetgen.Shards` through hetgen's Python workers, one shard per worker,
  and the same reader as an `IterableDataset` that splits the shards by DataLoader worker, as a
  WebDataset pipeline does, in a DataLoader with as many workers.

    python bench/python_loader.py MODE FOLDER CORES SECONDS

Prints `rate IMAGES_PER_S`. bench/python_loader.sh alternates two modes and takes the ratio.
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
# The fixture specs the tests share (tests/fixtures): the jobs are `loader-bench` and
# `py-dataset`.
sys.path.insert(0, str(BENCH.parent / "tests" / "fixtures"))
sys.path.insert(0, str(BENCH))
import hetgen_fixtures  # noqa: E402


BATCH = 32
WARMUP = 4


def hetgen_batches(folder, cores):
    import hetgen

    spec = hetgen_fixtures.load("loader-bench")
    spec["channel"][0]["uri"] = folder
    spec["pipeline"]["batch_size"] = BATCH
    with tempfile.TemporaryDirectory() as tmp:
        path = hetgen_fixtures.write(Path(tmp) / "hetgen.toml", spec)
        loader = hetgen.Loader(str(path), threads=cores)
    while True:
        yield from loader


def dataloader_batches(folder, cores):
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    data = datasets.ImageFolder(folder, transform=transform)
    loader = torch.utils.data.DataLoader(
        data, batch_size=BATCH, shuffle=True, num_workers=cores, persistent_workers=True
    )
    while True:
        yield from loader


def workers_batches(folder, cores, dataset="folder_dataset.py"):
    import hetgen

    spec = hetgen_fixtures.load("py-dataset")
    spec["pipeline"]["source"]["dataset"] = f"{dataset}:make"
    spec["pipeline"]["batch_size"] = BATCH
    spec["pipeline"]["shard_size"] = BATCH * 4
    spec["trainer"]["deterministic"] = False
    code = tempfile.mkdtemp()
    for name in {dataset, "labelled_files.py", "tar_shards.py"}:
        shutil.copy(BENCH / name, code)
    Path(code, "train.py").write_text("")  # the spec's script, which this loop stands for
    os.environ["HETGEN_CODE_DIR"] = code
    path = hetgen_fixtures.write(Path(code) / "hetgen.toml", spec)
    loader = hetgen.Loader(str(path), mode="local", threads=cores, channels={"training": folder})
    while True:
        yield from loader


def dataset_dataloader_batches(folder, cores, dataset="folder_dataset.py"):
    import importlib

    import torch

    torch.set_num_threads(1)
    make = importlib.import_module(dataset.removesuffix(".py")).make
    loader = torch.utils.data.DataLoader(
        make(folder, {}), batch_size=BATCH, shuffle=True, num_workers=cores,
        persistent_workers=True,
    )
    while True:
        yield from loader


def shards_dataloader_batches(folder, cores):
    import torch

    from tar_shards import ShardStream

    torch.set_num_threads(1)
    loader = torch.utils.data.DataLoader(
        ShardStream(folder), batch_size=BATCH, num_workers=cores, persistent_workers=True
    )
    yield from loader


MODES = {
    "hetgen": hetgen_batches,
    "dataloader": dataloader_batches,
    "workers": workers_batches,
    "dataset-dataloader": dataset_dataloader_batches,
    "light-workers": lambda folder, cores: workers_batches(folder, cores, "light_dataset.py"),
    "light-dataloader": lambda folder, cores: dataset_dataloader_batches(
        folder, cores, "light_dataset.py"
    ),
    "const-workers": lambda folder, cores: workers_batches(folder, cores, "const_dataset.py"),
    "const-dataloader": lambda folder, cores: dataset_dataloader_batches(
        folder, cores, "const_dataset.py"
    ),
    "ops-workers": lambda folder, cores: workers_batches(folder, cores, "ops_dataset.py"),
    "ops-dataloader": lambda folder, cores: dataset_dataloader_batches(
        folder, cores, "ops_dataset.py"
    ),
    "shards-workers": lambda folder, cores: workers_batches(folder, cores, "tar_shards.py"),
    "shards-dataloader": shards_dataloader_batches,
}


def main():
    which, folder, cores, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    # Both loaders (and their workers, which inherit it) run on the same CPUs.
    os.sched_setaffinity(0, set(range(cores)))
    batches = MODES[which](folder, cores)
    for _ in range(WARMUP):
        next(batches)
    images, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(batches)
        batch[0][0, 0, 0, 0]  # touch it, as a training step would read it
        images += len(batch[1])
    print(f"rate {images / (time.perf_counter() - start):.1f}")
    os._exit(0)  # leave DataLoader workers and engine threads behind at once


if __name__ == "__main__":
    main()
