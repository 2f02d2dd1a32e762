"""One of a data host's Python workers: builds the user's dataset once, then turns lists of
sample ids into collated batches written to shared memory.

hetgen's pipeline (Rust) starts one such process per pipeline thread, each with its own
interpreter (no GIL shared between workers), and talks to it over a Unix socket given in
HETGEN_WORKER_SOCKET: 4-byte little-endian lengths, each followed by that many bytes of JSON.

    pipeline -> worker   {"setup": {..., "dtypes": {NAME: SIZE, ...}}}   once
    worker -> pipeline   {"ready": {"len": N}}                or {"error": {...}}, then exit
    pipeline -> worker   {"batch": {"ids": [...], "seeds": [...], "file": NAME,
                                    "segment": {"index": I, "capacity": C} or null}}
    worker -> pipeline   {"made": {"placed": "file" | "segment" | {"new_segment": {...}},
                                   "bytes": B, "tensors": [...], "structure": "..."}}
                         or {"error": {"kind": ..., "message": ..., "sample": ID?}}
    pipeline -> worker   {"probe": {"ids": [...], "seeds": [...]}}  (made, not collated)
    worker -> pipeline   {"probed": N} or {"error": ...}

A dataset of shards (a factory that returns ``hetgen.Shards``: the shard list and a function
that yields one shard's samples) is ready with {"ready": {"shards": S}} instead, and is asked
for the next samples of a shard rather than for ids:

    pipeline -> worker   {"next": {"shard": K, "from": P, "seeds": [...], "file": NAME,
                                   "segment": ...}}
    worker -> pipeline   {"streamed": {"samples": N, "end": true | false,
                                       "made": {...} or null}}   or {"error": ...}

``seeds`` holds one seed per sample asked for (positions P, P+1, ... of the shard) and one
more, for the sample after them, which the worker reads ahead to know whether the shard ends
with this batch (``end``). It keeps the shard open between requests: the next request for the
shard from where this one stopped goes on reading; any other reopens the shard and skips to
its position (a backup copy, a resumed epoch), reading the skipped samples and dropping them.

These are the types of the pipeline's `python/protocol.rs`, which owns them: what both sides
must agree on is decided there, once, and handed over. Each sample's seed comes with its id,
and the element types a field may travel as, with their sizes, come in the setup.

What a worker is doing is in the 16 bytes of the file HETGEN_WORKER_PROGRESS, which it maps:
a step count and the step (0: none yet, sample id + 1: that sample's ``__getitem__``, 2**64 - 1:
collating and writing the batch), stored before each step; a store, not a message, so that it
costs next to nothing per sample. The pipeline reads it when a worker dies (the sample it died
on: a crash, the OOM killer) and while it waits for an answer (a step that outlasts the
per-sample deadline). At that deadline the pipeline sends the signal
HETGEN_WORKER_STACK_SIGNAL, on which ``faulthandler`` writes every thread's stack to the file
HETGEN_WORKER_STACK and the worker ends by that signal. A probe makes samples without collating
them: after a worker died, the pipeline probes the samples alone to find the one that kills it.

A batch's tensors are written one after another (each at a 64-byte aligned offset) into the
segment of shared memory the pipeline lent for it (one of a few this worker keeps mapped and
reuses, so that no page is faulted in or zeroed again; it makes one as the file NAME when it
has none of that index, or the batch outgrew it), or, when the pipeline lent none because all
still hold batches, into the one-off file NAME. The pipeline maps what it has not mapped and
sends the batch as it is: the batch is never copied again on this host. The worker writes nothing else to stdout or stderr, so the
dataset's own prints and warnings reach the host's log untouched.

Randomness: before each ``__getitem__`` the worker seeds Python's ``random``, numpy's global
generator and torch's (when the dataset imported them) with the seed the pipeline computed from
(job seed, epoch, sample id) and sent with the id
alone, so a sample is the same whichever host or worker makes it.

A worker whose pipeline is gone (killed, or stopped by a signal before it could stop its
workers) removes the shared-memory folder, which nothing else would, and exits; SIGINT and
SIGTERM, which reach a host's whole process group, leave it to its pipeline to stop it.
"""

import contextlib
import faulthandler
import importlib.util
import json
import math
import mmap
import os
import random
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback

ALIGN = 64
# Segments are made in multiples of this (a multiple of every page size).
SEGMENT_STEP = 64 << 10


def seed_everything(seed):
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        # The CPU generator alone, which torch's and torchvision's CPU randomness draws from:
        # `torch.manual_seed` also seeds every accelerator back end, at ~90 µs a call, a tenth
        # of a light sample's whole cost when paid before every `__getitem__`.
        torch.default_generator.manual_seed(seed)


class Failure(Exception):
    """A batch that cannot be made, with what to tell the trainer."""

    def __init__(self, kind, message, sample=None):
        super().__init__(message)
        self.kind, self.message, self.sample = kind, message, sample


def user_traceback():
    """The traceback of the exception being handled, from the user's frames on (this file's
    own frames say nothing to the user)."""
    _, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    keep = [f for f in frames if os.path.abspath(f.filename) != os.path.abspath(__file__)]
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(keep or frames)
    lines += traceback.format_exception_only(type(value), value)
    return "".join(lines).rstrip()


def load(code_dir, ref):
    """The function `ref` ({"file", "name"}) of a file of the code folder."""
    path = os.path.join(code_dir, ref["file"])
    module_name = os.path.splitext(ref["file"])[0].replace("/", ".")
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None:
            raise ImportError(f"cannot import {path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        # Registered first, as `import` does, so the dataset's classes pickle and its own
        # relative lookups work.
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    try:
        return getattr(module, ref["name"])
    except AttributeError:
        raise AttributeError(f"{ref['file']} defines no `{ref['name']}`") from None


def hyperparameter(value):
    """SageMaker delivers every hyperparameter as a string; JSON ones (numbers, quoted
    strings, lists) become what they say, as the SageMaker toolkit's SM_HPS does."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


# --- samples to tensors ---------------------------------------------------------------------

# torch's bfloat16, which numpy lacks: it travels as its raw 16 bits.
BF16 = "bfloat16"

# Bytes per element of every type a field may travel as, by name: the pipeline's table, from
# the setup (`main`).
DTYPES = {}


def as_array(value, where, first=lambda: None):
    """`value` (a numpy array, a torch tensor, a Python or numpy number) as a numpy array and
    the dtype name it travels as. `first()`: how the batch's first sample has the field (`sample
    3's is an int`) when `value` is another sample's, asked only for a value that cannot
    travel."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        if value.dtype == torch.bfloat16:
            return value.view(torch.int16).numpy(), BF16
        value = value.numpy()
    if isinstance(value, bool):
        array = np.asarray(value, dtype=np.bool_)
    elif isinstance(value, int):
        array = np.asarray(value, dtype=np.int64)
    elif isinstance(value, float):
        array = np.asarray(value, dtype=np.float64)
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
    else:
        raise Failure(
            "type",
            f"field `{where}` is {article(type(value).__name__)}{unlike(first)}: hetgen batches "
            "carry numpy arrays, torch tensors and Python numbers; convert it in your dataset, or "
            "pass a `collate` that does",
        )
    name = array.dtype.name
    if name not in DTYPES:
        raise Failure(
            "type",
            f"field `{where}` has dtype {name}{unlike(first)}, which hetgen does not carry (it "
            f"carries {', '.join(sorted(DTYPES))}); convert it in your dataset",
        )
    return array, name


def unlike(first):
    other = first()
    return f" ({other})" if other else ""


def article(noun):
    return f"an {noun}" if noun[:1] in "aeiouAEIOU" else f"a {noun}"


def described(value):
    """How a field's value reads in a message: `an int`, `a ndarray of float32`."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return article(type(value).__name__)
    return f"{article(type(value).__name__)} of {dtype}"




def skeleton(sample, path, leaves):
    """The JSON structure of `sample` with its leaves numbered in order; appends each leaf's
    path to `leaves`."""
    if isinstance(sample, dict):
        entries = []
        for key, value in sample.items():
            if not isinstance(key, str):
                raise Failure(
                    "type",
                    f"a dict key of `{path or 'the sample'}` is {key!r}: keys must be strings",
                )
            entries.append([key, skeleton(value, path + (key,), leaves)])
        return {"dict": entries}
    if isinstance(sample, (tuple, list)):
        items = [skeleton(v, path + (str(i),), leaves) for i, v in enumerate(sample)]
        return {"tuple" if isinstance(sample, tuple) else "list": items}
    leaves.append(path)
    return len(leaves) - 1


def pick(sample, path):
    for key in path:
        sample = sample[key if isinstance(sample, dict) else int(key)]
    return sample


def field_name(path):
    return ".".join(path) if path else "sample"


def stack_plan(samples, ids):
    """Default collate: the structure of the first sample, and for each leaf the samples'
    arrays, which must share shape and dtype."""
    leaves = []
    structure = skeleton(samples[0], (), leaves)
    fields = []
    for path in leaves:
        name = field_name(path)
        arrays = []
        for sample, sid in zip(samples, ids):
            try:
                value = pick(sample, path)
            except (KeyError, IndexError, TypeError):
                raise Failure(
                    "stack",
                    f"sample {sid} has no field `{name}` (sample {ids[0]} has): samples must "
                    "have the same fields to stack; pass a `collate` for samples that differ",
                    sid,
                ) from None
            try:
                arrays.append(as_array(value, name, lambda: first_of(samples, ids, path, sid)))
            except Failure as failure:
                # The field is the sample's: its id is what the user needs to look at.
                raise Failure("type", failure.message, sid) from None
        first, first_type = arrays[0]
        for (array, dtype), sid in zip(arrays, ids):
            if array.shape != first.shape or dtype != first_type:
                raise Failure(
                    "stack",
                    f"field `{name}` does not stack: sample {ids[0]} has shape "
                    f"{list(first.shape)} ({first_type}), sample {sid} has {list(array.shape)} "
                    f"({dtype}); pad it in your dataset, or pass a `collate` "
                    '(`[pipeline] source = { ..., collate = "data.py:collate" }`)',
                    sid,
                )
        fields.append((name, first_type, (len(samples),) + first.shape, [a for a, _ in arrays]))
    return structure, fields


def first_of(samples, ids, path, sid):
    """How the batch's first sample has the field at `path`, when `sid` is another sample."""
    if sid == ids[0]:
        return None
    return f"sample {ids[0]}'s is {described(pick(samples[0], path))}"


def collated_plan(batch):
    """A custom collate's result: its structure, each leaf one array."""
    leaves = []
    structure = skeleton(batch, (), leaves)
    fields = []
    for path in leaves:
        name = field_name(path)
        array, dtype = as_array(pick(batch, path), name)
        fields.append((name, dtype, array.shape, array))
    return structure, fields


class Segments:
    """The shared memory this worker writes batches into, reused batch after batch (the
    pipeline's ``python/segments.rs`` lends one per batch): segment index -> its mapping, made
    when first lent (or lent too small) and kept while the worker lives. The pipeline unlinks
    each segment's file as soon as it has mapped it."""

    def __init__(self, shm_dir):
        self.shm_dir = shm_dir
        self.maps = {}

    def place(self, file_name, lent, total):
        """Memory for a ``total``-byte batch: ``(memory, placed, path)``, with ``path`` the file
        to remove should the pipeline never take the batch (None for a segment it mapped)."""
        if lent is None:
            return self._create(file_name, total), "file", os.path.join(self.shm_dir, file_name)
        memory = self.maps.get(lent["index"])
        if memory is not None and len(memory) == lent["capacity"] and total <= len(memory):
            return memory, "segment", None
        # New, or too small: room to spare, so that batches that vary a little fit next time.
        capacity = -(-(total + total // 8) // SEGMENT_STEP) * SEGMENT_STEP
        if memory is not None:
            memory.close()
        memory = self.maps[lent["index"]] = self._create(file_name, capacity)
        placed = {"new_segment": {"capacity": capacity}}
        return memory, placed, os.path.join(self.shm_dir, file_name)

    def _create(self, file_name, size):
        path = os.path.join(self.shm_dir, file_name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            return mmap.mmap(fd, size)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)


def write(segments, file_name, lent, fields, stacked):
    """Write the fields into the segment lent (or a one-off file); their descriptions for the
    wire, the batch's size, where it went, and the file to remove if the batch is not taken."""
    import numpy as np

    tensors, offset = [], 0
    for name, dtype, shape, _ in fields:
        offset = -(-offset // ALIGN) * ALIGN
        size = math.prod(shape) * DTYPES[dtype]
        tensors.append({"name": name, "dtype": dtype, "shape": list(shape), "offset": offset})
        offset += size
    total = offset
    if total == 0:
        return tensors, 0, "file", None
    memory, placed, path = segments.place(file_name, lent, total)
    try:
        for tensor, (_, dtype, shape, source) in zip(tensors, fields):
            storage = np.int16 if dtype == BF16 else np.dtype(dtype)
            out = np.ndarray(shape, dtype=storage, buffer=memory, offset=tensor["offset"])
            if stacked:
                for i, array in enumerate(source):
                    out[i] = array
            else:
                out[...] = source
            del out
    except BaseException:
        if path is not None:
            os.unlink(path)
        raise
    finally:
        if placed == "file":
            memory.close()
    return tensors, total, placed, path


# --- the conversation -----------------------------------------------------------------------


def receive(conn):
    head = _exactly(conn, 4)
    if head is None:
        return None
    (length,) = struct.unpack("<I", head)
    body = _exactly(conn, length)
    if body is None:
        return None
    return json.loads(body)


def _exactly(conn, n):
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send(conn, message):
    body = json.dumps(message).encode()
    conn.sendall(struct.pack("<I", len(body)) + body)


class Progress:
    """The step this worker is at, in the file the pipeline reads (see the top of this file)."""

    COLLATING = (1 << 64) - 1

    def __init__(self, path):
        fd = os.open(path, os.O_RDWR)
        try:
            self.memory = mmap.mmap(fd, 16)
        finally:
            os.close(fd)
        self.steps = 0

    def sample(self, sid):
        self._at(sid + 1)

    def collating(self):
        self._at(self.COLLATING)

    def _at(self, step):
        self.steps += 1
        struct.pack_into("<QQ", self.memory, 0, self.steps, step)


def getitem(progress, dataset, sid, seed):
    """Sample `sid`, with the generators seeded with its `seed`, once the pipeline can see it
    is being made."""
    progress.sample(sid)
    seed_everything(seed)
    try:
        return dataset[sid]
    except Exception:
        raise Failure("getitem", user_traceback(), sid) from None


def make(progress, dataset, collate, segments, request):
    ids, seeds = request["ids"], request["seeds"]
    samples = [getitem(progress, dataset, sid, seed) for sid, seed in zip(ids, seeds)]
    return collated(progress, samples, ids, collate, segments, request)


def collated(progress, samples, ids, collate, segments, request):
    """`samples` (of `ids`) collated and written where `request` says."""
    progress.collating()
    if collate is None:
        structure, fields = stack_plan(samples, ids)
        stacked = True
    else:
        try:
            batch = collate(samples)
        except Exception:
            raise Failure("collate", user_traceback()) from None
        structure, fields = collated_plan(batch)
        stacked = False
    tensors, total, placed, path = write(
        segments, request["file"], request.get("segment"), fields, stacked
    )
    made = {"placed": placed, "bytes": total, "tensors": tensors, "structure": json.dumps(structure)}
    return made, path


def probe(progress, dataset, ids, seeds):
    """Samples `ids` made and dropped, uncollated: whether one of them alone kills the worker."""
    for sid, seed in zip(ids, seeds):
        getitem(progress, dataset, sid, seed)
    return len(ids)


def build(setup):
    """The dataset and the collate function of `setup`, and what the ready message says of
    the dataset: its length, or its number of shards."""
    code_dir = setup["code_dir"]
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    factory = load(code_dir, setup["dataset"])
    collate = load(code_dir, setup["collate"]) if setup.get("collate") else None
    hyperparameters = {k: hyperparameter(v) for k, v in setup["hyperparameters"].items()}
    dataset = factory(setup["path"], hyperparameters)
    if is_shards(dataset):
        return Stream(dataset, setup["dataset"]), collate, {"shards": len(dataset.shards)}
    refuse_unindexable(dataset, setup["dataset"])
    return dataset, collate, {"len": len(dataset)}


def is_shards(dataset):
    """`hetgen.Shards`, by its shape: a worker does not import hetgen (the pipeline's own tests
    run it in an interpreter without it)."""
    return isinstance(getattr(dataset, "shards", None), (list, tuple)) and callable(
        getattr(dataset, "read", None)
    )


class Stream:
    """A dataset of shards as a worker reads it: one shard open at a time, where the last
    request left it, with the sample after that read ahead."""

    def __init__(self, shards, ref):
        self.shards, self.read = list(shards.shards), shards.read
        if not self.shards:
            raise Failure(
                "setup",
                f"`{ref['file']}:{ref['name']}` returned hetgen.Shards with no shards: list "
                "the files (or other units) the dataset is stored in",
            )
        # (shard, position of `ahead`, the open iterator, the sample read ahead or END).
        self.open = None

    END = object()

    def name(self, shard):
        return f"shard {shard} (`{self.shards[shard]}`)"

    def _next(self, progress, shard, iterator, position, seed):
        """The sample at `position` of the open shard, or END."""
        progress.sample(sample_id(shard, position))
        if seed is not None:
            seed_everything(seed)
        try:
            return next(iterator, self.END)
        except Exception:
            # Named by shard and position in the message; the id the data service gives the
            # sample (`sample_id`) would only repeat them, as one large number.
            raise Failure(
                "getitem", f"{self.name(shard)}, sample at position {position}:\n{user_traceback()}"
            ) from None

    def _seek(self, progress, shard, position):
        """The open shard at `position`: as left, or opened again and read up to it."""
        if self.open is not None and self.open[:2] == (shard, position):
            return self.open
        self.open = None
        try:
            iterator = iter(self.read(self.shards[shard]))
        except Exception:
            raise Failure(
                "getitem", f"{self.name(shard)} could not be opened:\n{user_traceback()}"
            ) from None
        for skipped in range(position):
            if self._next(progress, shard, iterator, skipped, None) is self.END:
                raise Failure(
                    "getitem",
                    f"{self.name(shard)} ended after {skipped} samples, before position "
                    f"{position}, which it had before: a shard must yield the same samples "
                    "each time it is read",
                )
        return (shard, position, iterator, None)

    def take(self, progress, shard, start, seeds):
        """Up to `len(seeds) - 1` samples of `shard` from `start`, and whether it ends there."""
        _, _, iterator, ahead = self._seek(progress, shard, start)
        if ahead is None:
            ahead = self._next(progress, shard, iterator, start, seeds[0])
        samples = []
        for i in range(1, len(seeds)):
            if ahead is self.END:
                break
            samples.append(ahead)
            ahead = self._next(progress, shard, iterator, start + i, seeds[i])
        end = ahead is self.END
        self.open = None if end else (shard, start + len(samples), iterator, ahead)
        return samples, end


def sample_id(shard, position):
    """A shard's sample as the data service names it: the shard above 32 bits, its position
    below (the pipeline's `StreamPlan` owns the rule; this is its mirror for messages)."""
    return (shard << 32) | position


def stream(progress, dataset, collate, segments, request):
    """The next samples of a shard, collated and written as `make` writes a batch."""
    shard, start = request["shard"], request["from"]
    if not 0 <= shard < len(dataset.shards):
        raise Failure("setup", f"no shard {shard}: the dataset has {len(dataset.shards)}")
    samples, end = dataset.take(progress, shard, start, request["seeds"])
    if not samples:
        return {"samples": 0, "end": True, "made": None}, None
    ids = [sample_id(shard, start + i) for i in range(len(samples))]
    made, path = collated(progress, samples, ids, collate, segments, request)
    return {"samples": len(samples), "end": end, "made": made}, path


def refuse_unindexable(dataset, ref):
    """hetgen hands a worker sample ids: a dataset it cannot index by them fails here, naming
    the factory, rather than on sample 0 in hetgen's frames."""
    data = sys.modules.get("torch.utils.data")
    iterable = data is not None and isinstance(dataset, data.IterableDataset)
    kind = type(dataset)
    missing = [m for m in ("__len__", "__getitem__") if not hasattr(kind, m)]
    if not iterable and not missing:
        return
    what = "an IterableDataset" if iterable else f"{article(kind.__name__)} without `{missing[0]}`"
    raise Failure(
        "setup",
        f"a map-style dataset (`__len__` and `__getitem__`) or `hetgen.Shards` is required; "
        f"`{ref['file']}:{ref['name']}` returned {what} (`{kind.__module__}.{kind.__qualname__}`): "
        "hetgen deals each epoch's samples to its data hosts exactly once, by index or by "
        "shard; for a stream stored in shards (tar, Parquet, record files) return "
        "`hetgen.Shards(shard_list, read)`, where `read(shard)` yields that shard's samples",
    )


class Parent:
    """The pipeline that started this worker, watched for its end: through a pidfd, which turns
    readable when it has exited (Linux 5.3, Python 3.9), else by this worker's parent id, which
    changes when it has gone."""

    def __init__(self, pid):
        self.pid = pid
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    def gone(self, within=0.0, every=0.05):
        """Whether the pipeline has ended, waiting up to `within` seconds (None: until it has);
        without a pidfd, looking every `every` seconds."""
        if self.fd is not None:
            # One poll object per call: the watcher thread and the main thread both wait.
            poll = select.poll()
            poll.register(self.fd, select.POLLIN)
            return bool(poll.poll(None if within is None else int(within * 1000)))
        deadline = None if within is None else time.monotonic() + within
        while os.getppid() == self.pid:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(every)
        return True


def leave_shared_memory():
    """The pipeline is gone: its shared-memory folder goes too, as no one else would remove it."""
    shutil.rmtree(os.path.dirname(os.path.abspath(__file__)), ignore_errors=True)


def watch_parent(parent):
    """A worker busy in the user's code notices no closed socket: it leaves as soon as its
    pipeline ends instead (a data server killed while its workers build the dataset)."""
    parent.gone(None, every=1.0)
    leave_shared_memory()
    os._exit(0)


def arm_stack_dump():
    """On the pipeline's signal, every thread's stack goes to the file the pipeline reads, and
    the worker ends by that signal (``chain``: its default action, once the stack is written)."""
    number = int(os.environ["HETGEN_WORKER_STACK_SIGNAL"])
    signal.signal(number, signal.SIG_DFL)
    stack = open(os.environ["HETGEN_WORKER_STACK"], "w")  # noqa: SIM115 (lives as long as we do)
    faulthandler.register(number, file=stack, all_threads=True, chain=True)
    return stack


def serve(conn, dataset, collate, setup):
    progress = Progress(os.environ["HETGEN_WORKER_PROGRESS"])
    segments = Segments(setup["shm_dir"])
    while True:
        message = receive(conn)
        if message is None:
            return 0
        try:
            if "probe" in message:
                request = message["probe"]
                probed = probe(progress, dataset, request["ids"], request["seeds"])
                send(conn, {"probed": probed})
                continue
            if "next" in message:
                reply, path = stream(progress, dataset, collate, segments, message["next"])
                reply = {"streamed": reply}
            else:
                made, path = make(progress, dataset, collate, segments, message["batch"])
                reply = {"made": made}
            try:
                send(conn, reply)
            except (BrokenPipeError, ConnectionError):
                # The pipeline died (SIGKILL, the OOM killer) before it took the batch: a file
                # it did not map and unlink would outlive both processes, so it goes now
                # (unless the folder went already).
                if path is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                raise
        except Failure as failure:
            error = {"kind": failure.kind, "message": failure.message}
            if failure.sample is not None:
                error["sample"] = failure.sample
            send(conn, {"error": error})
        except (BrokenPipeError, ConnectionError):
            raise
        except Exception:
            send(conn, {"error": {"kind": "write", "message": user_traceback()}})


def outlive(signum, frame):
    """SIGINT and SIGTERM reach a host's whole process group (Ctrl-C, a stopped job): the
    pipeline stops its workers itself (SIGKILL), and a worker whose pipeline has ended leaves by
    itself, removing the shared memory, which a worker that died with it could not. A handler,
    not SIG_IGN, so that programs the dataset starts do not inherit an ignored signal."""


def main(parent):
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, outlive)
    threading.Thread(target=watch_parent, args=(parent,), name="hetgen-parent", daemon=True).start()
    stack = arm_stack_dump()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["HETGEN_WORKER_SOCKET"])
    message = receive(conn)
    if message is None:
        return 0
    setup = message["setup"]
    DTYPES.update(setup["dtypes"])
    try:
        dataset, collate, ready = build(setup)
    except Failure as failure:
        send(conn, {"error": {"kind": "setup", "message": failure.message}})
        return 1
    except BaseException:
        send(conn, {"error": {"kind": "setup", "message": user_traceback()}})
        return 1
    torch = sys.modules.get("torch")
    if torch is not None:
        # As a DataLoader worker does: the host's cores belong to the workers, one each.
        torch.set_num_threads(1)
    send(conn, {"ready": ready})
    try:
        return serve(conn, dataset, collate, setup)
    finally:
        stack.close()


if __name__ == "__main__":
    # The pipeline's process id, from the pipeline: one that died before this line ran is gone
    # all the same.
    PARENT = Parent(int(os.environ["HETGEN_WORKER_PARENT"]))
    try:
        CODE = main(PARENT)
    except (BrokenPipeError, ConnectionError):
        # The pipeline closed the connection (it stopped this worker), or is gone.
        CODE = 0
    # A pipeline that ends closes its sockets before it has ended (a killed data server): this
    # worker sees that first. One that closed this worker's socket to stop it kills it at once.
    if PARENT.gone(within=5.0):
        leave_shared_memory()
    sys.exit(CODE)
