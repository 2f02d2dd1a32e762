"""Datasets of known cost for the sizing tests (`hetgen profile`, `hetgen plan --profile`).

numpy only, so the wheel's own venv (which has no torch) runs them too:

- `make_busy`: every sample costs the same CPU work (a pure-Python loop, so no library starts
  threads of its own), then returns 32 float32 features and a label;
- `make_cheap`: next to nothing per sample, so a training loop that reads it is never waiting.

A file `raise-<id>` in the data folder makes sample <id> raise, as a corrupt sample would.
"""

import os

import numpy as np

FEATURES = 32


class Samples:
    def __init__(self, path, n, work):
        self.path = path
        self.n = n
        self.work = work
        # Fixed inputs, the same in every process.
        self.inputs = np.random.default_rng(0).standard_normal((n, FEATURES)).astype(np.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if os.path.exists(os.path.join(self.path, f"raise-{i}")):
            raise ValueError(f"sample {i} is corrupt")
        acc = 0
        for j in range(self.work):
            acc += j * j % 7
        noise = np.random.rand(FEATURES).astype(np.float32) * 0.01
        return self.inputs[i] + noise + np.float32(acc % 2), i % 10


def make_busy(path, hyperparameters):
    return Samples(path, 2000, 30_000)


def make_cheap(path, hyperparameters):
    return Samples(path, 2000, 0)
