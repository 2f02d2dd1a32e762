"""Type stubs of the native module (``python/src``); the public API is ``hetgen``'s."""

from typing import Any, Optional, Union

import numpy as np
import numpy.typing as npt

__version__: str
PROTOCOL_VERSION: int
REPLAY_VAR: str
REPLAY_STEPS_VAR: str

def launch(argv: list[str]) -> int: ...
def step_line(step: int, step_ms: float, wait_ms: float, samples_per_s: float) -> str: ...

class HetgenError(Exception): ...
class SpecError(HetgenError): ...
class ConfigurationError(HetgenError): ...
class ConnectError(HetgenError): ...
class HandshakeError(HetgenError): ...
class DataError(HetgenError):
    sample: Optional[int]
    stage: Optional[str]
    traceback: Optional[str]
    host: Optional[str]

class BatchMemory:
    def __len__(self) -> int: ...

class ImageBatch:
    images: npt.NDArray[np.uint8]
    labels: npt.NDArray[np.int64]
    sample_ids: npt.NDArray[np.uint64]
    epoch: int
    shard: int
    index: int

class TensorBatch:
    arrays: list[npt.NDArray[Any]]
    names: list[str]
    structure: str
    sample_ids: npt.NDArray[np.uint64]
    epoch: int
    shard: int
    index: int

class NativeLoader:
    def __init__(
        self,
        *,
        spec: Optional[str] = None,
        mode: Optional[str] = None,
        hosts: Optional[list[str]] = None,
        token: Optional[str] = None,
        channels: Optional[dict[str, str]] = None,
        threads: Optional[int] = None,
        rank: int = 0,
        world_size: int = 1,
        local_world_size: int = 1,
        deterministic: Optional[bool] = None,
        epochs: Optional[int] = None,
        prefetch: int = 2,
        connect_timeout: Optional[float] = None,
        stall_timeout: Optional[float] = None,
        trainer_id: Optional[str] = None,
        audit: bool = True,
    ) -> None: ...
    mode: str
    hosts: list[str]
    threads: int
    batches_by_source: dict[str, int]
    job_name: str
    batch_size: int
    shard_size: int
    seed: int
    samples_per_epoch: int
    rank: int
    world_size: int
    epochs: Optional[int]
    deterministic: bool
    output_shape: list[int]
    normalization: list[tuple[list[float], list[float]]]
    def batches_per_epoch(self) -> int: ...
    def remaining_in_epoch(self) -> tuple[int, int]: ...
    def next_batch(self) -> Optional[Union[ImageBatch, TensorBatch]]: ...
    def position(self) -> str: ...
    def restart(self, position: str) -> None: ...
    def close(self) -> None: ...
    def shutdown(self, reason: str, failed: bool = False) -> list[tuple[str, str]]: ...

class _Image:
    """hetgen's image operations (`hetgen.image` wraps them)."""

    MAX_SIDE: int
    def decode(self, source: Any, channels: int) -> np.ndarray: ...
    def decode_resized(
        self,
        source: Any,
        channels: int,
        size: tuple[int, int],
        crop: Optional[tuple[tuple[float, float], tuple[float, float]]],
        seed: int,
    ) -> np.ndarray: ...
    def resized(
        self,
        image: np.ndarray,
        size: tuple[int, int],
        crop: Optional[tuple[tuple[float, float], tuple[float, float]]],
        seed: int,
    ) -> np.ndarray: ...
    def horizontal_flip(self, image: np.ndarray) -> np.ndarray: ...
    def normalize(self, image: np.ndarray, mean: list[float], std: list[float]) -> np.ndarray: ...
    def to_chw(self, image: np.ndarray) -> np.ndarray: ...

image: _Image
