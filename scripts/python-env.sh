#!/usr/bin/env bash
# Creates or updates a Python venv and prints its path on stdout, so that a Makefile can say
# VENV="$(scripts/python-env.sh)"; what it did goes to stderr, in one line. By default it is the
# test suite's (requirements/test.txt); HETGEN_REQUIREMENTS=NAME installs requirements/NAME.txt
# instead (scripts/torch-env.sh does). The venv lives outside the checkout (HETGEN_VENV, default
# venv in hetgen's cache folder, scripts/cache-dir.sh) so that reruns and CI's fresh clones
# reuse it, and pip runs only when the requirements changed: a stamp in the venv records the
# sha256 of what it last installed.
# HETGEN_BASE_VENV=DIR makes it stand on another venv (scripts/bench-env.sh does): a .pth file
# puts that venv's packages on its path, so they are installed once. HETGEN_VENV_VAR is the
# setting a caller chooses the folder with (default HETGEN_VENV), for the message that names it.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HETGEN_VENV:-$("$repo/scripts/cache-dir.sh")/venv}"
requirements="$repo/requirements/${HETGEN_REQUIREMENTS:-test}.txt"
name="$(basename "$requirements" .txt)-env"
stamp="$venv/.hetgen-requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"

# A venv whose interpreter no longer runs (its base Python moved or changed) is built anew, but a
# folder that is not a venv is never cleared.
made=""
if ! "$venv/bin/python" -c '' 2>/dev/null; then
  if [ -d "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv")" ]; then
    echo "$name: $venv exists and is not a venv; set ${HETGEN_VENV_VAR:-HETGEN_VENV} elsewhere" >&2
    exit 1
  fi
  python3 -m venv --clear "$venv" >&2
  made="created $venv, "
fi
if [ -n "${HETGEN_BASE_VENV:-}" ]; then
  site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
  # Before pip runs, so that pip sees the base's packages as installed and leaves them there.
  site "$HETGEN_BASE_VENV" >"$(site "$venv")/hetgen-base-env.pth"
fi

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$name: ${made}requirements unchanged, pip skipped ($venv)" >&2
else
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  # Stamped only once pip succeeded, so a failed install is retried on the next run.
  echo "$want" >"$stamp.tmp"
  mv "$stamp.tmp" "$stamp"
  echo "$name: ${made}installed $(basename "$requirements") ($venv)" >&2
fi
echo "$venv"
