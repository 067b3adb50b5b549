{
  "includes": ["../../native/gyp/common.gypi"],
  "targets": [
    {
      "target_name": "k3_mxfp4",
      "sources": [
        "src/addon.cc",
        "src/api.c",
        "src/scale.c",
        "src/quantize.c",
        "src/matmul.c",
        "src/matmul_scalar.c",
        "src/matmul_avx2.c",
        "src/matvec_avx2.c",
        "src/matmul_avx512.c",
        "src/matmul_prefill_avx512.c",
        "src/matmul_prefill_avx2.c",
        "src/matmul_int8.c",
        "src/matmul_int8_vnni.c",
        "src/matmul_int8_avx2.c"
      ],
      "include_dirs": [
        "include",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")"
      ]
    }
  ]
}
