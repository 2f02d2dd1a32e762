"""hetgen's role launcher: what every host of a hetgen job runs.

The same Rust launcher as in hetgen's own images (``launcher train``), shipped in this package
so that a job can run on AWS's prebuilt PyTorch training image with nothing built: on a data
host it serves batches until the trainers are done; on a trainer host it runs the job's script
under ``torchrun`` across the trainer group's hosts, tells the data hosts when training ends,
passes SIGTERM on and writes the failure reason where SageMaker reads it. It reads the
SageMaker environment (``/opt/ml``, or ``SAGEMAKER_BASE_DIR``; on Kubernetes the pod's
``HETGEN_KUBE_*`` variables) and the job file (``HETGEN_JOB_FILE``).

    python -m hetgen train [--job FILE] [-- SCRIPT ARGS...]
    hetgen-launcher train [--job FILE] [-- SCRIPT ARGS...]
"""

import os
import signal
import sys
from typing import Optional, Sequence

from hetgen import _native


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs this host's role with ``argv`` (default: the command line) and returns its exit
    status (``sys.exit(main())`` passes it on)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # A Python dataset's workers run with this interpreter: the one that has hetgen (and, on
    # AWS's image, torch) installed.
    os.environ.setdefault("HETGEN_PYTHON", sys.executable)
    # The role handles SIGTERM and SIGINT itself (a data server stops cleanly, a trainer host
    # passes them to torchrun's process group); Python's handlers would only turn them into a
    # KeyboardInterrupt once the role has ended.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    return _native.launch(args)


if __name__ == "__main__":
    sys.exit(main())
