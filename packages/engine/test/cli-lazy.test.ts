/**
 * `k3 --help`, `k3 <command> --help` for every command and `k3 download` load no native addon:
 * each command's module is imported only when it runs and imports the engine inside `run`. A child
 * process records every addon through process.dlopen (the one way a .node file loads); `k3
 * --version`, which reads the SIMD level from @k3/dense, shows the recorder sees one.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { COMMANDS } from "../src/cli/commands.js";

const dir = mkdtempSync(join(tmpdir(), "k3-lazy-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs each argv through main() in one child; returns the addons each loaded, by argv. */
function addonsLoaded(argvs: string[][]): Promise<{ argv: string[]; code: number; addons: string[] }[]> {
  const script = join(dir, "probe.mts");
  const result = join(dir, "probe.json");
  writeFileSync(
    script,
    `const loaded: string[] = [];
const dlopen = process.dlopen;
process.dlopen = function (module: { exports: unknown }, file: string, ...rest: unknown[]) {
  loaded.push(file);
  return (dlopen as (...a: unknown[]) => unknown).call(process, module, file, ...rest);
} as typeof process.dlopen;
process.stdout.write = (() => true) as typeof process.stdout.write;
process.stderr.write = (() => true) as typeof process.stderr.write;
const { main } = await import(${JSON.stringify(join(__dirname, "..", "src", "cli.ts"))});
const out = [];
for (const argv of ${JSON.stringify(argvs)}) {
  const before = loaded.length;
  const code = await main(argv);
  out.push({ argv, code, addons: loaded.slice(before) });
}
(await import("node:fs")).writeFileSync(${JSON.stringify(result)}, JSON.stringify(out));
`,
  );
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ["--import", "tsx", script], { cwd: join(__dirname, "..") }, (err, _stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`));
      resolve(JSON.parse(readFileSync(result, "utf8")));
    });
  });
}

describe("k3 loads native addons only for the commands that compute", () => {
  it("--help, every <command> --help and download load none; --version loads @k3/dense's", async () => {
    const argvs = [
      ["--help"],
      ...COMMANDS.map((c) => [c.name, "--help"]),
      // A download that reaches the network code (and fails there: nothing listens on port 1).
      ["download", "owner/name", "--dir", join(dir, "dl"), "--endpoint", "http://127.0.0.1:1"],
      ["--version"],
    ];
    const runs = await addonsLoaded(argvs);
    const version = runs.pop()!;
    for (const r of runs) expect({ argv: r.argv.join(" "), addons: r.addons }).toEqual({ argv: r.argv.join(" "), addons: [] });
    expect(runs.map((r) => r.code)).toEqual([...Array(argvs.length - 2).fill(0), 5]);
    expect(version.code).toBe(0);
    expect(version.addons.some((f) => /dense/.test(f) && f.endsWith(".node"))).toBe(true);
  }, 60_000);
});
