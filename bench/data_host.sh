#!/usr/bin/env bash
# One data host running a user's torch Dataset (bench/folder_dataset.py) for one trainer process
# on this machine: hetgen's data server with its Python workers beside the data plane of AWS's
# published sample (a Python gRPC server around a DataLoader), samples/s with WORKERS worker
# processes, alternating rounds; then what the trainer sees when a data host is killed.
#   bench/data_host.sh [SECONDS] [ROUNDS] [WORKERS]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seconds="${1:-5}"
rounds="${2:-5}"
workers="${3:-2}"
# torchvision and grpcio from requirements/bench.txt: the bench venv, on top of the torch venv.
venv="$(with_wheel scripts/bench-env.sh)"
folder="$(jpeg_folder)"
cargo build -q --release -p hetgen -p hetgen-data --bins
export HETGEN_BIN="$CARGO_TARGET_DIR/release/hetgen"
export HETGEN_DATA_SERVER="$CARGO_TARGET_DIR/release/hetgen-data-server"
run() { "$venv/bin/python" bench/data_host.py "$1" "$folder" "$workers" "$seconds" | awk '/^rate/ {print $2}'; }
echo "| round | hetgen samples/s | AWS sample's data plane samples/s | ratio |"
echo "|---:|---:|---:|---:|"
ratios=()
for round in $(seq 1 "$rounds"); do
  a="$(run hetgen)"
  b="$(run aws)"
  r="$(ratio "$a" "$b")"
  ratios+=("$r")
  echo "| $round | $a | $b | $r |"
done
echo "| median | | | $(median "${ratios[@]}") |"
echo
for which in hetgen-kill aws-kill; do
  echo "$which: $("$venv/bin/python" bench/data_host.py "$which" "$folder" "$workers" 5)"
done
