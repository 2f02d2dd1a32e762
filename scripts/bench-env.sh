#!/usr/bin/env bash
# The benchmarks' venv, printed on stdout: BENCH_VENV="$(scripts/bench-env.sh)". It stands on
# the torch venv (scripts/torch-env.sh): a .pth file puts that venv's packages (torch, numpy) on
# its path, so the several-GB torch wheel is not installed twice, while what only benchmarks
# need (requirements/bench.txt: torchvision, NVIDIA DALI) goes into this venv alone, never into
# the one the test suite runs in. It lives outside the checkout (HETGEN_BENCH_VENV, default
# ~/.cache/hetgen/bench) and is stamped like the others, so pip runs only when bench.txt changes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torch="$("$here/torch-env.sh")"
venv="${HETGEN_BENCH_VENV:-$HOME/.cache/hetgen/bench}"
if ! "$venv/bin/python" -c '' 2>/dev/null; then
  if [ -d "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv")" ]; then
    echo "bench-env: $venv exists and is not a venv; set HETGEN_BENCH_VENV elsewhere" >&2
    exit 1
  fi
  python3 -m venv --clear "$venv" >&2
fi
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
# Before pip runs, so that pip sees torch (and numpy) as installed and leaves them there.
site "$torch" >"$(site "$venv")/hetgen-torch-env.pth"
HETGEN_VENV="$venv" HETGEN_REQUIREMENTS=bench exec "$here/python-env.sh"
