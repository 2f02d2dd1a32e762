#!/usr/bin/env bash
# hetgen's pipeline beside torchvision's and DALI's CPU pipeline on the same JPEGs, in one go,
# and hetgen's ratio to each, per core; beside them `hetgen profile --threads 1`, the figure users
# see, on the same files as an image folder.
#   bench/pipeline.sh [SECONDS_PER_MEASUREMENT] [ROUNDS]
# First the full tables (every op), then ROUNDS alternating runs of the three pipelines alone:
# a shared machine's speed drifts over seconds, so each round's ratios compare neighbours in
# time, and the median of the rounds is the figure to quote. Every run is pinned to the same
# CPU (the first this shell may use), so all three get one core.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-3}"
rounds="${2:-5}"
venv="$(scripts/bench-env.sh)"
fixtures="$CARGO_TARGET_DIR/bench-fixtures"
cargo build -q --release -p hetgen-pipeline --example pipeline_bench
cargo build -q --release -p hetgen --bin hetgen
cpu="$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')"
one=(taskset -c "$cpu")
ours=("${one[@]}" "$CARGO_TARGET_DIR/release/examples/pipeline_bench")
theirs=("${one[@]}" "$venv/bin/python" bench/torchvision_pipeline.py)
dali=("${one[@]}" "$venv/bin/python" bench/dali_pipeline.py)
"${ours[@]}" "$fixtures" "$seconds" | grep -v -- '-rate '
# The same pipeline as a user's spec over an image folder of the fixtures (ten classes).
spec_dir="$CARGO_TARGET_DIR/bench-profile"
rm -rf "$spec_dir"
mkdir -p "$spec_dir"
n=0
for f in "$fixtures"/*.jpg; do
  mkdir -p "$spec_dir/train/c$((n % 10))"
  ln -s "$f" "$spec_dir/train/c$((n % 10))/$(basename "$f")"
  n=$((n + 1))
done
# The job pipeline_bench's engine rows run (tests/fixtures/specs/pipeline-bench.toml).
cp tests/fixtures/specs/pipeline-bench.toml "$spec_dir/hetgen.toml"
profile=("${one[@]}" "$CARGO_TARGET_DIR/release/hetgen" profile "$spec_dir/hetgen.toml" --threads 1
  --out "$spec_dir/profile.json" --format json --seconds)
echo
"${theirs[@]}" "$fixtures" "$seconds" | grep -v -- '-rate '
"${dali[@]}" "$fixtures" "$seconds" | grep -v -- '-rate ' | tail -n 1
echo
echo "| round | hetgen images/s | torchvision images/s | DALI CPU images/s | hetgen / torchvision | hetgen / DALI | hetgen profile images/s | profile / hetgen | fused op images/s | profile / fused |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
to_tv=()
to_dali=()
to_row=()
to_fused=()
for round in $(seq 1 "$rounds"); do
  a="$("${ours[@]}" "$fixtures" "$seconds" pipeline | awk '/^hetgen-pipeline-rate/ {print $2}')"
  b="$("${theirs[@]}" "$fixtures" "$seconds" pipeline | awk '/^torchvision-pipeline-rate/ {print $2}')"
  c="$("${dali[@]}" "$fixtures" "$seconds" | awk '/^dali-pipeline-rate/ {print $2}')"
  p="$("${profile[@]}" "$seconds" 2>/dev/null | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["samples_per_s"], 1))')"
  q="$(ratio "$p" "$a")"
  to_row+=("$q")
  # The engine's own cost: profile against decode + random_resized_crop alone.
  f="$("${ours[@]}" "$fixtures" "$seconds" fused | awk '/^hetgen-fused-rate/ {print $2}')"
  g="$(ratio "$p" "$f")"
  to_fused+=("$g")
  r="$(ratio "$a" "$b")"
  d="$(ratio "$a" "$c")"
  to_tv+=("$r")
  to_dali+=("$d")
  echo "| $round | $a | $b | $c | $r | $d | $p | $q | $f | $g |"
done
echo
echo "hetgen / torchvision, per core (median of $rounds rounds): $(median "${to_tv[@]}")x"
echo "hetgen / DALI CPU, per core (median of $rounds rounds): $(median "${to_dali[@]}")x"
echo "hetgen profile --threads 1 / the pipeline row (median of $rounds rounds): $(median "${to_row[@]}")"
echo "hetgen profile --threads 1 / the fused decode + random_resized_crop op (median of $rounds rounds): $(median "${to_fused[@]}")"
