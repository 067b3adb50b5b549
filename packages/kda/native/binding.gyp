{
  "includes": ["../../native/gyp/common.gypi"],
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
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")"
      ]
    }
  ]
}
