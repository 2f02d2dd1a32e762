"""A dataset of the kinds of samples users' own datasets return, for hetgen's tests: a dict of
fields of several dtypes and shapes (an image, a mask, padded boxes, token ids, a bfloat16
tensor, a flag), some derived from the sample id alone and some random (numpy's and torch's
global generators, which hetgen's workers seed per sample).

Files in the data folder steer it, so a test can make it fail: `raise-<id>` makes sample <id>
raise, `die-<id>` kills the worker making sample <id> once (per host), `always-<id>` every time.
"""

import os
import signal

import numpy as np
import torch


class Fields:
    def __init__(self, path, n):
        self.path = path
        self.n = n

    def __len__(self):
        return self.n

    def _marked(self, name):
        return os.path.exists(os.path.join(self.path, name))

    def __getitem__(self, i):
        if self._marked(f"raise-{i}"):
            raise ValueError(f"sample {i} is corrupt")
        if self._marked(f"always-{i}"):
            os.kill(os.getpid(), signal.SIGKILL)
        once = os.path.join(self.path, f"die-{i}.{os.environ.get('SM_CURRENT_HOST', 'here')}")
        if self._marked(f"die-{i}") and not os.path.exists(once):
            open(once, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return expected(i) | {
            "noise": np.random.rand(3).astype(np.float32),
            "jitter": torch.rand(2, dtype=torch.float64),
        }


def expected(i):
    """The fields of sample `i` that do not depend on randomness."""
    boxes = np.zeros((4, 4), dtype=np.float32)
    boxes[: i % 4 + 1] = np.arange(4, dtype=np.float32) + i / 8
    return {
        "id": i,
        "image": np.full((3, 4, 5), i % 256, dtype=np.uint8),
        "mask": (np.arange(20, dtype=np.uint8).reshape(4, 5) + i) % 2,
        "target": (boxes, np.arange(6, dtype=np.int64) * i, np.float16(i / 3)),
        "half": torch.tensor([i / 7, -i], dtype=torch.bfloat16),
        "flag": i % 2 == 0,
    }


def make(path, hyperparameters):
    return Fields(path, int(hyperparameters.get("samples", 120)))
