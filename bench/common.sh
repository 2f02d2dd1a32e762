# What every benchmark script begins with, sourced (not run) after `set -euo pipefail`: work
# from the repository root, in the build folder the other scripts share, with the system
# libraries the builds need; and the arithmetic the tables are made of.

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
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
