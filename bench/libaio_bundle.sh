#!/usr/bin/env bash
# libaio for a GPU host that lacks it (DeepSpeed's async_io op, which NVMe offload needs, links -laio): fetch
# Debian's libaio1 and libaio-dev into ./.aio of the repository (ignored by git; carry it to the device with .whl),
# on a machine that reaches the Debian archive. On the GPU host, before anything builds or loads the op:
#   source bench/libaio_env.sh
# which points the compiler (CPATH, LIBRARY_PATH), DeepSpeed's compatibility check (CFLAGS, LDFLAGS: the test
# program AsyncIOBuilder.is_compatible compiles, ops/op_builder/async_io.py in DeepSpeed 0.19.8) and the loader
# (LD_LIBRARY_PATH) at it.
set -euo pipefail
out=.aio
rm -rf "$out" && mkdir -p "$out/debs"
grep -qx '/.aio/' .git/info/exclude 2>/dev/null || echo '/.aio/' >> .git/info/exclude
# Debian 12 names the library's package libaio1; Debian 13 and Ubuntu 24.04 libaio1t64 (libaio.so.1t64)
(cd "$out/debs" && { apt-get download libaio1 libaio-dev || apt-get download libaio1t64 libaio-dev; })
for deb in "$out"/debs/*.deb; do dpkg-deb -x "$deb" "$out/root"; done
mkdir -p "$out/include" "$out/lib"
cp "$out"/root/usr/include/libaio.h "$out/include/"
lib=$(find "$out/root" -name 'libaio.so.1*' -type f | head -1)
[ -n "$lib" ] || { echo "error: no libaio.so.1* in the downloaded packages" >&2; exit 1; }
# files, not links (the carry keeps files), under each name the linker and the loader look for (the t64 build's
# SONAME is libaio.so.1t64)
for name in libaio.so libaio.so.1 libaio.so.1t64; do cp "$lib" "$out/lib/$name"; done
rm -rf "$out/root" "$out/debs"
ls -l "$out/include" "$out/lib"
