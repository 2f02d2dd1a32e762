#!/usr/bin/env bash
# Builds the hetgen wheel (python/) with maturin and installs it into the venv given, in place
# of any earlier build. `make wheel` builds it in debug mode for the test suite; the benchmarks
# pass --release (a debug build is no fair contender).
#   scripts/wheel.sh [--release] VENV
#
# The wheel is manylinux_2_17 (manylinux2014) and carries libjpeg-turbo, so that it installs
# with no compiler into AWS's PyTorch training image (Ubuntu 22.04, glibc 2.35) as into any
# other Linux since glibc 2.17, whatever glibc this machine has: zig links it against glibc
# 2.17's symbols, and maturin's auditwheel repair copies the libjpeg it links into
# `hetgen.libs/` (with an rpath) after checking every symbol against the manylinux policy. zig
# brings its own C headers for that glibc, so it is shown this system's libjpeg headers alone
# (a folder of copies) and its library folder, not /usr/include as a whole.
#
# The wheel also carries the `hetgen` command, so that `pip install` of this one file is the
# whole tool: cargo-zigbuild links it against glibc 2.17 as maturin links the module, without
# the `checkout` feature (no libjpeg, no source tree: see generator/cli/Cargo.toml), and it goes
# in the wheel's `hetgen.data/scripts/`, which pip installs into the environment's `bin`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
profile=() out=wheels
if [ "${1:-}" = "--release" ]; then
  profile=(--release) out=wheels-release
  shift
fi
venv="$1"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(scripts/cache-dir.sh)/target}"
tools="$(scripts/python-env.sh)"
zig_dir="$("$tools/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')"

# libjpeg's public headers, as the system compiler finds them, and its library's folder.
include="$CARGO_TARGET_DIR/wheel-include"
rm -rf "$include" && mkdir -p "$include"
printf '#include <stdio.h>\n#include <jpeglib.h>\n#include <jerror.h>\n' |
  cc -M -x c - | tr ' \\' '\n\n' | grep -E '/j(peglib|config|morecfg|error)\.h$' |
  xargs -I{} cp {} "$include/"
[ -f "$include/jpeglib.h" ] && [ -f "$include/jconfig.h" ] || {
  echo "wheel: libjpeg-turbo's headers not found; run scripts/system-deps.sh" >&2
  exit 1
}
libjpeg="$(cc -print-file-name=libjpeg.so)"
[ -f "$libjpeg" ] || { echo "wheel: libjpeg.so not found; run scripts/system-deps.sh" >&2; exit 1; }

# The command, built and stripped before maturin packs the folder it lies in. It builds in a
# folder of its own: cargo-zigbuild and maturin --zig point the target's C compiler and linker
# variables at different wrapper scripts, so in one folder every build script that reads them
# reran, and the crates after it rebuilt, each time the other had built (the whole dependency
# tree, twice per wheel); apart, each build finds its own crates fresh.
cli_target="$CARGO_TARGET_DIR/wheel-cli"
CARGO_TARGET_DIR="$cli_target" PATH="$PATH:$tools/bin:$zig_dir" cargo zigbuild --locked \
  "${profile[@]}" -p hetgen --no-default-features --bin hetgen \
  --target x86_64-unknown-linux-gnu.2.17 >&2
scripts="python/hetgen.data/scripts"
rm -rf python/hetgen.data && mkdir -p "$scripts"
kind=debug
[ ${#profile[@]} -eq 0 ] || kind=release
strip -o "$scripts/hetgen" "$cli_target/x86_64-unknown-linux-gnu/$kind/hetgen"

rm -rf "${CARGO_TARGET_DIR:?}/$out"
# maturin hard-links cargo's module into target/maturin/ and its repair rewrites that file in
# place (patchelf), which rewrites cargo's own copy too: a later build that cargo finds fresh
# would then repair an already repaired module and fail. Removing both makes cargo link anew.
rm -f "$CARGO_TARGET_DIR/maturin/lib_native.so" \
  "$CARGO_TARGET_DIR"/x86_64-unknown-linux-gnu/{debug,release}/deps/lib_native.so
# LIBJPEG_NO_PKG_CONFIG: pkg-config would add -I/usr/include, whose glibc headers are not the
# ones zig links against.
PATH="$PATH:$tools/bin:$zig_dir" LIBJPEG_NO_PKG_CONFIG=1 \
  CFLAGS_x86_64_unknown_linux_gnu="-I$include" \
  RUSTFLAGS="${RUSTFLAGS:-} -L native=$(dirname "$libjpeg")" \
  maturin build --locked "${profile[@]}" --strip --zig --compatibility manylinux_2_17 \
  --manifest-path python/Cargo.toml -i "$venv/bin/python" -o "$CARGO_TARGET_DIR/$out" >&2
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$CARGO_TARGET_DIR/$out"/hetgen-*.whl >&2
