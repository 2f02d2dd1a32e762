"""A data host frozen beside a real DDP job: the pytorch example (2 trainer hosts, each rank
reading through hetgen.Loader) with a third data host, run locally as is and with one data
host frozen (SIGSTOP, then SIGCONT) for FREEZE seconds from the job's first batch, alternating.

    python bench/ddp_straggler.py HETGEN_BINARY [ROUNDS] [FREEZE_S]

Prints per run the trainers' time (first batch to the last trainer-host process's exit: what
the GPUs are held for) and the job's (deploy to the last host's exit), and per round the
trainers' time lost as a share of the freeze. Run it from the repository root, with the wheel
built (make wheel); each run is checked to have exited 0.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests"))
from conftest import processes_of  # noqa: E402

HETGEN = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
FREEZE = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0


def project(base: Path) -> Path:
    subprocess.run([HETGEN, "new", "digits", "--example", "pytorch"], cwd=base, check=True,
                   capture_output=True)
    root = base / "digits"
    spec = root / "hetgen.toml"
    text, n = re.subn(r'(name = "data_group"\ninstance_type = "[^"]+"\ncount = )2', r"\g<1>3",
                      spec.read_text())
    assert n == 1
    spec.write_text(text)
    subprocess.run([HETGEN, "render"], cwd=root, check=True, capture_output=True)
    return root


def run(root: Path, freeze: bool) -> tuple[float, float]:
    audit = root / f"audit-{time.time_ns()}.txt"
    before = set(root.glob("build/digits/local/*"))
    log = (root / "deploy.log").open("w")
    t0 = time.monotonic()
    job = subprocess.Popen([HETGEN, "deploy", "--local", "--env", f"HETGEN_AUDIT_FILE={audit}"],
                           cwd=root, stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, "NO_COLOR": "1"})
    while not (audit.exists() and audit.read_text()):
        assert job.poll() is None, (root / "deploy.log").read_text()
        time.sleep(0.02)
    started = time.monotonic()
    (run_dir,) = set(root.glob("build/digits/local/*")) - before
    group = {h: json.loads((h / "input/config/resourceconfig.json").read_text())
             ["current_group_name"] for h in sorted((run_dir / "hosts").iterdir())}
    trainers = [h for h, g in group.items() if g == "dnn_group"]
    frozen = processes_of([h for h, g in group.items() if g == "data_group"][1]) if freeze else []
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    thaw_at = time.monotonic() + FREEZE
    done = None
    while job.poll() is None or frozen:
        if frozen and time.monotonic() >= thaw_at:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            frozen = []
        if done is None and not any(processes_of(h) for h in trainers):
            done = time.monotonic()
        time.sleep(0.02)
    assert job.returncode == 0, (root / "deploy.log").read_text()
    return (done or time.monotonic()) - started, time.monotonic() - t0


with tempfile.TemporaryDirectory() as base:
    root = project(Path(base))
    print(f"| round | trainers as is, s | trainers, one data host frozen {FREEZE:.0f} s, s "
          "| trainers lost, share of the freeze | job as is, s | job frozen, s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in range(1, ROUNDS + 1):
        (a, job_a), (b, job_b) = run(root, False), run(root, True)
        print(f"| {r} | {a:.2f} | {b:.2f} | {100 * (b - a) / FREEZE:.0f} % | {job_a:.1f} | "
              f"{job_b:.1f} |", flush=True)
