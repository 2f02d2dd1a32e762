"""torch glue for ``hetgen.Loader`` batches. Imports torch on first use, never at
``import hetgen``, and works with whatever torch the image has.

A Python dataset's batch (``format = "python"``) is a structure of numpy arrays; :func:`tensors`
and :func:`to_device` give the same structure of torch tensors (``torch.from_numpy``: no copy
on the host).

Batches travel as compact ``uint8`` NHWC; :func:`to_device` does what hetgen's own trainer does on
its device: copy the ``uint8`` pixels (a quarter of the bytes of ``float32``), then convert to
``float32`` NCHW in ``[0, 1]`` and apply the spec's ``normalize`` stages there.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Sequence, Tuple

from hetgen._loader import Batch

if TYPE_CHECKING:
    import torch

Normalization = Sequence[Tuple[Sequence[float], Sequence[float]]]


def _torch():
    import torch

    return torch


def tensors(batch, *, pin_memory: bool = False):
    """A Python dataset's batch with every numpy array made a CPU tensor over the same memory
    (``bfloat16`` fields become ``torch.bfloat16``), in the same tuple/list/dict structure."""
    torch = _torch()
    import numpy as np

    def convert(array):
        if array.dtype.names == ("bfloat16",):
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(array)
        return tensor.pin_memory() if pin_memory else tensor

    return _map(batch, convert)


def to_tensors(batch, *, pin_memory: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` as CPU tensors over the batch's own memory (``torch.from_numpy``:
    no copy). ``pin_memory=True`` copies them into page-locked memory instead, which lets the
    host-to-GPU copy run asynchronously; it needs a CUDA build of torch with a GPU."""
    torch = _torch()
    images = torch.from_numpy(batch[0])
    labels = torch.from_numpy(batch[1])
    if pin_memory:
        images, labels = images.pin_memory(), labels.pin_memory()
    return images, labels


def to_device(
    batch,
    device: torch.device | str = "cpu",
    normalization: Normalization = (),
    *,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)`` on ``device``: images ``float32`` ``[n, c, h, w]`` scaled to
    ``[0, 1]`` and normalised by each ``(mean, std)`` of ``normalization`` (pass
    ``loader.normalization``), labels ``int64`` ``[n]``.

    The images are contiguous (``torch.contiguous_format``), as a model's parameters are: a
    batch left in its NHWC strides would make convolutions return gradients in another layout
    than DistributedDataParallel's buckets, which it warns about and pays for with a copy on
    every step. Pass ``memory_format=torch.channels_last`` for a model converted with
    ``model.to(memory_format=torch.channels_last)``; the batch already has that layout, so the
    conversion only changes the type.

    ``pin_memory`` defaults to whether ``device`` is a CUDA device: then the copy is
    asynchronous (``non_blocking``) from page-locked memory.

    A Python dataset's batch comes back in its own structure, every field a tensor on
    ``device`` with the dtype and shape the dataset made (no scaling, no normalization: the
    dataset did its own preprocessing)."""
    torch = _torch()
    device = torch.device(device)
    if pin_memory is None:
        pin_memory = device.type == "cuda"
    if not isinstance(batch, Batch):
        on_host = tensors(batch, pin_memory=pin_memory)
        return _map(on_host, lambda t: t.to(device, non_blocking=pin_memory))
    if memory_format is None:
        memory_format = torch.contiguous_format
    images, labels = to_tensors(batch, pin_memory=pin_memory)
    images = images.to(device, non_blocking=pin_memory)
    labels = labels.to(device, non_blocking=pin_memory)
    # One kernel converts the type and lays out the planes.
    x = images.permute(0, 3, 1, 2).to(torch.float32, memory_format=memory_format).div_(255.0)
    channels = x.shape[1]
    for mean, std in normalization:
        x = x.sub_(_constant(tuple(mean), channels, x.dtype, x.device))
        x = x.div_(_constant(tuple(std), channels, x.dtype, x.device))
    return x, labels


def _map(node, f):
    """`node` with `f` applied to every leaf of its tuple/list/dict structure."""
    if isinstance(node, tuple):
        return tuple(_map(n, f) for n in node)
    if isinstance(node, list):
        return [_map(n, f) for n in node]
    if isinstance(node, dict):
        return {key: _map(n, f) for key, n in node.items()}
    return f(node)


@functools.lru_cache(maxsize=64)
def _constant(values: tuple, channels: int, dtype, device):
    """``[1, c, 1, 1]`` of ``dtype`` on ``device``; one value stands for every channel. Made
    once per argument set: a fresh one per batch would be a small synchronous host-to-device
    copy on every step."""
    torch = _torch()
    values = list(values)
    if len(values) == 1:
        values = values * channels
    if len(values) != channels:
        raise ValueError(
            f"normalize has {len(values)} values for images of {channels} channel(s)"
        )
    return torch.tensor(values, dtype=dtype, device=device).view(1, channels, 1, 1)
