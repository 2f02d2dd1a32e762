"""One of a data host's Python workers: builds the user's dataset once, then turns lists of
sample ids into collated batches written to shared memory.

hetgen's pipeline (Rust) starts one such process per pipeline thread, each with its own
interpreter (no GIL shared between workers), and talks to it over a Unix socket given in
HETGEN_WORKER_SOCKET: 4-byte little-endian lengths, each followed by that many bytes of JSON.

    pipeline -> worker   {"setup": {...}}                     once
    worker -> pipeline   {"ready": {"len": N}}                or {"error": {...}}, then exit
    pipeline -> worker   {"batch": {"epoch": E, "ids": [...], "file": NAME}}
    worker -> pipeline   {"made": {"bytes": B, "tensors": [...], "structure": "..."}}
                         or {"error": {"kind": ..., "message": ..., "sample": ID?}}

A batch's tensors are written one after another (each at a 64-byte aligned offset) into the
file NAME of the shared-memory folder, which the pipeline maps and sends as it is: the batch is
never copied again on this host. The worker writes nothing else to stdout or stderr, so the
dataset's own prints and warnings reach the host's log untouched.

Randomness: before each ``__getitem__`` the worker seeds Python's ``random``, numpy's global
generator and torch's (when the dataset imported them) from (job seed, epoch, sample id)
alone, so a sample is the same whichever host or worker makes it.
"""

import importlib.util
import json
import math
import mmap
import os
import random
import socket
import struct
import sys
import traceback

MASK = (1 << 64) - 1
ALIGN = 64


def sample_seed(seed, epoch, sample):
    """SplitMix64 over the three numbers: the seed of one sample's randomness."""
    x = (seed * 0x9E3779B97F4A7C15 + (epoch + 1) * 0xBF58476D1CE4E5B9 + sample) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def seed_everything(seed):
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


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

BF16 = "bfloat16"


def as_array(value, where):
    """`value` (a numpy array, a torch tensor, a Python or numpy number) as a numpy array and
    the dtype name it travels as."""
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
            f"field `{where}` is a {type(value).__name__}: hetgen batches carry numpy arrays, "
            "torch tensors and Python numbers; convert it in your dataset, or pass a `collate` "
            "that does",
        )
    name = array.dtype.name
    if name not in DTYPES:
        raise Failure(
            "type",
            f"field `{where}` has dtype {name}, which hetgen does not carry (it carries "
            f"{', '.join(sorted(DTYPES))}); convert it in your dataset",
        )
    return array, name


DTYPES = {"uint8", "int8", "int16", "int32", "int64", "float16", BF16, "float32", "float64", "bool"}


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
            arrays.append(as_array(value, name))
        first, first_type = arrays[0]
        for (array, dtype), sid in zip(arrays, ids):
            if array.shape != first.shape or dtype != first_type:
                raise Failure(
                    "stack",
                    f"field `{name}` does not stack: sample {ids[0]} has shape "
                    f"{list(first.shape)} ({first_type}), sample {sid} has {list(array.shape)} "
                    f"({dtype}); pad it in your dataset, or pass a `collate` "
                    "(`[pipeline] source = {{ ..., collate = \"data.py:collate\" }}`)",
                    sid,
                )
        fields.append((name, first_type, (len(samples),) + first.shape, [a for a, _ in arrays]))
    return structure, fields


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


def write(shm_dir, file_name, fields, stacked):
    """Write the fields into a new shared-memory file; their descriptions for the wire."""
    import numpy as np

    tensors, offset = [], 0
    for name, dtype, shape, _ in fields:
        offset = -(-offset // ALIGN) * ALIGN
        size = math.prod(shape) * (2 if dtype == BF16 else np.dtype(dtype).itemsize)
        tensors.append({"name": name, "dtype": dtype, "shape": list(shape), "offset": offset})
        offset += size
    total = offset
    if total == 0:
        return tensors, 0
    path = os.path.join(shm_dir, file_name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, total)
        with mmap.mmap(fd, total) as memory:
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
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    return tensors, total


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


def make(dataset, collate, setup, epoch, ids, file_name):
    samples = []
    for sid in ids:
        seed_everything(sample_seed(setup["seed"], epoch, sid))
        try:
            samples.append(dataset[sid])
        except Exception:
            raise Failure("getitem", user_traceback(), sid) from None
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
    tensors, total = write(setup["shm_dir"], file_name, fields, stacked)
    return {"bytes": total, "tensors": tensors, "structure": json.dumps(structure)}


def main():
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["HETGEN_WORKER_SOCKET"])
    setup = receive(conn)["setup"]
    code_dir = setup["code_dir"]
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    try:
        factory = load(code_dir, setup["dataset"])
        collate = load(code_dir, setup["collate"]) if setup.get("collate") else None
        hyperparameters = {k: hyperparameter(v) for k, v in setup["hyperparameters"].items()}
        dataset = factory(setup["path"], hyperparameters)
        length = len(dataset)
    except BaseException:
        send(conn, {"error": {"kind": "setup", "message": user_traceback()}})
        return 1
    torch = sys.modules.get("torch")
    if torch is not None:
        # As a DataLoader worker does: the host's cores belong to the workers, one each.
        torch.set_num_threads(1)
    send(conn, {"ready": {"len": length}})
    while True:
        message = receive(conn)
        if message is None:
            return 0
        request = message["batch"]
        try:
            made = make(dataset, collate, setup, request["epoch"], request["ids"], request["file"])
            try:
                send(conn, {"made": made})
            except (BrokenPipeError, ConnectionError):
                # The pipeline died (SIGKILL, the OOM killer) before it took the batch: its
                # shared memory would outlive both processes, so it goes now.
                if made["bytes"]:
                    os.unlink(os.path.join(setup["shm_dir"], request["file"]))
                raise
        except Failure as failure:
            error = {"kind": failure.kind, "message": failure.message}
            if failure.sample is not None:
                error["sample"] = failure.sample
            send(conn, {"error": error})
        except Exception:
            send(conn, {"error": {"kind": "write", "message": user_traceback()}})


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, ConnectionError):
        # The pipeline is gone (its process ended or stopped this worker): nothing to tell.
        sys.exit(0)
