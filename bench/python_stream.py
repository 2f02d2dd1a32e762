"""GB/s of images from running data servers into a Python loop through `hetgen.Loader`.

    python bench/python_stream.py ADDR,ADDR SECONDS

The servers are `stream_bench serve N` (ready 128 × 224×224×3 batches); bench/python_stream.sh
alternates this with the Rust client on the same servers. Also prints the process's CPU seconds
(all threads, user + system) per gigabyte received.
"""

import os
import resource
import sys
import time
from pathlib import Path

import hetgen

TOKEN = "bench-token-0123456789abcdef"
# The job the servers serve: runtime/data/examples/stream_bench.rs reads the same file.
SPEC = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "specs" / "stream-bench.toml"


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main():
    hosts, seconds = sys.argv[1].split(","), float(sys.argv[2])
    loader = hetgen.Loader(str(SPEC), hosts=hosts, token=TOKEN, prefetch=2)

    def batches():
        while True:
            yield from loader

    stream = batches()
    for _ in range(4):
        next(stream)
    total, start, cpu_start = 0, time.perf_counter(), cpu_seconds()
    while time.perf_counter() - start < seconds:
        images, _ = next(stream)
        images[0, 0, 0, 0]  # touch it, as a training step would read it
        total += images.nbytes
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    print(f"python-loader-rate {total / elapsed / 1e9:.3f}")
    print(f"python-loader-cpu-s-per-gb {cpu / (total / 1e9):.3f}")
    os._exit(0)


if __name__ == "__main__":
    main()
