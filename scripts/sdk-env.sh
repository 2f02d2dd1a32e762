#!/usr/bin/env bash
# The venv with SageMaker Python SDK MAJOR (2 or 3) that tests/sdk runs the rendered SDK files
# with, printed on stdout, so a Makefile can say SDK3="$(scripts/sdk-env.sh 3)". Each major has
# its own venv (the two cannot share one: same package name) outside the checkout
# (sdk2 and sdk3 in hetgen's cache folder, scripts/cache-dir.sh), made and stamped exactly like the test venv from
# requirements/sdkMAJOR.txt.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  2 | 3) ;;
  *) echo "usage: $0 2|3" >&2; exit 2 ;;
esac
HETGEN_VENV="$("$here/cache-dir.sh")/sdk$1" HETGEN_REQUIREMENTS="sdk$1" exec "$here/python-env.sh"
