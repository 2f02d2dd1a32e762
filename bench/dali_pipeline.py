"""NVIDIA DALI's CPU pipeline with the ops of hetgen's training pipeline, on the same JPEGs.

decoders.image_random_crop (libjpeg-turbo, decoding only the crop's region) -> resize 224×224
(antialiased) -> crop_mirror_normalize (a random mirror, float32 CHW, normalised), with
num_threads=1 and device_id=None: DALI's CPU-only mode, on a machine without a GPU. The encoded
files come from memory through external_source, as hetgen's and torchvision's benches read them.
DALI runs a batch at a time and keeps helper threads besides its worker, so the process is
pinned to one CPU: the figure is per core, like the others. Prints images/s; the last line is
machine-readable.

    python bench/dali_pipeline.py FIXTURES [SECONDS] [BATCH]
"""

import glob
import os
import sys
import time

import numpy as np
from nvidia.dali import fn, pipeline_def, types

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "target/bench-fixtures"
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    # One core: the first this process may use.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    files = sorted(glob.glob(f"{folder}/*.jpg"))
    if not files:
        sys.exit(f"no fixtures in {folder}: run the Rust bench first (bench/pipeline.sh does)")
    blobs = [np.fromfile(f, dtype=np.uint8) for f in files]
    batches = [
        [blobs[(i * batch + j) % len(blobs)] for j in range(batch)] for i in range(len(blobs))
    ]

    @pipeline_def(batch_size=batch, num_threads=1, device_id=None, seed=1, prefetch_queue_depth=1)
    def training():
        jpegs = fn.external_source(source=batches, cycle=True, name="jpegs")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=224, resize_y=224, antialias=True)
        return fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=MEAN,
            std=STD,
            mirror=fn.random.coin_flip(probability=0.5),
        )

    pipe = training()
    pipe.build()
    for _ in range(2):
        pipe.run()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        (out,) = pipe.run()
        n += len(out)
    images_per_s = n / (time.perf_counter() - start)
    print(f"| DALI CPU pipeline (one core, batches of {batch}) | {images_per_s:.0f} |")
    print(f"dali-pipeline-rate {images_per_s:.1f}")


if __name__ == "__main__":
    main()
