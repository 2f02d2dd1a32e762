"""Images/s on one core of one per-sample augmentation, written three ways, on the pipeline
bench's JPEGs held in memory: decode -> random resized crop to 224 -> random horizontal flip ->
float32 CHW normalized.

- `hetgen`: `hetgen.image` (decode_random_resized_crop, random_horizontal_flip, normalize), as a
  user's Dataset calls it in `__getitem__`;
- `torchvision`: torchvision's recommended path today, on tensors: `torchvision.io.decode_jpeg`
  then v2 `RandomResizedCrop(224, antialias=True)`, `RandomHorizontalFlip`,
  `ToDtype(float32, scale=True)`, `Normalize`;
- NVIDIA DALI's CPU pipeline with the same ops is bench/dali_pipeline.py.

    python bench/image_ops.py MODE FIXTURES SECONDS

Prints `rate IMAGES_PER_S`. bench/image_ops.sh alternates the three.
"""

import glob
import os
import sys
import time

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def hetgen_op():
    import hetgen.image as hi

    def run(blob):
        image = hi.random_horizontal_flip(hi.decode_random_resized_crop(blob, 224))
        return hi.normalize(image, MEAN, STD)

    return lambda blob: blob, run


def torchvision_op():
    import torch
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(MEAN, STD),
        ]
    )
    # The encoded bytes as the uint8 tensor decode_jpeg takes, made once, outside the timing.
    return (
        lambda blob: torch.frombuffer(bytearray(blob), dtype=torch.uint8),
        lambda data: transform(decode_jpeg(data)),
    )


def main():
    which, folder, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    prepare, run = {"hetgen": hetgen_op, "torchvision": torchvision_op}[which]()
    items = [prepare(open(f, "rb").read()) for f in sorted(glob.glob(f"{folder}/*.jpg"))]
    if not items:
        sys.exit(f"no fixtures in {folder}: run the Rust bench first (bench/pipeline.sh does)")
    for item in items[:4]:
        run(item)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run(items[n % len(items)])
        n += 1
    print(f"rate {n / (time.perf_counter() - start):.1f}")


if __name__ == "__main__":
    main()
