"""A dataset stored in shards (`hetgen.Shards`) for the tests: shard `i` holds `LENGTHS[i]`
samples (one holds none), each its id (`1000 × shard + position`), a field that needs the
sample's place, and a draw from Python's `random`, which the worker seeds per sample. Files in
the data folder make a sample raise (`raise-S-P`) or a shard slow (`slow-S`)."""

import os
import random
import time

import numpy as np

import hetgen

LENGTHS = [5, 9, 0, 7, 12, 3, 8, 6, 10, 4]


def ids():
    """Every sample's id."""
    return sorted(1000 * s + p for s, n in enumerate(LENGTHS) for p in range(n))


def make(path, hyperparameters):
    def read(name):
        shard = int(name.rsplit("-", 1)[1])
        for position in range(LENGTHS[shard]):
            if os.path.exists(os.path.join(path, f"raise-{shard}-{position}")):
                raise ValueError(f"record {position} of {name} is truncated")
            if os.path.exists(os.path.join(path, f"slow-{shard}")):
                time.sleep(0.2)
            yield {
                "id": 1000 * shard + position,
                "x": np.full(3, shard, dtype=np.float32),
                "noise": random.random(),
            }

    return hetgen.Shards([f"shard-{i}" for i in range(len(LENGTHS))], read)
