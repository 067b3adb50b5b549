/**
 * vitest global setup: the run's tests (and the processes they spawn) see a fresh, empty TMPDIR;
 * at the end the run fails if anything is left in it, naming what. Every test removes what it
 * creates (`rmSync(dir, { recursive: true, force: true })` in an afterAll/finally), so a run never
 * leaves `k3-*` folders behind in the system temp directory.
 *
 * One entry is not a test's: tsx (which runs the CLI children of the engine's tests) keeps its
 * compile cache in TMPDIR/tsx-<euid>. It is a symlink to the usual cache in the outer temp dir, so
 * children share compiled modules across runs as before, and the check skips it.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";

export default function setup(): () => void {
  const outer = process.env.TMPDIR;
  const outerDir = tmpdir();
  const dir = mkdtempSync(join(outerDir, "k3-test-run-"));
  const tsxCache = `tsx-${process.geteuid ? process.geteuid() : userInfo().username}`;
  mkdirSync(join(outerDir, tsxCache), { recursive: true });
  symlinkSync(join(outerDir, tsxCache), join(dir, tsxCache));
  // os.tmpdir() reads TMPDIR on every call, and the forked workers inherit this environment.
  process.env.TMPDIR = dir;
  return () => {
    if (outer === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = outer;
    const left = readdirSync(dir).filter((name) => name !== tsxCache);
    rmSync(dir, { recursive: true, force: true });
    if (left.length > 0) {
      process.exitCode = 1;
      throw new Error(`tests left ${left.length} entr${left.length === 1 ? "y" : "ies"} in their temp directory: ${left.sort().join(", ")}`);
    }
  };
}
