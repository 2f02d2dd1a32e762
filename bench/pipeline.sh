#!/usr/bin/env bash
# hetgen's pipeline beside torchvision's on the same JPEGs, in one go, and their ratio per core.
#   bench/pipeline.sh [SECONDS_PER_MEASUREMENT]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
seconds="${1:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
venv="$(scripts/torch-env.sh)"
"$venv/bin/pip" install -q --disable-pip-version-check -r requirements/bench.txt >&2
fixtures="$CARGO_TARGET_DIR/bench-fixtures"
cargo build -q --release -p hetgen-pipeline --example pipeline_bench
ours="$("$CARGO_TARGET_DIR/release/examples/pipeline_bench" "$fixtures" "$seconds")"
theirs="$("$venv/bin/python" bench/torchvision_pipeline.py "$fixtures" "$seconds")"
echo "$ours" | grep -v -- '-rate '
echo
echo "$theirs" | grep -v -- '-rate '
a="$(echo "$ours" | awk '/^hetgen-pipeline-rate/ {print $2}')"
b="$(echo "$theirs" | awk '/^torchvision-pipeline-rate/ {print $2}')"
echo
awk -v a="$a" -v b="$b" 'BEGIN { printf "hetgen / torchvision, per core: %.2fx\n", a / b }'
