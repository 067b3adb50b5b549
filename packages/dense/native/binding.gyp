{
  "includes": ["../../native/gyp/common.gypi"],
  "targets": [
    {
      "target_name": "k3_dense",
      "sources": [
        "src/addon.cc",
        "src/api.c",
        "src/cpu.c",
        "src/pool.c",
        "src/gemv_bf16.c",
        "src/gemv_trace.c",
        "src/gemv_bf16_scalar.c",
        "src/gemv_bf16_avx2.c",
        "src/gemv_bf16_avx512.c",
        "src/gemm.c",
        "src/gemm_scalar.c",
        "src/gemm_avx2.c",
        "src/gemm_avx512.c",
        "src/gemm_rows.c",
        "src/gemm_blocked_avx512.c",
        "src/gemm_blocked_avx2.c",
        "src/gemm_rounded.c",
        "src/gemm_rounded_avx512bf16.c",
        "src/gemm_acc.c",
        "src/gemm_acc_scalar.c",
        "src/gemm_acc_avx2.c",
        "src/gemm_acc_avx512.c",
        "src/ops_norm.c",
        "src/ops_mix.c",
        "src/ops_activation.c",
        "src/ops_activation_avx2.c",
        "src/ops_topk.c",
        "src/memread.c",
        "src/memread_avx2.c",
        "src/memread_avx512.c"
      ],
      "include_dirs": [
        "include",
      ]
    }
  ]
}
