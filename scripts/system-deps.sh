#!/usr/bin/env bash
# Installs the system libraries hetgen's build links, when they are missing: libjpeg-turbo
# (headers and library; hetgen-pipeline decodes JPEGs with it). Idempotent and quiet when
# everything is there; uses apt-get on Debian and Ubuntu, and otherwise says what to install.
set -euo pipefail

if pkg-config --exists libjpeg 2>/dev/null || [ -f /usr/include/jpeglib.h ]; then
  exit 0
fi
if command -v apt-get >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "system-deps: installing libjpeg-turbo (apt-get install libjpeg62-turbo-dev)" >&2
  $sudo apt-get update -qq >&2
  # Debian names it libjpeg62-turbo-dev, Ubuntu libjpeg-turbo8-dev; libjpeg-dev picks either.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjpeg-dev pkg-config >&2
  exit 0
fi
echo "system-deps: libjpeg-turbo's headers are missing; install libjpeg-turbo (development files) and pkg-config" >&2
exit 1
