#!/bin/sh
# Builds an addon's C kernels (<native dir>/src/*.c) and its driver (<native dir>/test/*.c) with
# AddressSanitizer + UBSan against the stand-in dense table of fake_dense.c (with @k3/dense's real
# gemm_acc and dot_rows sources), and runs the driver
# (at scalar, AVX2 and AVX-512 over odd shapes: needs gcc and an AVX-512 CPU).
#   sh ../test-utils/native/asan.sh native      (from packages/kda or packages/mla)
set -e
here=$(cd "${1:?usage: asan.sh <native dir>}" && pwd)
utils=$(cd "$(dirname "$0")" && pwd)
dense=$(node -p "require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')")
dense_src="$dense/../src"
out=$(mktemp -d)
gcc -std=gnu11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -ffp-contract=off \
  -I"$dense" -I"$dense_src" -I"$here/include" -I"$here/src" "$here"/test/*.c "$utils/fake_dense.c" \
  "$dense_src"/gemm_acc_scalar.c "$dense_src"/gemm_acc_avx2.c "$dense_src"/gemm_acc_avx512.c \
  "$dense_src"/gemm_rows.c "$dense_src"/gemm_scalar.c "$dense_src"/gemm_avx2.c "$dense_src"/gemm_avx512.c \
  $(ls "$here"/src/*.c) -lm -o "$out/asan_driver"
"$out/asan_driver"
rm -rf "$out"
