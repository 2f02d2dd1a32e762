"""Datasets that misbehave as users' own do, for hetgen's tests of what the job then says.

`make`: samples of an image and a label; files in the data folder steer it: `crash-<id>`
crashes the worker making sample <id> in native code (a segfault), `hang-<id>` makes it wait for
ever, `str-<id>` gives it a label of another type, `slow` makes every sample take a while.

`slow_factory` waits to return until the data folder holds `factory-go` (and says it began with
`factory-started`); `slow_broken` then raises instead. `iterable` and `iterable_sized` return
torch `IterableDataset`s, without and with `__len__`.
"""

import ctypes
import os
import time

import numpy as np
import torch


class Faults:
    def __init__(self, path, n=120):
        self.path = path
        self.n = n

    def __len__(self):
        return self.n

    def _marked(self, name):
        return os.path.exists(os.path.join(self.path, name))

    def __getitem__(self, i):
        if self._marked(f"crash-{i}"):
            ctypes.string_at(0)
        if self._marked(f"hang-{i}"):
            wait_for_ever()
        if self._marked("slow"):
            time.sleep(0.25)
        label = str(i) if self._marked(f"str-{i}") else i
        return {"image": np.full((3, 4), i % 256, dtype=np.uint8), "label": label}


def wait_for_ever():
    while True:
        time.sleep(60)


def make(path, hyperparameters):
    return Faults(path)


def wait_for_go(path):
    open(os.path.join(path, "factory-started"), "w").close()
    while not os.path.exists(os.path.join(path, "factory-go")):
        time.sleep(0.05)


def slow_factory(path, hyperparameters):
    wait_for_go(path)
    return Faults(path)


def slow_broken(path, hyperparameters):
    wait_for_go(path)
    raise RuntimeError("the index is corrupt")


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from range(10)


class SizedStream(Stream):
    def __len__(self):
        return 10


def iterable(path, hyperparameters):
    return Stream()


def iterable_sized(path, hyperparameters):
    return SizedStream()
