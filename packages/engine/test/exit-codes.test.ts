/**
 * Every CLI path, and an Engine that is never closed, in a CHILD process: each must exit 0 (a
 * native destructor that aborts in Node's teardown shows up here as SIGABRT / exit 134, which an
 * in-process test cannot see). Runs on the tiny K3 fixture and on its packed trunk, streamed
 * through a 1-slot ring (ultra) and a 2-slot ring with read-ahead (laptop).
 */
import { execFile, spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TINY_K3 } from "./helpers.js";

const CLI = join(__dirname, "..", "src", "cli.ts");
const dir = mkdtempSync(join(tmpdir(), "k3-exit-"));
const trunk = join(dir, "trunk");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function node(args: string[], input?: string): Promise<Exit> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, ["--import", "tsx", ...args], { env: { ...process.env, K3_THREADS: "1" }, cwd: join(__dirname, ".."), maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      const e = err as (Error & { code?: number | string; signal?: NodeJS.Signals }) | null;
      resolve({ code: e ? (typeof e.code === "number" ? e.code : null) : 0, signal: e?.signal ?? null, stdout, stderr });
    });
    if (input !== undefined) child.stdin!.end(input);
  });
}
const k3 = (args: string[], input?: string) => node([CLI, ...args], input);

/** exit 0 and no signal, with the child's stderr tail in the failure message. */
function expectClean(r: Exit, what: string): void {
  const detail = `${what}: code ${r.code}, signal ${r.signal}\n${r.stderr.slice(-1500)}`;
  expect({ code: r.code, signal: r.signal }, detail).toEqual({ code: 0, signal: null });
}

const RUN = ["--model", TINY_K3, "--ids", "1,2,3", "--max-tokens", "3"];
// 0.001 GB of trunk budget: a few of the tiny model's layers pinned, the rest streamed.
const ONE_SLOT = ["--trunk", trunk, "--preset", "ultra", "--trunk-gb", "0.001"];
const TWO_SLOTS = ["--trunk", trunk, "--preset", "laptop", "--trunk-gb", "0.001"];

describe("exit codes in a child process", () => {
  beforeAll(async () => {
    expectClean(await k3(["pack", "--model", TINY_K3, "--out", trunk]), "k3 pack");
  }, 60_000);

  it("run --trunk on a corrupted trunk.bin (100 flipped bytes, or two same-size tensors swapped) exits 5 (io) naming the file, layer, tensor and offset (was: exit 0, other tokens)", async () => {
    const m = JSON.parse(readFileSync(join(trunk, "trunk.json"), "utf8"));
    const layers = m.groups.filter((g: { layer: number | null }) => g.layer !== null);
    for (const how of ["flip", "swap"] as const) {
      const bad = join(dir, `trunk-${how}`);
      cpSync(trunk, bad, { recursive: true });
      const file = join(bad, "trunk.bin");
      const bytes = readFileSync(file);
      for (const g of layers) {
        const ts = Object.values(g.tensors as Record<string, { offset: number; byteLength: number; crc32: number }>).sort((a, b) => b.byteLength - a.byteLength);
        if (how === "flip") {
          const at = g.offset + ts[0].offset;
          for (let i = 0; i < 100; i++) bytes[at + i] ^= 0xa5;
        } else {
          const pair = ts.find((a) => ts.some((b) => b !== a && b.byteLength === a.byteLength && b.crc32 !== a.crc32));
          if (!pair) continue;
          const other = ts.find((b) => b !== pair && b.byteLength === pair.byteLength && b.crc32 !== pair.crc32)!;
          const a = Buffer.from(bytes.subarray(g.offset + pair.offset, g.offset + pair.offset + pair.byteLength));
          bytes.copy(bytes, g.offset + pair.offset, g.offset + other.offset, g.offset + other.offset + other.byteLength);
          a.copy(bytes, g.offset + other.offset);
        }
      }
      writeFileSync(file, bytes);
      for (const slots of [ONE_SLOT, TWO_SLOTS]) {
        const r = await k3(["run", ...RUN, ...slots.map((x) => (x === trunk ? bad : x))]);
        expect({ code: r.code, signal: r.signal }, `${how}: ${r.stderr.slice(-1500)}`).toEqual({ code: 5, signal: null });
        expect(r.stderr).toContain(file);
        expect(r.stderr).toMatch(/checksum mismatch in \S+ \(layer \d+, offset \d+ \(\+\d+ bytes\)/);
      }
    }
  }, 120_000);

  it("run: resident, streamed through a 1-slot ring and through a 2-slot ring", async () => {
    expectClean(await k3(["run", ...RUN]), "run (resident)");
    const one = await k3(["run", ...RUN, ...ONE_SLOT]);
    expectClean(one, "run --trunk (1 ring slot)");
    expect(one.stderr).toMatch(/ring 1 x .*\(no prefetch\)/);
    const two = await k3(["run", ...RUN, ...TWO_SLOTS]);
    expectClean(two, "run --trunk (2 ring slots)");
    expect(two.stderr).toMatch(/ring 2 x .*\(async prefetch\)/);
  }, 120_000);

  it("chat with piped stdin, bench, doctor", async () => {
    const chat = await k3(["chat", "--model", TINY_K3, "--max-tokens", "2", ...TWO_SLOTS], "hello\n/reset\nagain\n");
    expectClean(chat, "chat --trunk (stdin ends)");
    expect(chat.stdout.match(/new prompt tokens/g)).toHaveLength(2);
    expectClean(await k3(["chat", "--model", TINY_K3, "--max-tokens", "2", ...ONE_SLOT], "hello\n/exit\n"), "chat --trunk (/exit)");
    expectClean(await k3(["bench", "--model", TINY_K3, "--prompt-tokens", "4", "--gen", "2", ...ONE_SLOT]), "bench --trunk");
    expectClean(await k3(["bench", "--model", TINY_K3, "--prompt-tokens", "4", "--gen", "2"]), "bench (resident)");
    expectClean(await k3(["doctor", "--model", TINY_K3, "--probe-mb", "1"]), "doctor");
  }, 120_000);

  for (const signal of ["SIGTERM", "SIGINT"] as const)
    it(`serve --trunk stops cleanly on ${signal}`, async () => {
      const child = spawn(process.execPath, ["--import", "tsx", CLI, "serve", "--model", TINY_K3, "--port", "0", ...TWO_SLOTS], { env: { ...process.env, K3_THREADS: "1" }, cwd: join(__dirname, "..") });
      let stderr = "";
      const url = await new Promise<string>((resolve, reject) => {
        child.stderr.on("data", (d) => {
          stderr += String(d);
          const m = /serving .* at (http:\/\/\S+)\/v1/.exec(stderr);
          if (m) resolve(m[1]);
        });
        child.on("exit", (code, sig) => reject(new Error(`serve exited early: ${code} ${sig}\n${stderr}`)));
      });
      const res = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "hi", max_tokens: 2 }) });
      expect(res.status).toBe(200);
      await res.json();
      const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on("exit", (code, sig) => resolve({ code, signal: sig })));
      child.kill(signal);
      expect(await exit, stderr.slice(-1500)).toEqual({ code: 0, signal: null });
    }, 60_000);

  it("an Engine with a streamed trunk that is never closed exits 0", async () => {
    const script = join(dir, "no-close.mts");
    writeFileSync(
      script,
      `import { Engine } from ${JSON.stringify(join(__dirname, "..", "src", "index.ts"))};
for (const ringSlots of [1, 2]) {
  const engine = await Engine.load(${JSON.stringify(TINY_K3)}, { trunkDir: ${JSON.stringify(trunk)}, preset: ringSlots === 1 ? "ultra" : "laptop", budgets: { trunkBytes: 1e6 }, threads: 1, log: () => {} });
  if (engine.plan.streamedLayers.length === 0) throw new Error("nothing streamed");
  const r = await engine.complete([1, 2, 3], { maxTokens: 3, temperature: 0 });
  console.log("ring", engine.plan.ringSlots, "generated", r.ids.length);
}
// no engine.close(): the stores (reader threads, io_uring, arenas) are left to process exit
`,
    );
    const r = await node([script]);
    expectClean(r, "Engine never closed");
    expect(r.stdout).toMatch(/ring 1 generated \d+\nring 2 generated \d+/);
  }, 60_000);
});
