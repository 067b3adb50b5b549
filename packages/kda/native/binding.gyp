{
  "targets": [
    {
      "target_name": "k3_kda",
      "sources": [
        "src/addon.cc",
        "src/api.c",
        "src/kda_simd.c",
        "src/kda_simd_scalar.c",
        "src/kda_simd_avx2.c",
        "src/kda_simd_avx512.c",
        "src/short_conv.c",
        "src/kda_gate.c",
        "src/state_bf16.c",
        "src/kda_recurrent.c",
        "src/kda_chunked.c"
      ],
      "include_dirs": [
        "include",
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/native/package.json')), 'include')\")",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags_c": ["-std=gnu11", "-O3", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra"],
      "cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=off"],
      "libraries": ["-lpthread", "-lm"]
    }
  ]
}
