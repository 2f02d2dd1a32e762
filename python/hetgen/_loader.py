"""``hetgen.Loader``: the DataLoader idioms over hetgen's Rust client and engine."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Iterator, Mapping, Sequence, Union

from hetgen import _native
from hetgen._native import ConfigurationError

log = logging.getLogger("hetgen")

PathLike = Union[str, "os.PathLike[str]"]

#: Version of the dictionary ``Loader.state_dict`` returns.
STATE_VERSION = 1


class Batch(tuple):
    """One batch: unpacks as ``images, labels``.

    ``images`` is a ``uint8`` array ``[n, height, width, channels]`` and ``labels`` an ``int64``
    array ``[n]``, both over memory Rust filled (no copy was made to hand them over). The batch
    also carries ``sample_ids`` (``uint64`` ``[n]``), ``epoch``, ``shard`` and ``index`` (its
    place in the epoch plan), for auditing or debugging.
    """

    def __new__(cls, images, labels, sample_ids, epoch: int, shard: int, index: int):
        batch = super().__new__(cls, (images, labels))
        batch.sample_ids = sample_ids
        batch.epoch = epoch
        batch.shard = shard
        batch.index = index
        return batch

    @property
    def images(self):
        return self[0]

    @property
    def labels(self):
        return self[1]

    def __repr__(self) -> str:
        return (
            f"Batch(images={self[0].dtype}{list(self[0].shape)}, labels={len(self[1])}, "
            f"epoch={self.epoch}, shard={self.shard}, index={self.index})"
        )


def _nested(batch) -> Any:
    """A Python dataset's batch (a native ``TensorBatch``) in the structure its samples have:
    its arrays, already numpy views of the batch's one buffer, nested in tuples, lists and dicts
    as the JSON ``structure`` says."""
    return _build(json.loads(batch.structure), batch.arrays)


def _build(node, arrays):
    """``node`` of a structure with its leaves' arrays. A function of its own, not a closure
    over ``arrays``: a recursive closure is a reference cycle (the function, its cell, the
    function), which would keep every batch's memory alive until Python's cycle collector ran
    (over a hundred batches at once, in bursts), not until the loop lets the batch go."""
    if isinstance(node, int):
        return arrays[node]
    if "tuple" in node:
        return tuple(_build(n, arrays) for n in node["tuple"])
    if "list" in node:
        return [_build(n, arrays) for n in node["list"]]
    return {key: _build(n, arrays) for key, n in node["dict"]}


class _Progress:
    """``hetgen-step`` lines from the input's side of a user's training loop, for the progress
    line of ``hetgen deploy --local``/``--wait`` and ``hetgen logs``: the loader sees when each
    batch is asked for and how long it took to arrive, so it knows the step time and the share
    of it spent waiting for data (the stall), though not the loss. Every ``every`` batches,
    from the second on (the first includes connecting and the first pipeline fill)."""

    def __init__(self, every: int, batch_size: int) -> None:
        self.every = every
        self.batch_size = batch_size
        self.taken = 0
        self.window_start: float | None = None
        self.window_batches = 0
        self.waited = 0.0

    def took(self, waited: float) -> None:
        self.taken += 1
        if not self.every:
            return
        now = time.monotonic()
        if self.window_start is None:
            self.window_start = now
            return
        self.window_batches += 1
        self.waited += waited
        if self.window_batches < self.every:
            return
        elapsed = now - self.window_start
        n = self.window_batches
        line = _native.step_line(
            self.taken,
            1000 * elapsed / n,
            1000 * self.waited / n,
            n * self.batch_size / elapsed if elapsed > 0 else 0.0,
        )
        print(line, flush=True)
        self.window_start, self.window_batches, self.waited = now, 0, 0.0


class _Replay:
    """The input of ``hetgen profile --trainer``: a few batches the job's dataset made on this
    host, handed out again and again from memory, so that the training loop never waits for
    data and its step lines give the rate it trains at when input costs nothing (the trainer's
    side of sizing). Ends every epoch once ``steps`` batches have been handed out in all."""

    #: Distinct batches made before the replay starts: enough that the loop sees varied
    #: samples, few enough that making them takes seconds.
    BATCHES = 8

    def __init__(self, made: list, steps: int) -> None:
        self.made = made
        self.left = steps
        self.next = 0

    def take(self):
        if self.left == 0:
            return None
        self.left -= 1
        batch = self.made[self.next % len(self.made)]
        self.next += 1
        return batch


def _replay_request(spec, mode, hosts) -> tuple[str, int] | None:
    """``(spec, steps)`` when ``hetgen profile --trainer`` runs this script (its variables set)
    and the script left the input to the environment (no ``spec``, ``mode`` or ``hosts``)."""
    source = os.environ.get(_native.REPLAY_VAR)
    if not source or spec is not None or mode is not None or hosts is not None:
        return None
    return source, _env_int(_native.REPLAY_STEPS_VAR, 1_000_000)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigurationError(f"{name}={value!r} is not an integer") from None
    if number < 0:
        raise ConfigurationError(f"{name}={value!r} is negative")
    return number


class Loader:
    """Batches of one training process, from hetgen's data servers or its in-process engine.

    Remote (inside a hetgen job: SageMaker or ``hetgen deploy --local``)::

        loader = hetgen.Loader()                 # hosts, token and job from the environment

    Local (no data group: the engine on this host's cores)::

        loader = hetgen.Loader("hetgen.toml", channels={"training": "data/train"})

    Then, as with a DataLoader::

        for epoch in range(epochs):
            for images, labels in loader:        # one epoch of this rank
                ...

    Args:
        spec: a ``hetgen.toml`` (validated as ``hetgen validate`` does) or a rendered
            ``job.json``. Inside a job, defaults to the job's ``job.json``.
        mode: ``"remote"`` or ``"local"``. Default: remote when ``hosts`` are given or the job
            has data hosts, local otherwise (as hetgen's own trainer chooses).
        hosts: ``"host:port"`` of every data server, to stream from servers outside a job.
        token: the job's token (default: ``HETGEN_JOB_TOKEN``).
        channels: channel name → local folder (local mode; default: the job's channel folders,
            or the spec's ``local_path``\\ s).
        threads: engine threads (local mode; default: this host's cores divided among its
            ``LOCAL_WORLD_SIZE`` ranks, so ranks never oversubscribe it). In remote mode, the
            threads of this host's own pipeline beside the data servers (hybrid input; default
            inside a job: the spec's ``reserve_vcpus``/``trainer_threads`` share of the host,
            divided among its ``LOCAL_WORLD_SIZE`` ranks; ``0`` turns it off).
        rank, world_size, local_rank: default to ``torchrun``'s ``RANK``, ``WORLD_SIZE`` and
            ``LOCAL_RANK``, else a single process. Every rank gets a disjoint part of each epoch
            with the same number of batches.
        deterministic: yield batches in plan order whichever server finishes first (default:
            the spec's ``trainer.deterministic``).
        epochs: stop after this many epochs (default: as many as are iterated).
        prefetch: batches kept ready ahead of the training loop.
        connect_timeout, stall_timeout: seconds to keep trying an unreachable data host (default
            600), and after which a silent server's shards go to the others (default 60).
        audit: record the batches in ``HETGEN_AUDIT_FILE`` when it is set (turn it off for an
            evaluation loader, so the file holds the training run alone).
        progress_every: on rank 0, print a ``hetgen-step`` line (batches taken, step and wait
            time, samples/s) every this many batches, which hetgen's commands show as the job's
            progress and stall; 0 prints none (default 50).

    Under ``hetgen profile --trainer`` a loader that leaves its input to the environment (no
    ``spec``, ``mode`` or ``hosts``) makes a few batches of the job's dataset on this host, then
    hands them out again from memory for the number of steps the profile asks, printing a step
    line every 10: the script trains at its full rate, which the profile measures.
    """

    def __init__(
        self,
        spec: PathLike | None = None,
        *,
        mode: str | None = None,
        hosts: Sequence[str] | None = None,
        token: str | None = None,
        channels: Mapping[str, PathLike] | None = None,
        threads: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        local_rank: int | None = None,
        deterministic: bool | None = None,
        epochs: int | None = None,
        prefetch: int = 2,
        connect_timeout: float | None = None,
        stall_timeout: float | None = None,
        audit: bool = True,
        progress_every: int = 50,
    ) -> None:
        if progress_every < 0:
            raise ConfigurationError(f"progress_every={progress_every} is negative")
        replay = _replay_request(spec, mode, hosts)
        if replay is not None:
            # The job's own dataset, on this host's cores, then replayed (see `_Replay`).
            spec, mode = replay[0], "local"
            # `hetgen profile --trainer` times the steps from these lines: often enough to
            # measure a short run.
            progress_every = 10
        # torchrun's variables, else one process.
        rank = rank if rank is not None else _env_int("RANK", 0)
        world_size = world_size if world_size is not None else _env_int("WORLD_SIZE", 1)
        self.local_rank = local_rank if local_rank is not None else _env_int("LOCAL_RANK", 0)
        local_world = _env_int("LOCAL_WORLD_SIZE", 1)
        self._native = _native.NativeLoader(
            spec=None if spec is None else os.fspath(spec),
            mode=mode,
            hosts=None if hosts is None else list(hosts),
            token=token,
            channels=None
            if channels is None
            else {name: os.fspath(path) for name, path in channels.items()},
            threads=threads,
            rank=rank,
            world_size=world_size,
            local_world_size=local_world,
            deterministic=deterministic,
            epochs=epochs,
            prefetch=prefetch,
            connect_timeout=connect_timeout,
            stall_timeout=stall_timeout,
            audit=audit,
        )
        # None for a dataset of shards: its epochs end where the shards do.
        self._len = self._native.batches_per_epoch()
        self._epoch_end = _EpochEnd(self.world_size) if self._len is None else None
        self._progress = _Progress(progress_every if self.rank == 0 else 0, self.batch_size)
        # The job never changes: read once, not on every batch's `to_device`.
        self._normalization = self._native.normalization
        self._replay = None
        if replay is not None:
            made = []
            for _ in range(min(_Replay.BATCHES, self._len or _Replay.BATCHES)):
                item = self._native.next_batch()
                if item is None:
                    break
                made.append(self._python_batch(item))
            # The dataset's workers go idle: the replay costs the training loop no CPU.
            self._native.close()
            self._replay = _Replay(made, replay[1])

    # -- what it streams -------------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"remote"`` or ``"local"``."""
        return self._native.mode

    @property
    def rank(self) -> int:
        return self._native.rank

    @property
    def world_size(self) -> int:
        return self._native.world_size

    @property
    def batch_size(self) -> int:
        return self._native.batch_size

    @property
    def samples_per_epoch(self) -> int:
        """Samples of one epoch of the whole job (every rank's together): the source's, as the
        data servers report it (a Python dataset's ``len()``)."""
        return self._native.samples_per_epoch

    @property
    def shards(self) -> int | None:
        """A dataset of shards (:class:`hetgen.Shards`): how many it has; ``None`` otherwise."""
        return self._native.shards

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """``(height, width, channels)`` of every sample."""
        return tuple(self._native.output_shape)

    @property
    def normalization(self) -> list[tuple[list[float], list[float]]]:
        """The spec's ``normalize`` stages as ``(mean, std)``: they run on the device
        (:func:`hetgen.torch.to_device`), so batches travel as compact ``uint8``."""
        return self._normalization

    @property
    def threads(self) -> int:
        """Threads of this host's own pipeline: all of the input (local), or beside the data
        servers (remote with hybrid input; 0 without)."""
        return self._native.threads

    @property
    def batches_by_source(self) -> dict[str, int]:
        """Batches yielded so far per source (remote): each data host, and ``"local"`` for this
        host's own pipeline (hybrid input)."""
        return self._native.batches_by_source

    @property
    def hosts(self) -> list[str]:
        """The data servers streamed from (remote mode)."""
        return self._native.hosts

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._native.remaining_in_epoch()[0]

    def __len__(self) -> int:
        """Batches of one epoch of this rank (the same for every rank). A dataset of shards
        has no length: its shards' lengths are learned as they are read, as an
        ``IterableDataset``'s are (``TypeError``, which ``len()`` callers such as schedulers
        handle)."""
        if self._len is None:
            raise TypeError(
                "a dataset of shards (hetgen.Shards) has no length before it is read: count "
                "steps as the loop goes, or set the schedule by epochs"
            )
        return self._len

    def __iter__(self) -> Iterator[Batch]:
        """The rest of the current epoch: all of it, unless a previous loop stopped early or
        a state was loaded mid-epoch.

        With hetgen's built-in image pipeline each batch is a :class:`Batch` (``images,
        labels``). With a Python dataset (``format = "python"``) it is what the dataset's
        samples collate into, in their structure: the same tuple, list or dict nesting, each
        field a numpy array with the samples first (a number per sample becomes an array of
        them, as PyTorch's default collate does), viewing the received batch without a copy;
        :func:`hetgen.torch.to_device` makes them torch tensors."""
        if self._replay is not None:
            return self._replayed(self._len or _Replay.BATCHES)
        epoch, left = self._native.remaining_in_epoch()
        if self._epoch_end is not None:
            return self._shard_batches(epoch) if left else iter(())
        return self._batches(left)

    def _shard_batches(self, epoch: int) -> Iterator[Batch]:
        """The rest of `epoch` of a dataset of shards: until this rank's shards end, or
        another rank's do (see :class:`_EpochEnd`)."""
        while True:
            asked = time.monotonic()
            item = self._native.next_batch(epoch)
            if not self._epoch_end.every_rank_has(item is not None):
                self._epoch_end.drop(self._native, epoch, item, self.rank)
                return
            self._progress.took(time.monotonic() - asked)
            yield self._python_batch(item)

    def _batches(self, count: int) -> Iterator[Batch]:
        for _ in range(count):
            asked = time.monotonic()
            item = self._native.next_batch()
            if item is None:
                return
            self._progress.took(time.monotonic() - asked)
            yield self._python_batch(item)

    def _replayed(self, count: int) -> Iterator[Batch]:
        for _ in range(count):
            asked = time.monotonic()
            batch = self._replay.take()
            if batch is None:
                return
            self._progress.took(time.monotonic() - asked)
            yield batch

    @staticmethod
    def _python_batch(item):
        """A native batch as Python sees it: a :class:`Batch` of images, or a dataset's
        samples in their own structure."""
        if isinstance(item, _native.TensorBatch):
            return _nested(item)
        return Batch(item.images, item.labels, item.sample_ids, item.epoch, item.shard, item.index)

    # -- resume ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands: small and JSON-able, to save beside the model's state.

        Each rank has its own state; in a multi-rank job gather them
        (``torch.distributed.all_gather_object``) and save the list:
        :meth:`load_state_dict` accepts the list and picks this rank's entry.
        """
        position = json.loads(self._native.position())
        return {
            "version": STATE_VERSION,
            "job": self._native.job_name,
            "seed": self._native.seed,
            "samples_per_epoch": self._native.samples_per_epoch,
            "shards": self._native.shards,
            "shard_size": self._native.shard_size,
            "batch_size": self._native.batch_size,
            "rank": self._native.rank,
            "world_size": self._native.world_size,
            "epoch": position["epoch"],
            "done": sorted(position["done"]),
            "partial": sorted([int(shard), n] for shard, n in position["partial"].items()),
        }

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue exactly after the last batch yielded when ``state`` was taken."""
        if isinstance(state, Sequence) and not isinstance(state, (str, bytes)):
            mine = [s for s in state if s.get("rank") == self.rank]
            if len(mine) != 1:
                raise ConfigurationError(
                    f"the states hold {len(mine)} entries for rank {self.rank}; expected one "
                    "(a list of every rank's state_dict())"
                )
            state = mine[0]
        if state.get("version") != STATE_VERSION:
            raise ConfigurationError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}: it was "
                "saved by another hetgen"
            )
        current = self.state_dict()
        keys = ("seed", "samples_per_epoch", "shards", "shard_size", "batch_size", "rank",
                "world_size")
        for key in keys:
            if state.get(key) != current[key]:
                raise ConfigurationError(
                    f"the saved loader state has {key}={state.get(key)!r}, this loader "
                    f"{key}={current[key]!r}: it was saved by another job, rank or world size"
                )
        position = {
            "epoch": int(state["epoch"]),
            "done": [int(s) for s in state["done"]],
            "partial": {str(int(shard)): int(n) for shard, n in state["partial"]},
        }
        self._native.restart(json.dumps(position))

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop streaming (this process only; the data servers keep serving other ranks)."""
        self._native.close()

    def shutdown(self, reason: str = "training finished", failed: bool = False) -> None:
        """Tell the data servers training is over (remote mode; in local mode the same as
        :meth:`close`).

        Inside a job this says "this trainer host finished": a server stops once every trainer
        host of the job has finished (the launcher also says so for its host when the script
        ends, so a script need not call this at all), or at once when ``failed``. Outside a job
        the servers stop at once: call it when every rank is done (rank 0 after
        ``torch.distributed.barrier()``). A server that is never told exits by its watchdog
        once no trainer has been heard from (``HETGEN_WATCHDOG_S``).
        """
        for host, why in self._native.shutdown(reason, failed):
            log.warning("could not tell data server %s to stop (%s); its watchdog will", host, why)

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        # DDP ranks step together, so when rank 0 leaves its loop every rank has its batches.
        if self.rank == 0:
            reason = "training finished" if error is None else f"trainer failed: {error}"
            self.shutdown(reason, failed=error is not None)
        else:
            self.close()

    def __repr__(self) -> str:
        return (
            f"Loader(job={self._native.job_name!r}, mode={self.mode!r}, rank={self.rank}, "
            f"world_size={self.world_size}, "
            + (f"batches_per_epoch={self._len})" if self._len is not None
               else f"shards={self.shards})")
        )


class _EpochEnd:
    """Where an epoch of a dataset of shards ends for every rank at once.

    Each rank reads its own shards, whose lengths nobody knows in advance, so ranks run out of
    batches at different steps; a DDP step that one rank skips would hang the others. So before
    each batch the ranks agree (an ``all_reduce`` of one number, MIN, over a gloo group of
    their own, on the CPU) whether every one of them has a batch: the epoch ends for all at the
    step where the first runs out, and the others leave the rest of their epoch's batches
    unused, as ``DistributedSampler(drop_last=True)`` leaves a remainder (logged, with its
    size). Without ``torch.distributed`` initialized, ranks cannot agree: each runs to its own
    end, with a warning when there are several.
    """

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.group = None
        self.warned = False

    def every_rank_has(self, mine: bool) -> bool:
        if self.world_size == 1:
            return mine
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            if not self.warned:
                self.warned = True
                log.warning(
                    "%d ranks read a dataset of shards without torch.distributed initialized: "
                    "each takes the batches of its own shards, and their numbers differ",
                    self.world_size,
                )
            return mine
        import torch

        if self.group is None:
            # Every rank reaches its first batch: the group is made by all, in the same order.
            self.group = dist.new_group(backend="gloo")
        flag = torch.tensor([1 if mine else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    @staticmethod
    def drop(native, epoch: int, item, rank: int) -> None:
        """The rest of this rank's `epoch`, from `item` on, taken and left unused."""
        batches = samples = 0
        while item is not None:
            batches += 1
            samples += len(item.sample_ids)
            item = native.next_batch(epoch)
        if batches:
            log.warning(
                "epoch %d: rank %d leaves %d batches (%d samples) unused, so that every rank "
                "takes as many batches",
                epoch, rank, batches, samples,
            )
