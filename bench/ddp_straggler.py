"""A data host frozen beside a real DDP job: the pytorch example (2 trainer hosts, each rank
reading through hetgen.Loader) with a third data host, run locally as is and with one data
host frozen (SIGSTOP, then SIGCONT) for FREEZE seconds from the job's first batch, alternating.

    python bench/ddp_straggler.py HETGEN_BINARY [ROUNDS] [FREEZE_S]

Prints per round the trainers' time (first batch to the last trainer-host process's exit: what
the GPUs are held for) as is and frozen, the time lost as a share of the freeze, and the
job's time (deploy to the last host's exit). Run it from the repository root with the wheel
built (make wheel). The runs are those of the process test
(python/tests/test_script_mode.py, `trainers_time`), which checks each exited 0.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
from conftest import three_data_hosts, trainers_time  # noqa: E402

os.environ["HETGEN_BIN"] = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FREEZE = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0

with tempfile.TemporaryDirectory() as base:
    hetgen = os.environ["HETGEN_BIN"]
    subprocess.run([hetgen, "new", "digits", "--example", "pytorch"], cwd=base, check=True)
    root = Path(base) / "digits"
    three_data_hosts(root)
    subprocess.run([hetgen, "render"], cwd=root, check=True, capture_output=True)
    print(f"| round | trainers as is, s | trainers, one data host frozen {FREEZE:.0f} s, s "
          "| trainers lost, share of the freeze | job as is, s | job frozen, s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in range(1, ROUNDS + 1):
        times = []
        for freeze in (None, FREEZE):
            started = time.monotonic()
            trainers = trainers_time(root, Path(base) / f"audit-{r}-{bool(freeze)}.txt", freeze)
            times.append((trainers, time.monotonic() - started))
        (a, job_a), (b, job_b) = times
        print(f"| {r} | {a:.2f} | {b:.2f} | {100 * (b - a) / FREEZE:.0f} % | {job_a:.1f} | "
              f"{job_b:.1f} |", flush=True)
