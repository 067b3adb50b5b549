{
  "includes": ["../../native/gyp/common.gypi"],
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
        "src"
      ]
    }
  ]
}
