#!/usr/bin/env bash
# The Python package's remote rate beside the Rust client's, from the same one and two data
# servers (ready batches, loopback), alternating rounds; the median ratio is the figure to quote.
#   bench/python_stream.sh [SECONDS] [ROUNDS]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
seconds="${1:-3}"
rounds="${2:-5}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
scripts/system-deps.sh
venv="$(scripts/torch-env.sh)"
bench/release-wheel.sh "$venv"
cargo build -q --release -p hetgen-data --example stream_bench
bench="$CARGO_TARGET_DIR/release/examples/stream_bench"
echo "| servers | round | Rust client GB/s | hetgen.Loader GB/s | ratio |"
echo "|---:|---:|---:|---:|---:|"
for servers in 1 2; do
  # The servers live as long as their standard input stays open.
  exec 3> >("$bench" serve "$servers" >"$CARGO_TARGET_DIR/stream-servers.txt")
  until grep -q '^servers ' "$CARGO_TARGET_DIR/stream-servers.txt" 2>/dev/null; do sleep 0.1; done
  addresses="$(awk '/^servers/ {print $2}' "$CARGO_TARGET_DIR/stream-servers.txt")"
  ratios=()
  for round in $(seq 1 "$rounds"); do
    a="$("$bench" client "$addresses" "$seconds" | awk '/^rust-client-rate/ {print $2}')"
    b="$("$venv/bin/python" bench/python_stream.py "$addresses" "$seconds" | awk '/^python-loader-rate/ {print $2}')"
    r="$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }')"
    ratios+=("$r")
    echo "| $servers | $round | $a | $b | $r |"
  done
  exec 3>&-
  rm -f "$CARGO_TARGET_DIR/stream-servers.txt"
  median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
  echo "| $servers | median | | | ${median} |"
done
