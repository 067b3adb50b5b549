{
  "includes": ["../../native/gyp/common.gypi"],
  "targets": [
    {
      "target_name": "k3_safetensors",
      "sources": [
        "src/addon.cc",
        "src/st_error.c",
        "src/st_alloc.c",
        "src/st_arena.c",
        "src/st_dtype.c",
        "src/st_utf8.c",
        "src/st_json.c",
        "src/st_bytescan.c",
        "src/st_bytescan_avx2.c",
        "src/st_bytescan_avx512.c",
        "src/st_classify.c",
        "src/st_hash.c",
        "src/st_scan.c",
        "src/st_validate.c",
        "src/st_index_json.c",
        "src/st_checkpoint.c"
      ],
      "include_dirs": [
        "include",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/dense/package.json')), 'native', 'include')\")"
      ]
    }
  ]
}
