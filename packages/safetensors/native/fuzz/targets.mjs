// The libFuzzer targets of @k3/safetensors (paths relative to native/): used by the root
// `pnpm fuzz` (scripts/fuzz.mjs, clang + libFuzzer) and by test/sanitizers.test.ts (gcc, replay).
const common = [
  "src/st_error.c", "src/st_alloc.c", "src/st_arena.c", "src/st_dtype.c", "src/st_utf8.c", "src/st_json.c",
  "src/st_bytescan.c", "src/st_classify.c", "src/st_hash.c", "src/st_scan.c", "src/st_validate.c", "src/st_index_json.c",
];
// clang ignores `#pragma GCC target`: these files get their ISA flags on the command line.
const simd = {
  "src/st_bytescan_avx2.c": ["-mavx2"],
  "src/st_bytescan_avx512.c": ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"],
};
export const targets = [
  { name: "safetensors-header", harness: "fuzz/fuzz_header.c", sources: common, simd, include: ["include", "src"], regressions: "fuzz/regressions/header", libs: ["-lpthread"] },
  { name: "safetensors-index", harness: "fuzz/fuzz_index.c", sources: common, simd, include: ["include", "src"], regressions: "fuzz/regressions/index", libs: ["-lpthread"] },
];
