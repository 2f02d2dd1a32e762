#!/usr/bin/env bash
# The venv that provides libtorch to the trainer crate, printed on stdout, so a Makefile can say
# TORCH_VENV="$(scripts/torch-env.sh)". tch 0.26 links against the PyTorch 2.13.0 wheel from
# PyPI (requirements/torch.txt); torch-sys finds it through LIBTORCH_USE_PYTORCH=1 and that
# venv's python first on PATH. It lives outside the checkout (HETGEN_TORCH_VENV, default torch
# in hetgen's cache folder, scripts/cache-dir.sh; several GB, and where `hetgen deploy --local`
# looks for torchrun) and is made and stamped exactly like the test venv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# pip builds sagemaker-training's C extension: a compiler and python3's headers first.
"$here/system-deps.sh"
HETGEN_VENV="${HETGEN_TORCH_VENV:-$("$here/cache-dir.sh")/torch}" HETGEN_VENV_VAR=HETGEN_TORCH_VENV \
  HETGEN_REQUIREMENTS=torch exec "$here/python-env.sh"
