#!/usr/bin/env bash
# Builds the hetgen wheel in release mode and installs it into the venv given (`make test`
# installs a debug one, which is no fair contender in a benchmark).
#   bench/release-wheel.sh VENV
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="$1"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hetgen/target}"
tools="$(scripts/python-env.sh)"
rm -rf "$CARGO_TARGET_DIR/wheels-release"
PATH="$PATH:$tools/bin" maturin build -q --release --manifest-path python/Cargo.toml \
  -i "$venv/bin/python" -o "$CARGO_TARGET_DIR/wheels-release" >&2
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$CARGO_TARGET_DIR"/wheels-release/hetgen-*.whl >&2
