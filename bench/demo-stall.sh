#!/usr/bin/env bash
# The main job's trainer stall, as a new user sees it: `make demo` RUNS times in a row (default
# 5), printing each run's trainer summary line, then the stalls side by side.
#   bench/demo-stall.sh [RUNS]
# The stall is the share of the trainer's step time spent waiting for data (summary.json's
# stall_fraction); what is measured is the whole `make demo`, build included (warm after the first).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
runs="${1:-5}"
stalls=()
for i in $(seq 1 "$runs"); do
  line="$(make -s demo 2>&1 | grep -E '^  trainer: ' || true)"
  if [[ -z "$line" ]]; then
    echo "run $i: make demo printed no trainer summary" >&2
    exit 1
  fi
  echo "run $i:$line"
  stalls+=("$(sed -E 's/.*stall ([0-9.]+) %.*/\1/' <<<"$line")")
done
echo "stall % per run: ${stalls[*]}"
