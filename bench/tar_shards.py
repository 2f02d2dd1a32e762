"""A dataset stored in shards for bench/python_loader.py: the bench's JPEG folder written as
WebDataset-style tar shards (`<key>.jpg` and `<key>.cls` per sample, shuffled once, 64 samples a
shard), and one reader of a shard, `read`: torchvision's `decode_jpeg` and v2
`RandomResizedCrop(224)` and `RandomHorizontalFlip` on the uint8 tensor, as bench/light_dataset.py
does per sample. Two ways to run the same reader:

- `make`: `hetgen.Shards` of the folder's shards, for hetgen's Python workers (one shard per
  worker, as a data host reads them);
- `ShardStream`: the `IterableDataset` a WebDataset user hands a DataLoader: each DataLoader
  worker reads its own part of the shard list (`get_worker_info`, as WebDataset's
  `split_by_worker` splits it), in a shuffled order.

    python bench/tar_shards.py JPEG_FOLDER OUT     (writes OUT/shard-NNNNN.tar)
"""

import glob
import io
import os
import random
import sys
import tarfile

import torch
from torchvision.io import decode_jpeg
from torchvision.transforms import v2

from labelled_files import labelled_files

PER_SHARD = 64
TRANSFORM = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])


def read(shard):
    """`(uint8 [3, 224, 224], label)` of every sample of a tar shard, in its order."""
    with tarfile.open(shard) as tar:
        image = None
        for member in tar:
            data = tar.extractfile(member).read()
            if member.name.endswith(".jpg"):
                image = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            else:
                yield TRANSFORM(image), int(data)


def shards(folder):
    return sorted(glob.glob(os.path.join(folder, "*.tar")))


def make(path, hyperparameters):
    import hetgen

    return hetgen.Shards(shards(path), read=read)


class ShardStream(torch.utils.data.IterableDataset):
    def __init__(self, folder):
        self.shards = shards(folder)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.shards if info is None else self.shards[info.id :: info.num_workers]
        while True:
            order = list(mine)
            random.shuffle(order)
            for shard in order:
                yield from read(shard)


def write(folder, out):
    items = labelled_files(folder)
    random.Random(0).shuffle(items)
    os.makedirs(out, exist_ok=True)
    for n in range(0, len(items), PER_SHARD):
        with tarfile.open(os.path.join(out, f"shard-{n // PER_SHARD:05d}.tar"), "w") as tar:
            for k, (path, label) in enumerate(items[n : n + PER_SHARD]):
                for name, data in ((f"{n + k:06d}.jpg", open(path, "rb").read()),
                                   (f"{n + k:06d}.cls", str(label).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2])
