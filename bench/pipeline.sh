#!/usr/bin/env bash
# hetgen's pipeline beside torchvision's on the same JPEGs, in one go, and their ratio per core.
#   bench/pipeline.sh [SECONDS_PER_MEASUREMENT] [ROUNDS]
# First both full tables (every op), then ROUNDS alternating runs of the two pipelines alone:
# a shared machine's speed drifts over seconds, so each round's ratio compares neighbours in
# time, and the median of the rounds is the figure to quote.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
seconds="${1:-3}"
rounds="${2:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
scripts/system-deps.sh
venv="$(scripts/torch-env.sh)"
"$venv/bin/pip" install -q --disable-pip-version-check -r requirements/bench.txt >&2
fixtures="$CARGO_TARGET_DIR/bench-fixtures"
cargo build -q --release -p hetgen-pipeline --example pipeline_bench
ours="$CARGO_TARGET_DIR/release/examples/pipeline_bench"
theirs=("$venv/bin/python" bench/torchvision_pipeline.py)
"$ours" "$fixtures" "$seconds" | grep -v -- '-rate '
echo
"${theirs[@]}" "$fixtures" "$seconds" | grep -v -- '-rate '
echo
echo "| round | hetgen images/s | torchvision images/s | ratio |"
echo "|---:|---:|---:|---:|"
ratios=()
for round in $(seq 1 "$rounds"); do
  a="$("$ours" "$fixtures" "$seconds" pipeline | awk '/^hetgen-pipeline-rate/ {print $2}')"
  b="$("${theirs[@]}" "$fixtures" "$seconds" pipeline | awk '/^torchvision-pipeline-rate/ {print $2}')"
  r="$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
  ratios+=("$r")
  echo "| $round | $a | $b | $r |"
done
median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
echo
echo "hetgen / torchvision, per core (median of $rounds rounds): ${median}x"
