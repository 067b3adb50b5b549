// The libFuzzer target of @k3/tiktoken-bpe (paths relative to native/): used by the root
// `pnpm fuzz` (scripts/fuzz.mjs, clang + libFuzzer).
export const targets = [
  {
    name: "tiktoken-rank-file",
    harness: "fuzz/fuzz_rank_file.c",
    sources: ["src/encoder.c", "src/decode.c", "src/pretokenize.c", "src/rank_table.c", "src/rank_file.c", "src/piece_cache.c", "src/bpe.c", "src/char_start.c", "src/unicode_tables.c"],
    simd: {},
    include: ["src"],
    regressions: "fuzz/regressions/rank-file",
    libs: [],
  },
];
