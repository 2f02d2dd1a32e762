#!/usr/bin/env bash
# Script mode on a CUDA machine: the `pytorch` example with `processes_per_host = "gpu"` (one
# torchrun worker per GPU of ml.g5.xlarge, NCCL), its trainer group cut to one host since one
# machine's GPUs cannot stand for two hosts', fed by two data hosts through the hetgen wheel's
# role launcher (`python -m hetgen train`, the code every host of a job on AWS's image runs).
# It uses the machine's own python3 and torch, and takes a built hetgen and wheel, so it needs
# no network:
#
#   scripts/gpu-script-check.sh HETGEN WHEEL [LIBDIR]
#     HETGEN  the hetgen binary; WHEEL  the wheel `make wheel` built;
#     LIBDIR  a folder with libjpeg.so.62 when the machine has no such library
set -euo pipefail
hetgen="$(realpath "$1")" wheel="$(realpath "$2")"
[ -n "${3:-}" ] && export LD_LIBRARY_PATH="$(realpath "$3")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
python3 -c 'import torch; assert torch.cuda.is_available(), "no CUDA device visible to PyTorch"; print("torch", torch.__version__, torch.cuda.get_device_name(0), "x", torch.cuda.device_count())'
python3 -m pip install -q --no-index --no-deps --force-reinstall "$wheel"
work="$(mktemp -d "${TMPDIR:-/tmp}/hetgen-gpu-script.XXXXXX")"
launcher="$work/launcher"
printf '#!/bin/sh\nexec python3 -m hetgen "$@"\n' >"$launcher" && chmod +x "$launcher"
cd "$work"
"$hetgen" new digits --example pytorch >&2
cd digits
# One trainer host (the second `count = 2`), and an image of its own so that `--launcher` runs
# the wheel's launcher directly (this machine has no AWS training toolkit).
awk '/^count = 2$/ && ++n == 2 { print "count = 1"; next } { print }
     /^\[sagemaker\]$/ { print "image_uri = \"123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1\"" }' \
  hetgen.toml >hetgen.new && mv hetgen.new hetgen.toml
"$hetgen" render >&2
"$hetgen" deploy --local --launcher "$launcher"
grep -h "held-out accuracy\|backend\|nccl\|NCCL" build/digits/local/*/hosts/*/output/log.txt | head -20 || true
echo "job folder: $work/digits/build/digits/local"
