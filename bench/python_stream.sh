#!/usr/bin/env bash
# The data client on the trainer's side, from the same one and two data servers (ready batches,
# loopback), alternating rounds: the Rust client (the built-in trainer) against `hetgen.Loader`
# (a script's rank). Each reports its rate and what it cost its process, CPU seconds (every
# thread, user + system) per GB received: the measurement behind the default `reserve_vcpus`
# (docs/spec.md). The servers run on the last core and the clients on the first, so neither is
# charged for the other. The medians are the figures to quote.
#   bench/python_stream.sh [SECONDS] [ROUNDS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-3}"
rounds="${2:-5}"
venv="$(with_wheel scripts/torch-env.sh)"
cargo build -q --release -p hetgen-data --example stream_bench
bench="$CARGO_TARGET_DIR/release/examples/stream_bench"
cores="$(nproc)"
if [ "$cores" -lt 2 ]; then
  echo "python_stream.sh needs two cores: one for the servers, one for the client" >&2
  exit 1
fi
servers_on=(taskset -c "$((cores - 1))")
client_on=(taskset -c 0)
field() { awk -v k="$1" '$1 == k {print $2}'; }
echo "| servers | round | Rust client GB/s | hetgen.Loader GB/s | ratio | Rust client CPU s/GB | hetgen.Loader CPU s/GB |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for servers in 1 2; do
  # The servers live as long as their standard input stays open.
  exec 3> >("${servers_on[@]}" "$bench" serve "$servers" >"$CARGO_TARGET_DIR/stream-servers.txt")
  until grep -q '^servers ' "$CARGO_TARGET_DIR/stream-servers.txt" 2>/dev/null; do sleep 0.1; done
  addresses="$(awk '/^servers/ {print $2}' "$CARGO_TARGET_DIR/stream-servers.txt")"
  ratios=() rust_cpu=() python_cpu=()
  for round in $(seq 1 "$rounds"); do
    a="$("${client_on[@]}" "$bench" client "$addresses" "$seconds")"
    b="$("${client_on[@]}" "$venv/bin/python" bench/python_stream.py "$addresses" "$seconds")"
    a_rate="$(field rust-client-rate <<<"$a")" a_cpu="$(field rust-client-cpu-s-per-gb <<<"$a")"
    b_rate="$(field python-loader-rate <<<"$b")" b_cpu="$(field python-loader-cpu-s-per-gb <<<"$b")"
    r="$(ratio "$b_rate" "$a_rate")"
    ratios+=("$r") rust_cpu+=("$a_cpu") python_cpu+=("$b_cpu")
    echo "| $servers | $round | $a_rate | $b_rate | $r | $a_cpu | $b_cpu |"
  done
  exec 3>&-
  rm -f "$CARGO_TARGET_DIR/stream-servers.txt"
  echo "| $servers | **median** | | | **$(median "${ratios[@]}")** | **$(median "${rust_cpu[@]}")** | **$(median "${python_cpu[@]}")** |"
done
