#!/usr/bin/env bash
# hetgen.Loader (local mode) beside a torchvision DataLoader, images/s into a Python loop, on one
# and two cores, alternating rounds; the median of the per-round ratios is the figure to quote.
# Two other modes of bench/python_loader.py can be compared the same way: `workers
# dataset-dataloader` runs a user's own torch Dataset through hetgen's Python workers and
# through a DataLoader with as many workers; `shards-workers shards-dataloader` a dataset stored
# in tar shards (bench/tar_shards.py).
#   bench/python_loader.sh [SECONDS] [ROUNDS] [MODE_A MODE_B]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-5}"
rounds="${2:-5}"
mode_a="${3:-hetgen}"
mode_b="${4:-dataloader}"
# torchvision from requirements/bench.txt: the bench venv, on top of the torch venv.
venv="$(with_wheel scripts/bench-env.sh)"
folder="$(jpeg_folder)"
# The shard modes read the same JPEGs written as tar shards.
if [[ "$mode_a" == shards-* ]]; then
  shards="$CARGO_TARGET_DIR/bench-shards"
  rm -rf "$shards"
  "$venv/bin/python" bench/tar_shards.py "$folder" "$shards"
  folder="$shards"
fi
# hetgen's Python workers run with the bench venv's interpreter (torchvision is there).
export HETGEN_PYTHON="$venv/bin/python"
run() { "$venv/bin/python" bench/python_loader.py "$1" "$folder" "$2" "$seconds" | awk '/^rate/ {print $2}'; }
echo "| cores | round | $mode_a images/s | $mode_b images/s | ratio |"
echo "|---:|---:|---:|---:|---:|"
for cores in 1 2; do
  ratios=()
  for round in $(seq 1 "$rounds"); do
    a="$(run "$mode_a" "$cores")"
    b="$(run "$mode_b" "$cores")"
    r="$(ratio "$a" "$b")"
    ratios+=("$r")
    echo "| $cores | $round | $a | $b | $r |"
  done
  echo "| $cores | median | | | $(median "${ratios[@]}") |"
done
