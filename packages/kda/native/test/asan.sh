#!/bin/sh
# Builds this addon's C kernels with AddressSanitizer + UBSan against a stand-in dense table and
# runs them at scalar, AVX2 and AVX-512 over odd shapes (needs gcc and an AVX-512 CPU).
#   sh native/test/asan.sh
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
dense=$(node -p "require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')")
out=$(mktemp -d)
gcc -std=gnu11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -ffp-contract=off \
  -I"$dense" -I"$here/include" -I"$here/src" "$here"/test/*.c $(ls "$here"/src/*.c) -lm -o "$out/asan_driver"
"$out/asan_driver"
rm -rf "$out"
