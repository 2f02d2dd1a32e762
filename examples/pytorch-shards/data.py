"""The digits read from WebDataset-style tar shards, decoded and augmented here.

`read(shard)` is the part of a WebDataset pipeline that turns one shard into samples: it groups
a tar's members by key (`<key>.png` and `<key>.json` make one sample), decodes the PNG with
torchvision and augments it. hetgen's data hosts get the shard list and this function from
`make_train_set` as `hetgen.Shards`: each epoch every rank gets its own shards (an order drawn
from the job's seed), each shard is read by one data host, in order, and every sample comes once.
Nothing here splits shards by node or by worker, as a WebDataset pipeline under DDP and a
DataLoader's workers would: that is what hetgen does. Before each sample, Python's, numpy's and
torch's random generators are seeded from (job seed, epoch, shard, position), so a sample's
augmentation does not depend on which host reads it.
"""

import glob
import json
import os
import tarfile

import torch
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms import v2

import hetgen

AUGMENT = [
    v2.RandomAffine(degrees=12, translate=(0.1, 0.1), scale=(0.9, 1.1)),
    v2.RandomApply([v2.GaussianBlur(3, sigma=(0.1, 0.7))], p=0.3),
    v2.RandomErasing(p=0.1, scale=(0.02, 0.06), value=0),
]


def transform(train):
    return v2.Compose(
        [
            v2.ToDtype(torch.float32, scale=True),
            *(AUGMENT if train else []),
            v2.Normalize([0.5], [0.5]),
        ]
    )


def members(shard):
    """`(key, {extension: bytes})` of a tar shard, a sample per key, in the tar's order."""
    with tarfile.open(shard) as tar:
        key, fields = None, {}
        for member in tar:
            if not member.isfile():
                continue
            base = os.path.basename(member.name)
            name, extension = base.split(".", 1)
            if name != key and fields:
                yield key, fields
                fields = {}
            key = name
            fields[extension] = tar.extractfile(member).read()
        if fields:
            yield key, fields


def read(shard, train=True):
    """The samples of one shard: `(image float32 [1, 8, 8], label int64)`."""
    augment = transform(train)
    for _, fields in members(shard):
        png = torch.frombuffer(bytearray(fields["png"]), dtype=torch.uint8)
        image = decode_image(png, mode=ImageReadMode.GRAY)
        yield augment(image), json.loads(fields["json"])["label"]


def shards(path):
    """The shards under a channel's folder, sorted: every host lists them in one order."""
    return sorted(glob.glob(os.path.join(path, "*.tar")))


def make_train_set(path, hyperparameters):
    return hetgen.Shards(shards(path), read=read)


def test_samples(path):
    """The held-out samples, unaugmented, for a plain loop on one process."""
    for shard in shards(path):
        yield from read(shard, train=False)
