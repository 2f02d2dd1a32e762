"""Writes the digits as WebDataset-style tar shards, with the standard library alone.

`data/{train,test}/<label>/<n>.png` (what `hetgen new` wrote) become
`data/shards/{train,test}/digits-NNNNN.tar`, 100 samples a shard: each sample two members of
one key, `<key>.png` (the image's bytes, as they were) and `<key>.json` (`{"label": L}`), one
after the other, as WebDataset's `ShardWriter` writes them. The samples are shuffled once, with
a fixed seed, before they are cut into shards, as large datasets are shuffled when they are
written: a shard then holds every label, and reading shards in a random order (hetgen draws one
per epoch) mixes the rest.

    python make_shards.py            (once, before `hetgen deploy`; then upload data/shards)
"""

import io
import json
import os
import random
import tarfile

PER_SHARD = 100


def samples(folder):
    """`(key, png bytes, label)` of every image under `folder/<label>/`."""
    out = []
    for label in sorted(os.listdir(folder)):
        for name in sorted(os.listdir(os.path.join(folder, label))):
            with open(os.path.join(folder, label, name), "rb") as f:
                out.append((f"{label}-{os.path.splitext(name)[0]}", f.read(), int(label)))
    return out


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def write(split):
    items = samples(os.path.join("data", split))
    random.Random(0).shuffle(items)
    out = os.path.join("data", "shards", split)
    os.makedirs(out, exist_ok=True)
    for n in range(0, len(items), PER_SHARD):
        path = os.path.join(out, f"digits-{n // PER_SHARD:05d}.tar")
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for key, png, label in items[n : n + PER_SHARD]:
                add(tar, f"{key}.png", png)
                add(tar, f"{key}.json", json.dumps({"label": label}).encode())
    print(f"{split}: {len(items)} samples in {-(-len(items) // PER_SHARD)} shards under {out}")


if __name__ == "__main__":
    for split in ("train", "test"):
        write(split)
