// Every input the libFuzzer targets (native/fuzz, run by the root `pnpm fuzz`) ever flagged,
// replayed through the same harnesses built with gcc's AddressSanitizer + UBSan (no libFuzzer
// needed): any undefined behaviour, leak or cross-SIMD-level disagreement aborts the driver.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
// @ts-expect-error: plain ESM module without types (shared with scripts/fuzz.mjs)
import { targets } from "../native/fuzz/targets.mjs";

const native = join(import.meta.dirname, "..", "native");
const out = mkdtempSync(join(tmpdir(), "st-sanitizers-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));
const hasGcc = spawnSync("gcc", ["--version"]).status === 0;

type Target = { name: string; harness: string; sources: string[]; simd: Record<string, string[]>; include: string[]; regressions: string; libs: string[] };

describe.skipIf(!hasGcc)("fuzz findings replayed under ASan + UBSan", () => {
  for (const t of targets as Target[]) {
    it(`${t.name}: every file of native/${t.regressions}`, () => {
      const exe = join(out, t.name);
      execFileSync("gcc", [
        "-std=gnu11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
        ...t.include.map((d) => `-I${join(native, d)}`),
        join(native, "fuzz", "replay.c"), join(native, t.harness),
        ...[...t.sources, ...Object.keys(t.simd)].map((s) => join(native, s)),
        ...t.libs, "-o", exe,
      ]);
      const dir = join(native, t.regressions);
      const inputs = readdirSync(dir).sort().map((f) => join(dir, f));
      expect(inputs.length).toBeGreaterThan(0);
      const r = spawnSync(exe, inputs, { encoding: "utf8", env: { ...process.env, ASAN_OPTIONS: "detect_leaks=1", UBSAN_OPTIONS: "print_stacktrace=1" } });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      expect(r.stdout.trim().split("\n")).toHaveLength(inputs.length);
    });
  }
});
