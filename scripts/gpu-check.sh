#!/usr/bin/env bash
# The trainer's GPU path on any CUDA machine, in a few minutes: ResNet-50 (bf16 autocast, every
# GPU of the machine as a replica) on synthetic 500x375 JPEGs, run by `hetgen bench` three
# times — homogeneous (the trainer host decodes and augments on its own cores), remote-only (two
# data hosts on the other cores stream batches over gRPC) and hybrid (both at once: the trainer
# host's spare cores, its vCPUs less `reserve_vcpus`, preprocess beside the data hosts). Prints
# the bench table and leaves bench.json (with `hybrid_ratio`, hybrid samples/s over the other
# two together) and bench.svg in the work folder it names. Then the same three with the model
# off (`--input-only`): what each input alone delivers on this host, the ceiling the GPU run is
# compared with.
#
#   scripts/gpu-check.sh [STEPS]        (default 100 steps per configuration)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
steps="${1:-100}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$("$repo/scripts/cache-dir.sh")/target}"
cd "$repo"
make build >&2
venv="$(scripts/torch-env.sh)"
"$venv/bin/python" -c 'import torch; assert torch.cuda.is_available(), "no CUDA device visible to PyTorch"; print(torch.cuda.get_device_name(0), "x", torch.cuda.device_count())'
work="$(mktemp -d "${TMPDIR:-/tmp}/hetgen-gpu-check.XXXXXX")"
cp scripts/gpu-check/hetgen.toml "$work/"
cd "$work"
"$CARGO_TARGET_DIR/debug/hetgen" render >&2
"$CARGO_TARGET_DIR/debug/hetgen" bench --release --steps "$steps" --results "$work/bench"
"$CARGO_TARGET_DIR/debug/hetgen" bench --release --steps "$steps" --input-only --results "$work/input-only"
echo "results: $work/bench and $work/input-only (bench.json, bench.svg; host logs under */run/hosts/*/output/log.txt)"
