# What every benchmark script begins with, sourced (not run) after `set -euo pipefail`: work
# from the repository root, in the build folder the other scripts share, with the system
# libraries the builds need; and the arithmetic the tables are made of.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(scripts/cache-dir.sh)/target}"
scripts/system-deps.sh

# Prints the Python environment that `$1` (one of scripts/*-env.sh) makes, once hetgen's release
# wheel is installed in it.
# (Chained: errexit does not hold inside the command substitution callers run it in.)
with_wheel() {
  local venv
  venv="$("$1")" && scripts/wheel.sh --release "$venv" >&2 && echo "$venv"
}

# The median of the numbers given: the figure to quote from rounds on a machine whose speed drifts.
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# A / B, to two decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# Prints a ten-class image folder of the pipeline bench's 64 JPEGs (500×375, q90) ten times over
# (640 files, links), made afresh under the build folder.
jpeg_folder() {
  local fixtures="$CARGO_TARGET_DIR/bench-fixtures" folder="$CARGO_TARGET_DIR/bench-folder" n=0
  cargo build -q --release -p hetgen-pipeline --example pipeline_bench >&2
  "$CARGO_TARGET_DIR/release/examples/pipeline_bench" "$fixtures" 0.1 pipeline >/dev/null
  rm -rf "$folder"
  for copy in $(seq 0 9); do
    for f in "$fixtures"/*.jpg; do
      mkdir -p "$folder/c$((n % 10))"
      ln -s "$f" "$folder/c$((n % 10))/$copy-$(basename "$f")"
      n=$((n + 1))
    done
  done
  echo "$folder"
}
