"""The torchvision + PIL counterpart of hetgen's training pipeline, on the same JPEG files.

decode (PIL, libjpeg-turbo) -> RandomResizedCrop(224) -> RandomHorizontalFlip -> PILToTensor ->
ConvertImageDtype(float32) -> Normalize: the form torchvision's own reference scripts use today.
One image at a time on one thread, as one DataLoader worker runs it. Prints images/s for that
pipeline, for the older form ending in ToTensor (labelled as such), and for the decode alone;
the last line is machine-readable.

    python bench/torchvision_pipeline.py FIXTURES [SECONDS] [pipeline]

With `pipeline`, only the modern pipeline is timed (bench/pipeline.sh alternates it with
hetgen's and DALI's).
"""

import glob
import io
import sys
import time

import torch
from PIL import Image
from torchvision import transforms

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def rate(items, budget, fn):
    for item in items[:4]:
        fn(item)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        fn(items[n % len(items)])
        n += 1
    return n / (time.perf_counter() - start)


def decode(blob):
    return Image.open(io.BytesIO(blob)).convert("RGB")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "target/bench-fixtures"
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    torch.set_num_threads(1)
    files = sorted(glob.glob(f"{folder}/*.jpg"))
    if not files:
        sys.exit(f"no fixtures in {folder}: run the Rust bench first (bench/pipeline.sh does)")
    blobs = [open(f, "rb").read() for f in files]
    modern = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
        transforms.ConvertImageDtype(torch.float32),
        transforms.Normalize(MEAN, STD),
    ])
    full = rate(blobs, budget, lambda b: modern(decode(b)))
    if sys.argv[3:4] == ["pipeline"]:
        print(f"torchvision-pipeline-rate {full:.1f}")
        return
    legacy = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    old = rate(blobs, budget, lambda b: legacy(decode(b)))
    alone = rate(blobs, budget, decode)
    print("| torchvision + PIL (one core) | images/s |")
    print("|---|---:|")
    print(f"| decode (PIL) | {alone:.0f} |")
    print(
        "| pipeline: RandomResizedCrop(224) → RandomHorizontalFlip → PILToTensor → "
        f"ConvertImageDtype(float32) → Normalize | {full:.0f} |"
    )
    print(
        "| the older form: RandomResizedCrop(224) → RandomHorizontalFlip → ToTensor → "
        f"Normalize | {old:.0f} |"
    )
    print(f"torchvision-pipeline-rate {full:.1f}")


if __name__ == "__main__":
    main()
