#!/usr/bin/env bash
# Installs the system packages hetgen's build needs, when they are missing: libjpeg-turbo
# (headers and library; hetgen-pipeline decodes JPEGs with it), and a C compiler with the
# headers of the `python3` that makes the project's venvs (sagemaker-training, AWS's training
# toolkit in requirements/torch.txt, builds a small C extension when pip installs it).
# Idempotent and quiet when everything is there; uses apt-get on Debian and Ubuntu, and
# otherwise says what to install.
set -euo pipefail

python_headers() {
  local include
  include="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)" &&
    [ -f "$include/Python.h" ]
}

missing=()
if ! pkg-config --exists libjpeg 2>/dev/null && [ ! -f /usr/include/jpeglib.h ]; then
  # Debian names it libjpeg62-turbo-dev, Ubuntu libjpeg-turbo8-dev; libjpeg-dev picks either.
  missing+=(libjpeg-dev pkg-config)
fi
if ! command -v cc >/dev/null && ! command -v gcc >/dev/null; then
  missing+=(gcc)
fi
if ! python_headers; then
  missing+=(python3-dev)
fi
[ ${#missing[@]} = 0 ] && exit 0

if command -v apt-get >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "system-deps: installing ${missing[*]} (apt-get)" >&2
  $sudo apt-get update -qq >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  # python3-dev holds the headers of the system's python3 only.
  if ! python_headers; then
    echo "system-deps: \`$(command -v python3)\` has no Python.h; install its development files (headers)" >&2
    exit 1
  fi
  exit 0
fi
echo "system-deps: missing ${missing[*]}: install libjpeg-turbo (development files), pkg-config, a C compiler and python3's headers" >&2
exit 1
