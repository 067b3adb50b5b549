// Runs ggml's own MUL_MAT beside a k3 bench row, when the user points K3_GGML_BIN at a ggml
// `test-backend-ops` binary THEY built (the project never downloads, builds or commits ggml).
// Shapes go in through the tool's `--test-file` mechanism (one generic-op line per case, in the
// format that ggml's tests/test-backend-ops.cpp parses), timed with `perf -b CPU` (its text us/run line). Shared by the benches of
// @k3/dense (bf16/f32) and @k3/mxfp4. Plain JS, no dependencies.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** ggml_type ids and (block size, bytes per block) of the weight types the benches use. */
export const GGML_TYPES = {
  f32: { id: 0, block: 1, bytes: 4 },
  f16: { id: 1, block: 1, bytes: 2 },
  q4_0: { id: 2, block: 32, bytes: 18 },
  q8_0: { id: 8, block: 32, bytes: 34 },
  bf16: { id: 30, block: 1, bytes: 2 },
  mxfp4: { id: 39, block: 32, bytes: 17 },
};

const GGML_OP_MUL_MAT = 29;

/** The binary named by K3_GGML_BIN, or null (then the bench prints its own rows alone and says so). */
export function ggmlBin(env = process.env) {
  const bin = env.K3_GGML_BIN;
  return bin && bin.length > 0 ? bin : null;
}

/**
 * One `--test-file` line: Y[m, n] = W[m, k] (type) x X[k, n] (f32), with `experts` copies of W
 * (ne2 > 1 is a batched MUL_MAT over distinct matrices: a working set that streams from DRAM).
 */
export function mulMatLine({ type, m, k, n, experts = 1, name }) {
  const t = GGML_TYPES[type];
  if (!t) throw new Error(`ggml-runner: unknown weight type '${type}' (known: ${Object.keys(GGML_TYPES).join(", ")})`);
  for (const [key, v] of Object.entries({ m, k, n, experts }))
    if (!Number.isInteger(v) || v < 1) throw new Error(`ggml-runner: ${key} must be a positive integer, got ${v}`);
  if (k % t.block !== 0) throw new Error(`ggml-runner: k = ${k} is not a multiple of ${type}'s block of ${t.block}`);
  const row = (k / t.block) * t.bytes;
  const w = [t.id, k, m, experts, 1, t.bytes, row, row * m, row * m * experts];
  const x = [GGML_TYPES.f32.id, k, n, experts, 1, 4, 4 * k, 4 * k * n, 4 * k * n * experts];
  const label = name ?? `k3_${type}_m${m}_k${k}_n${n}_E${experts}`;
  return [GGML_OP_MUL_MAT, GGML_TYPES.f32.id, m, n, experts, 1, 0, 2, ...w, ...x, label].join(" ");
}

/** Parses test-backend-ops `--output csv` (header line + rows; the tool prints other lines too). */
export function parsePerfCsv(text) {
  const lines = text.split("\n").filter((l) => l.length > 0);
  const head = lines.findIndex((l) => l.startsWith("test_time,") || l.includes(",time_us,"));
  if (head < 0) return [];
  const split = (l) => {
    const out = [];
    let cur = "", q = false;
    for (const ch of l) {
      if (ch === '"') q = !q;
      else if (ch === "," && !q) { out.push(cur); cur = ""; }
      else cur += ch;
    }
    out.push(cur);
    return out;
  };
  const keys = split(lines[head]);
  return lines.slice(head + 1).map(split).filter((v) => v.length === keys.length).map((v) => Object.fromEntries(keys.map((k, i) => [k, v[i]])));
}

/**
 * Times one MUL_MAT case with ggml (2 threads = the tool's hardware_concurrency; `cpus` pins the
 * process with taskset, e.g. "0" for one core; `threads` caps its OpenMP threads with
 * OMP_THREAD_LIMIT, e.g. 1: the tool asks for hardware_concurrency threads and ggml runs with the
 * team OpenMP grants). Returns { us, gflops, gbPerSec } from the tool's us/run (its own best-effort
 * repeat count), or throws with the tool's output.
 */
export function runGgmlMulMat(bin, testCase, { cpus, threads, timeoutMs = 120_000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "k3-ggml-"));
  try {
    const file = join(dir, "cases.txt");
    writeFileSync(file, mulMatLine(testCase) + "\n");
    // Text output: with --test-file cases this build's `--output csv` prints no time column, the text
    // line "MUL_MAT(...): N runs - T us/run - ..." always has it.
    const args = ["perf", "-b", "CPU", "--test-file", file];
    const [cmd, argv] = cpus === undefined ? [bin, args] : ["taskset", ["-c", String(cpus), bin, ...args]];
    let out;
    try {
      const env = threads === undefined ? process.env : { ...process.env, OMP_THREAD_LIMIT: String(threads) };
      out = execFileSync(cmd, argv, { encoding: "utf8", timeout: timeoutMs, env, stdio: ["ignore", "pipe", "pipe"] });
    } catch (e) {
      throw new Error(`ggml-runner: ${cmd} failed: ${e.message}\n${e.stdout ?? ""}${e.stderr ?? ""}`);
    }
    const hit = /MUL_MAT\(.*\):\s+\d+ runs\s+-\s+([\d.]+) us\/run/.exec(out);
    if (!hit) throw new Error(`ggml-runner: no "us/run" line in the output of ${bin}:\n${out}`);
    const us = Number(hit[1]);
    const { m, k, n, experts = 1 } = testCase;
    const t = GGML_TYPES[testCase.type];
    return { us, gflops: (2 * m * k * n * experts) / us / 1e3, gbPerSec: ((m * k) / t.block * t.bytes * experts) / us / 1e3 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** "ggml not run" note for a report, or the binary's description when it was. */
export function ggmlNote(bin) {
  return bin
    ? `ggml: ${bin} (test-backend-ops perf -b CPU --test-file, MUL_MAT generic-op lines; 2 threads = its hardware_concurrency, 1 thread = OMP_THREAD_LIMIT=1; it repeats one op on one weight tensor, so weights that fit the L3 are L3-hot for ggml unless E > 1)`
    : "ggml was not run (set K3_GGML_BIN to a test-backend-ops binary you built from ggml-org/ggml to add ggml's MUL_MAT for the same shapes, interleaved row by row).";
}
