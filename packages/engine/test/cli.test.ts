/** The `k3` CLI end to end (spawned through tsx on the sources): help, exit codes, run + JSON report. */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, cpSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TINY_K3, TRAINED_K3, captureCli } from "./helpers.js";

const CLI = join(__dirname, "..", "src", "cli.ts");
const dir = mkdtempSync(join(tmpdir(), "k3-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const trained = JSON.parse(readFileSync(join(TRAINED_K3, "expected.json"), "utf8"));

function k3(args: string[], env: Record<string, string> = {}, input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, ["--import", "tsx", CLI, ...args], { env: { ...process.env, K3_THREADS: "1", ...env }, cwd: join(__dirname, "..") }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
    if (input !== undefined) child.stdin!.end(input);
  });
}

describe("k3 CLI", () => {
  it("prints help and presets with exit 0 (in process)", async () => {
    const out = captureCli;
    const h = await out(["--help"]);
    expect(h.code).toBe(0);
    expect(h.stdout).toMatch(/exit codes: 0 ok/);
    expect((await out(["run", "--help"])).stdout).toMatch(/--prompt-file PATH/);
    expect((await out(["serve", "--help"])).stdout).toMatch(/429/);
    expect((await out(["--list-presets"])).stdout).toMatch(/ultra\s+2.5\s+0.31/);
  });

  it("exits 2 on usage errors, naming the problem (in process)", async () => {
    const { main } = await import("../src/cli.js");
    const run = async (args: string[]) => {
      let stderr = "";
      const orig = process.stderr.write.bind(process.stderr);
      process.stderr.write = ((chunk: string | Uint8Array) => ((stderr += String(chunk)), true)) as typeof process.stderr.write;
      try {
        return { code: await main(args), stderr };
      } finally {
        process.stderr.write = orig;
      }
    };
    expect((await run(["frobnicate"])).code).toBe(2);
    const two = await run(["run", "--prompt", "a", "--ids", "1,2"]);
    expect(two.code).toBe(2);
    expect(two.stderr).toMatch(/exactly one of --prompt, --prompt-file, --ids/);
    const pen = await run(["run", "--presence-penalty", "2.5", "--quiet"]);
    expect(pen.code).toBe(2);
    expect(pen.stderr).toMatch(/presence_penalty = 2.5: expected a number in \[-2, 2\]/);
    expect((await run(["run", "--frequency-penalty", "x", "--quiet"])).stderr).toMatch(/--frequency-penalty x/);
    const bad = await run(["run", "--temperature", "hot"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--temperature hot/);
    const ids = await run(["run", "--ids", "1,99999", "--quiet"]);
    expect(ids.code).toBe(2);
    expect(ids.stderr).toMatch(/99999/);
    expect((await run(["run", "--effort", "medium"])).code).toBe(2);
    expect((await run(["run", "--bogus"])).code).toBe(2);
    expect((await run(["serve", "--port", "99999"])).code).toBe(2);
    const piece = await run(["run", "--piece-mb", "1.5", "--quiet"]);
    expect(piece.code).toBe(2);
    expect(piece.stderr).toMatch(/--piece-mb 1.5: expected an integer number of MiB/);
    expect((await run(["run", "--no-prefetch=yes"])).code).toBe(2);
  });

  it("exits 3 (config) on a bad config, listing every problem", async () => {
    const model = join(dir, "bad-model");
    cpSync(TINY_K3, model, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(model, "config.json"), "utf8"));
    cfg.text_config.num_experts_per_token = 99;
    delete cfg.text_config.hidden_size;
    writeFileSync(join(model, "config.json"), JSON.stringify(cfg));
    const r = await k3(["run", "--model", model, "--prompt", "hi"]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/hidden_size is missing/);
    expect(r.stderr).toMatch(/num_experts_per_token = 99 exceeds num_experts = 16/);
  });

  it("exits 1 with both numbers when the plan cannot fit", async () => {
    // A config with the real K3 dimensions: the plan is made (and refused) before any weight is read.
    const model = join(dir, "k3-sized");
    cpSync(TINY_K3, model, { recursive: true });
    const cfg = JSON.parse(readFileSync(join(model, "config.json"), "utf8"));
    Object.assign(cfg.text_config, { hidden_size: 7168, num_experts: 896, num_experts_per_token: 16, moe_intermediate_size: 3072, routed_expert_hidden_size: 3584, intermediate_size: 33792 });
    writeFileSync(join(model, "config.json"), JSON.stringify(cfg));
    const r = await k3(["run", "--model", model, "--preset", "max", "--prompt", "hi"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/memory plan needs .* GB but only .* GB is usable/);
  });

  it("runs the embedded trained model on its default prompt, raw, says what it is, and writes the JSON report", async () => {
    const json = join(dir, "report.json");
    const r = await k3(["run", "--max-tokens", "20", "--json", json]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/embedded tiny K3: [\s\S]* trained for 34 minutes on The Rust Programming Language book/);
    expect(r.stderr).toMatch(/memory plan/);
    expect(r.stderr).toMatch(/run report:/);
    const report = JSON.parse(readFileSync(json, "utf8"));
    // The reference's greedy raw continuation of the default prompt (reference/trained_fixture.py).
    expect(report.prompt_ids).toEqual(trained.greedy.prompt_ids);
    expect(trained.greedy.ids.slice(0, 20).every((id: number) => id < 3840)).toBe(true); // no stop id among them
    expect(report.generated_ids).toEqual(trained.greedy.ids.slice(0, 20));
    expect(r.stdout.startsWith(trained.greedy.prompt + trained.greedy.text.slice(0, 40))).toBe(true);
    expect(report.peak_rss_bytes).toBeGreaterThan(0);
    expect(report.prefill_tokens_per_second).toBeGreaterThan(0);
    // Lookahead prefetch and 4 MiB pieces are on by default and reported.
    expect(r.stderr).toMatch(/lookahead prefetch: accuracy \d+\.\d%/);
    expect(report.prefetch).toBe(true);
    expect(report.piece_bytes).toBe(4 << 20);
    expect(report.prefetch_accuracy).toBeGreaterThan(0);
    expect(report.prefetch_accuracy).toBeLessThanOrEqual(1);
    expect(report.prefetch_used).toBeLessThanOrEqual(report.prefetch_predicted);
    expect(typeof report.prefetch_hit_rate).toBe("number");
  });

  it("chat REPL: piped turns, /save, /reset, /load (a reply cut by --max-tokens makes turn two re-prefill)", async () => {
    const file = join(dir, "repl.k3st");
    const r = await k3(["chat", "--max-tokens", "4"], {}, `hello\n/save ${file}\nagain\n/reset\n/load ${file}\n/exit\n`);
    expect(r.code).toBe(0);
    const prefills = [...r.stdout.matchAll(/\[(\d+) new prompt tokens/g)].map((m) => Number(m[1]));
    expect(prefills.length).toBe(2);
    // Turn one was cut by --max-tokens 4, so turn two re-prefills the whole (closed) transcript.
    expect(prefills[1]).toBeGreaterThan(prefills[0]);
    expect(r.stdout).toMatch(/\(saved to .*repl.k3st\)/);
    expect(r.stdout).toMatch(/\(conversation reset\)/);
    expect(r.stdout).toMatch(/\(loaded 2 messages\)/);
  });

  it("k3 pack, then k3 run --trunk streams the packed trunk with the same output (in process)", async () => {
    const out = join(dir, "trunk");
    const quiet = captureCli;
    expect((await quiet(["pack", "--model", TINY_K3, "--out", out])).code).toBe(0);
    const resident = join(dir, "resident.json");
    const streamed = join(dir, "streamed.json");
    expect((await quiet(["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "8", "--json", resident, "--threads", "1"])).code).toBe(0);
    expect((await quiet(["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "8", "--json", streamed, "--trunk", out, "--trunk-gb", "0.0012", "--threads", "1"])).code).toBe(0);
    const a = JSON.parse(readFileSync(resident, "utf8"));
    const b = JSON.parse(readFileSync(streamed, "utf8"));
    expect(b.generated_ids).toEqual(a.generated_ids);
    expect(a.bytes_read.trunk).toBe(0);
    expect(b.bytes_read.trunk).toBeGreaterThan(0);
    // --no-prefetch --piece-mb 0: the same tokens, and the report says what was off.
    const plain = join(dir, "plain.json");
    expect((await quiet(["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "8", "--json", plain, "--no-prefetch", "--piece-mb", "0", "--threads", "1"])).code).toBe(0);
    const c = JSON.parse(readFileSync(plain, "utf8"));
    expect(c.generated_ids).toEqual(a.generated_ids);
    expect([c.prefetch, c.piece_bytes, c.prefetch_predicted, c.prefetch_hit_rate]).toEqual([false, 0, 0, 0]);
    expect([a.prefetch, a.piece_bytes]).toEqual([true, 4 << 20]);
    // The store's read engine is reported (io_uring here unless the kernel or seccomp blocks it).
    expect(["io_uring", "io_uring+sqpoll", "pread"]).toContain(a.io_engine);
    if (a.io_engine === "pread") expect(a.io_engine_note).toBeTruthy();
  });
});
