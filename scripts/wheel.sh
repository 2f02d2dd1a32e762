#!/usr/bin/env bash
# Builds the hetgen wheel (python/) with maturin and installs it into the venv given, in place
# of any earlier build. `make wheel` builds it in debug mode for the test suite; the benchmarks
# pass --release (a debug build is no fair contender).
#   scripts/wheel.sh [--release] VENV
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
profile=() out=wheels
if [ "${1:-}" = "--release" ]; then
  profile=(--release) out=wheels-release
  shift
fi
venv="$1"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
tools="$(scripts/python-env.sh)"
rm -rf "${CARGO_TARGET_DIR:?}/$out"
PATH="$PATH:$tools/bin" maturin build --locked "${profile[@]}" --manifest-path python/Cargo.toml \
  -i "$venv/bin/python" -o "$CARGO_TARGET_DIR/$out" >&2
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$CARGO_TARGET_DIR/$out"/hetgen-*.whl >&2
