#!/usr/bin/env bash
# What the data client costs the trainer host: CPU seconds per gigabyte of batches received,
# for the Rust client (the built-in trainer) and for `hetgen.Loader` (a script's rank), with
# the servers on one core and the client on another so neither is charged for the other.
# This is the measurement behind the default `reserve_vcpus` (docs/spec.md).
#   bench/client_cpu.sh [SECONDS] [ROUNDS]
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
cores="$(nproc)"
if [ "$cores" -lt 2 ]; then
  echo "client_cpu.sh needs two cores: one for the servers, one for the client" >&2
  exit 1
fi
server_core=$((cores - 1))
echo "| servers | round | Rust client GB/s | Rust client CPU s/GB | hetgen.Loader GB/s | hetgen.Loader CPU s/GB |"
echo "|---:|---:|---:|---:|---:|---:|"
for servers in 1 2; do
  # The servers live as long as their standard input stays open.
  exec 3> >(taskset -c "$server_core" "$bench" serve "$servers" >"$CARGO_TARGET_DIR/stream-servers.txt")
  until grep -q '^servers ' "$CARGO_TARGET_DIR/stream-servers.txt" 2>/dev/null; do sleep 0.1; done
  addresses="$(awk '/^servers/ {print $2}' "$CARGO_TARGET_DIR/stream-servers.txt")"
  rust=() python=()
  for round in $(seq 1 "$rounds"); do
    a="$(taskset -c 0 "$bench" client "$addresses" "$seconds")"
    b="$(taskset -c 0 "$venv/bin/python" bench/python_stream.py "$addresses" "$seconds")"
    a_rate="$(awk '/^rust-client-rate/ {print $2}' <<<"$a")"
    a_cpu="$(awk '/^rust-client-cpu-s-per-gb/ {print $2}' <<<"$a")"
    b_rate="$(awk '/^python-loader-rate/ {print $2}' <<<"$b")"
    b_cpu="$(awk '/^python-loader-cpu-s-per-gb/ {print $2}' <<<"$b")"
    rust+=("$a_cpu") python+=("$b_cpu")
    echo "| $servers | $round | $a_rate | $a_cpu | $b_rate | $b_cpu |"
  done
  exec 3>&-
  rm -f "$CARGO_TARGET_DIR/stream-servers.txt"
  median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  echo "| $servers | median | | $(median "${rust[@]}") | | $(median "${python[@]}") |"
done
