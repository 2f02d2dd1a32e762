"""``hetgen.Shards``: a dataset stored in shards, as the data hosts stream it.

A spec's ``dataset = "data.py:make"`` factory may return one instead of a map-style
``Dataset``::

    import hetgen

    def make(path, hyperparameters):
        shards = sorted(glob.glob(f"{path}/*.tar"))
        return hetgen.Shards(shards, read=read_tar)   # read_tar(shard) yields samples

hetgen's data service then deals each epoch's shards to the trainer ranks (an order drawn from
the job's seed, every ``world_size``-th shard to each rank, as WebDataset's ``split_by_node``
does) and each shard to one data host at a time, which calls ``read(shard)`` and batches what it
yields, in order. Every sample is delivered once per epoch: a data host that fails or falls
behind hands the rest of its shard to another, which reads the shard again from its start and
skips what was delivered (``read`` must yield the same samples each time it is called for a
shard); a resumed epoch does the same for the shard it stopped in.

Randomness in ``read``: before each sample is produced, Python's ``random``, numpy's global
generator and torch's are seeded from (job seed, epoch, shard, position), so augmentations are
the same whichever host reads the shard.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


class Shards:
    """The shards of a dataset and how to read one.

    ``shards``: the shards, in a fixed order (file paths, URLs, row-group ids: anything
    ``read`` takes; printed in errors). ``read(shard)``: an iterable of that shard's samples,
    each what a map-style dataset's ``__getitem__`` would return (tensors, arrays, numbers, and
    tuples, lists or dicts of them), decoded and augmented as the user's pipeline does.
    """

    def __init__(self, shards: Sequence[Any], read: Callable[[Any], Iterable[Any]]):
        shards = list(shards)
        if not shards:
            raise ValueError("hetgen.Shards needs at least one shard")
        if not callable(read):
            raise TypeError(f"hetgen.Shards' read must be callable, not {type(read).__name__}")
        self.shards = shards
        self.read = read

    def __len__(self) -> int:
        """The number of shards (not of samples, which are learned as the shards are read)."""
        return len(self.shards)

    def __repr__(self) -> str:
        return f"Shards({len(self.shards)} shards, read={getattr(self.read, '__name__', self.read)!r})"
