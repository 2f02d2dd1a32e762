#!/usr/bin/env bash
# hetgen.image against torchvision's tensor path and DALI's CPU pipeline, the same augmentation
# on the same JPEGs, images/s on one core, alternating rounds; the medians of the per-round
# ratios are the figures to quote.
#   bench/image_ops.sh [SECONDS] [ROUNDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-3}"
rounds="${2:-5}"
venv="$(with_wheel scripts/bench-env.sh)"
jpeg_folder >/dev/null # writes the pipeline bench's JPEGs into the fixtures folder
fixtures="$CARGO_TARGET_DIR/bench-fixtures"
run() { taskset -c 0 "$venv/bin/python" bench/image_ops.py "$1" "$fixtures" "$seconds" | awk '/^rate/ {print $2}'; }
dali() { taskset -c 0 "$venv/bin/python" bench/dali_pipeline.py "$fixtures" "$seconds" | awk '/^dali-pipeline-rate/ {print $2}'; }
echo "| round | hetgen.image images/s | torchvision images/s | DALI CPU images/s | hetgen / torchvision | hetgen / DALI |"
echo "|---:|---:|---:|---:|---:|---:|"
tv=() da=()
for round in $(seq 1 "$rounds"); do
  h="$(run hetgen)"
  t="$(run torchvision)"
  d="$(dali)"
  tv+=("$(ratio "$h" "$t")")
  da+=("$(ratio "$h" "$d")")
  echo "| $round | $h | $t | $d | ${tv[-1]} | ${da[-1]} |"
done
echo "| median | | | | $(median "${tv[@]}") | $(median "${da[@]}") |"
