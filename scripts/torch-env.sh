#!/usr/bin/env bash
# Creates or updates the venv that provides libtorch to the trainer crate and prints its path on
# stdout, so a Makefile can say TORCH_VENV="$(scripts/torch-env.sh)". tch 0.26 links against the
# PyTorch 2.13.0 wheel from PyPI; torch-sys finds it through LIBTORCH_USE_PYTORCH=1 and that
# venv's python first on PATH. The venv (several GB) lives outside the checkout (HETGEN_TORCH_VENV,
# default ~/.cache/hetgen/torch) so reruns and fresh clones reuse it; pip runs only when
# requirements/torch.txt changed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HETGEN_TORCH_VENV:-$HOME/.cache/hetgen/torch}"
requirements="$repo/requirements/torch.txt"
stamp="$venv/.hetgen-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

made=""
if ! "$venv/bin/python" -c '' 2>/dev/null; then
  if [ -d "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv")" ]; then
    echo "torch-env: $venv exists and is not a venv; set HETGEN_TORCH_VENV elsewhere" >&2
    exit 1
  fi
  python3 -m venv --clear "$venv" >&2
  made="created $venv, "
fi

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "torch-env: ${made}requirements unchanged, pip skipped ($venv)" >&2
else
  echo "torch-env: ${made}installing $(basename "$requirements") (a few GB, once)" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  echo "$want" >"$stamp.tmp"
  mv "$stamp.tmp" "$stamp"
  echo "torch-env: installed $(basename "$requirements") ($venv)" >&2
fi
echo "$venv"
