#!/usr/bin/env bash
# A user's own torch Dataset through hetgen's Python workers (hetgen.Loader, local mode) beside
# the same Dataset in a DataLoader with as many workers, samples/s into a Python loop, on one
# and two cores, alternating rounds; the median of the per-round ratios is the figure to quote.
#   bench/python_dataset.sh [SECONDS] [ROUNDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-5}"
rounds="${2:-5}"
# torchvision from requirements/bench.txt: the bench venv, on top of the torch venv.
venv="$(with_wheel scripts/bench-env.sh)"
# The pipeline bench's 64 JPEGs (500×375, q90), ten times over as a ten-class image folder.
fixtures="$CARGO_TARGET_DIR/bench-fixtures"
cargo build -q --release -p hetgen-pipeline --example pipeline_bench
"$CARGO_TARGET_DIR/release/examples/pipeline_bench" "$fixtures" 0.1 pipeline >/dev/null
folder="$CARGO_TARGET_DIR/bench-folder"
rm -rf "$folder"
n=0
for copy in $(seq 0 9); do
  for f in "$fixtures"/*.jpg; do
    mkdir -p "$folder/c$((n % 10))"
    ln -s "$f" "$folder/c$((n % 10))/$copy-$(basename "$f")"
    n=$((n + 1))
  done
done
export HETGEN_PYTHON="$venv/bin/python"
run() { "$venv/bin/python" bench/python_dataset.py "$1" "$folder" "$2" "$seconds" | awk '/^rate/ {print $2}'; }
echo "| cores | round | hetgen workers samples/s | DataLoader samples/s | ratio |"
echo "|---:|---:|---:|---:|---:|"
for cores in 1 2; do
  ratios=()
  for round in $(seq 1 "$rounds"); do
    a="$(run hetgen "$cores")"
    b="$(run dataloader "$cores")"
    r="$(ratio "$a" "$b")"
    ratios+=("$r")
    echo "| $cores | $round | $a | $b | $r |"
  done
  echo "| $cores | median | | | $(median "${ratios[@]}") |"
done
