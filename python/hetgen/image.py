"""hetgen's image operations, for your own ``Dataset``'s ``__getitem__``.

The same libjpeg-turbo decoder and resampler as hetgen's built-in pipeline, as plain functions
on numpy arrays, in the style of ``torchvision.transforms.v2.functional``:

.. code-block:: python

    import hetgen.image as hi

    def __getitem__(self, i):
        path, label = self.files[i]
        image = hi.decode_random_resized_crop(path, 224)   # uint8 [224, 224, 3]
        image = hi.random_horizontal_flip(image)
        return hi.to_chw(image), label                       # uint8 [3, 224, 224]

What makes them fast per core: ``decode_random_resized_crop`` draws the crop from the image's
size (read from its header) and then decodes only that region of a JPEG, at 1/2, 1/4 or 1/8
scale whenever the crop, so reduced, still covers the output; ``decode_resize`` does the same
for the whole image. Every function releases the GIL, so threads of one process run them in
parallel.

Images are ``uint8`` arrays ``[height, width, channels]`` (``[height, width]`` is one channel);
every function returns a new array that ``torch.from_numpy`` takes without a copy.
``normalize`` returns ``float32`` ``[channels, height, width]``.

Randomness: the random functions draw from ``generator`` when given (a ``random.Random`` or a
``numpy.random.Generator``), else from Python's ``random`` module. hetgen's workers seed
``random`` from (job seed, epoch, sample id) before each ``__getitem__``, so a sample comes out
the same whichever host or worker makes it; under a plain ``DataLoader``, torch seeds
``random`` in each worker, as it does for torchvision's transforms.

Bad input (truncated or non-image bytes, an empty crop or size, a size beyond
``MAX_SIDE`` pixels) raises ``ValueError`` (``TypeError`` for the wrong kind of argument)
naming the problem.
"""

from __future__ import annotations

import os
import random as _random
from typing import Sequence, Tuple, Union

import numpy as np

from hetgen import _native

_ops = _native.image

#: Largest side of an image or output size, in pixels.
MAX_SIDE: int = _ops.MAX_SIDE

Source = Union[bytes, bytearray, memoryview, np.ndarray, str, "os.PathLike[str]"]
Size = Union[int, Sequence[int]]
Generator = Union[_random.Random, np.random.Generator, None]

_CHANNELS = {"RGB": 3, "GRAY": 1}


def _size(size: Size) -> Tuple[int, int]:
    """``(height, width)`` of an int or a pair, as torchvision reads ``size``."""
    if isinstance(size, (int, np.integer)):
        return int(size), int(size)
    if len(size) == 1:
        return int(size[0]), int(size[0])
    if len(size) == 2:
        return int(size[0]), int(size[1])
    raise ValueError(f"size must be an int or (height, width), not {size!r}")


def _channels(mode: str) -> int:
    try:
        return _CHANNELS[mode.upper()]
    except (KeyError, AttributeError):
        raise ValueError(f"mode must be 'RGB' or 'GRAY', not {mode!r}") from None


def _seed(generator: Generator) -> int:
    """64 random bits from ``generator``, or from Python's ``random``."""
    if generator is None:
        return _random.getrandbits(64)
    if isinstance(generator, _random.Random):
        return generator.getrandbits(64)
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(0, 2**64, dtype=np.uint64))
    raise TypeError(
        f"generator must be a random.Random or a numpy.random.Generator, not {type(generator)}"
    )


def _unit(generator: Generator) -> float:
    """A float uniform in [0, 1) from ``generator``, or from Python's ``random``."""
    if generator is None:
        return _random.random()
    if isinstance(generator, (_random.Random, np.random.Generator)):
        return float(generator.random())
    raise TypeError(
        f"generator must be a random.Random or a numpy.random.Generator, not {type(generator)}"
    )


def _crop(scale: Sequence[float], ratio: Sequence[float]):
    return (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))


def decode(source: Source, mode: str = "RGB") -> np.ndarray:
    """JPEG or PNG bytes, or the file at a path, decoded whole: ``uint8`` ``[h, w, c]``."""
    return _ops.decode(source, _channels(mode))


def decode_resize(source: Source, size: Size, mode: str = "RGB") -> np.ndarray:
    """Decoded and resized to ``size`` (antialiased), decoding a JPEG at the smallest of 1/8,
    1/4, 1/2 or full scale that still covers ``size``: ``decode`` then ``resize``, faster."""
    return _ops.decode_resized(source, _channels(mode), _size(size), None, 0)


def decode_random_resized_crop(
    source: Source,
    size: Size,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    mode: str = "RGB",
    generator: Generator = None,
) -> np.ndarray:
    """``decode`` then ``random_resized_crop``, decoding only the crop's region of a JPEG, at
    reduced scale where the crop allows. The region is drawn as torchvision's
    ``RandomResizedCrop(size, scale, ratio)`` draws it, from the image's full size (read from
    its header), so the crops are distributed exactly as after a full decode."""
    return _ops.decode_resized(
        source, _channels(mode), _size(size), _crop(scale, ratio), _seed(generator)
    )


def resize(image: np.ndarray, size: Size) -> np.ndarray:
    """``image`` resized to ``size`` (``(height, width)``, or both sides for an int), with an
    antialiasing filter when it shrinks, as torchvision's ``resize(antialias=True)``."""
    return _ops.resized(image, _size(size), None, 0)


def random_resized_crop(
    image: np.ndarray,
    size: Size,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
    generator: Generator = None,
) -> np.ndarray:
    """A random region of ``image`` (an area fraction in ``scale``, an aspect ratio in
    ``ratio``, as torchvision's ``RandomResizedCrop.get_params`` draws it) resized to ``size``."""
    return _ops.resized(image, _size(size), _crop(scale, ratio), _seed(generator))


def horizontal_flip(image: np.ndarray) -> np.ndarray:
    """``image`` mirrored left to right."""
    return _ops.horizontal_flip(image)


def random_horizontal_flip(
    image: np.ndarray, p: float = 0.5, generator: Generator = None
) -> np.ndarray:
    """``image`` mirrored with probability ``p``; otherwise ``image`` itself."""
    return _ops.horizontal_flip(image) if _unit(generator) < p else image


def normalize(
    image: np.ndarray, mean: Sequence[float], std: Sequence[float]
) -> np.ndarray:
    """``float32`` ``[c, h, w]``: ``(value / 255 - mean) / std`` per channel, as torchvision's
    ``ToDtype(torch.float32, scale=True)`` then ``Normalize(mean, std)``."""
    return _ops.normalize(image, [float(m) for m in mean], [float(s) for s in std])


def to_chw(image: np.ndarray) -> np.ndarray:
    """``image`` as ``uint8`` ``[c, h, w]`` (contiguous), the layout torch's models take."""
    return _ops.to_chw(image)


__all__ = [
    "MAX_SIDE",
    "decode",
    "decode_random_resized_crop",
    "decode_resize",
    "horizontal_flip",
    "normalize",
    "random_horizontal_flip",
    "random_resized_crop",
    "resize",
    "to_chw",
]
