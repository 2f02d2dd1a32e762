#!/usr/bin/env bash
# Creates (or reuses) the Python venv of the test suite and prints its path on stdout.
# Idempotent: pip runs only when requirements/test.txt changed since the last install.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${HETGEN_VENV:-$HOME/.cache/hetgen/venv}"
requirements="$repo/requirements/test.txt"
stamp="$venv/.hetgen-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

if [ ! -x "$venv/bin/python" ]; then
  echo "python-env: creating $venv" >&2
  python3 -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing $(basename "$requirements")" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$stamp"
else
  echo "python-env: up to date" >&2
fi
echo "$venv"
