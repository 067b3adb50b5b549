# Build settings shared by every k3 native addon. Each package's native/binding.gyp includes this
# file as "../../native/gyp/common.gypi": in the repo that is packages/native/gyp, in an npm or
# pnpm install it is the sibling node_modules/@k3/native/gyp (every native package depends on
# @k3/native). Only the target name, the sources and the package's own include dirs stay in
# binding.gyp, so the flags below cannot drift apart between packages.
#
# Why these flags (docs/invariants.md):
#   -ffp-contract=off   no fused multiply-add unless a kernel asks for it with an intrinsic: the
#                       scalar, AVX2 and AVX-512 paths round the same way, so their outputs are
#                       bit-identical (the expectBitIdentical tests of every package check it).
#   -fno-math-errno     sqrtf/expf need not set errno, so they compile to one instruction; the value
#                       is the same, only the errno side effect goes.
#   -O3                 the same optimisation level for every addon (no -ffast-math: it would
#                       reassociate sums and break bit-identity).
#   NAPI_DISABLE_CPP_EXCEPTIONS   the glue reports errors through k3_napi.h, never C++ throw.
#   NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS   a node-addon-api call made while a worker thread is
#                       being terminated must not turn its failed throw into a fatal error.
{
  "target_defaults": {
    "include_dirs": [
      "<!(node -p \"require('node-addon-api').include_dir\")",
      "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/native/package.json')), 'include')\")"
    ],
    "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
    "cflags_c": ["-std=gnu11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra"],
    "cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=off"],
    "libraries": ["-lpthread", "-lm"]
  }
}
