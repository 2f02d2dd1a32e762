"""Images/s into a Python training loop that only touches each batch: `hetgen.Loader` (local
mode, the engine on Rust threads) or `torch.utils.data.DataLoader` with torchvision transforms
(`num_workers` = the cores), on the same JPEG folder and the same CPU set.

    python bench/python_loader.py hetgen|dataloader FOLDER CORES SECONDS

Prints `rate IMAGES_PER_S`. bench/python_loader.sh alternates the two and takes the ratio.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

# The fixture specs the tests share (tests/fixtures): the job is `loader-bench`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
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


def main():
    which, folder, cores, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    # Both loaders (and their workers, which inherit it) run on the same CPUs.
    os.sched_setaffinity(0, set(range(cores)))
    batches = {"hetgen": hetgen_batches, "dataloader": dataloader_batches}[which](folder, cores)
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
