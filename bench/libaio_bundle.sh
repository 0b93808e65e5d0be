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
(cd "$out/debs" && apt-get download libaio1 libaio-dev 2>/dev/null)
for deb in "$out"/debs/*.deb; do dpkg-deb -x "$deb" "$out/root"; done
mkdir -p "$out/include" "$out/lib"
cp "$out"/root/usr/include/libaio.h "$out/include/"
cp -L "$out"/root/usr/lib/x86_64-linux-gnu/libaio.so.1 "$out"/root/usr/lib/x86_64-linux-gnu/libaio.so "$out/lib/"  # files, not links: the carry keeps files
rm -rf "$out/root" "$out/debs"
ls -l "$out/include" "$out/lib"
