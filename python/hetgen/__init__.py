"""hetgen's data plane in any Python training loop.

``hetgen.Loader`` is an iterable of batches, like a ``torch.utils.data.DataLoader``:

- **remote**: inside a hetgen job (SageMaker, ``hetgen deploy --local``, or Kubeflow Trainer on
  Kubernetes) it streams from the job's data servers, found in ``resourceconfig.json`` (on
  Kubernetes, in the pod's ``HETGEN_KUBE_*`` variables), exactly once per epoch, surviving the
  loss of a server;
- **local**: given a spec (``hetgen.toml``), the same pipeline engine runs in this process on
  Rust threads.

Batches are numpy arrays over Rust-owned memory (``uint8`` NHWC images, ``int64`` labels), so
they work with torch (see :mod:`hetgen.torch`), JAX or ``tf.data`` alike. Nothing here imports
torch.
"""

from hetgen._loader import Batch, Loader
from hetgen.shards import Shards
from hetgen._native import (
    ConfigurationError,
    ConnectError,
    DataError,
    HandshakeError,
    HetgenError,
    SpecError,
)
from hetgen._native import __version__

__all__ = [
    "Batch",
    "ConfigurationError",
    "ConnectError",
    "DataError",
    "HandshakeError",
    "HetgenError",
    "Loader",
    "Shards",
    "SpecError",
    "__version__",
]
