{
  "targets": [
    {
      "target_name": "k3_tiktoken_bpe",
      "sources": [
        "src/addon.cc",
        "src/encoder.c",
        "src/decode.c",
        "src/pretokenize.c",
        "src/rank_table.c",
        "src/rank_file.c",
        "src/piece_cache.c",
        "src/bpe.c",
        "src/char_start.c",
        "src/unicode_tables.c"
      ],
      "include_dirs": [
        "src",
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<!(node -p \"require('path').join(require('path').dirname(require.resolve('@k3/native/package.json')), 'include')\")"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags_c": ["-std=gnu11", "-O3", "-fno-math-errno", "-Wall", "-Wextra"],
      "cflags_cc": ["-std=c++17", "-O3"]
    }
  ]
}
