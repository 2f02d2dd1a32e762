#!/usr/bin/env bash
# The benchmarks' venv, printed on stdout: BENCH_VENV="$(scripts/bench-env.sh)". It stands on
# the torch venv (scripts/torch-env.sh): a .pth file puts that venv's packages (torch, numpy) on
# its path, so the several-GB torch wheel is not installed twice, while what only benchmarks
# need (requirements/bench.txt: torchvision, NVIDIA DALI) goes into this venv alone, never into
# the one the test suite runs in. It lives outside the checkout (HETGEN_BENCH_VENV, default
# bench in hetgen's cache folder, scripts/cache-dir.sh) and is stamped like the others, so pip runs only when bench.txt changes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch="$("$here/torch-env.sh")"
HETGEN_VENV="${HETGEN_BENCH_VENV:-$("$here/cache-dir.sh")/bench}" HETGEN_VENV_VAR=HETGEN_BENCH_VENV \
  HETGEN_BASE_VENV="$torch" HETGEN_REQUIREMENTS=bench exec "$here/python-env.sh"
