/**
 * One case of each exit-code kind (usage 2, config 3, io 5, runtime 1; src/errors.ts EXIT_KINDS),
 * through the CLI in this process, and the I/O error names exitCodeOf knows without importing their
 * packages still being the classes those packages export.
 */
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { EXIT_KINDS, exitCodeOf, IO_ERROR_NAMES } from "../src/errors.js";
import { captureCli, TINY_K3 } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-exit-kinds-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A copy of tiny-k3 changed by `edit`. */
function copy(name: string, edit: (model: string) => void): string {
  const model = join(dir, name);
  cpSync(TINY_K3, model, { recursive: true });
  edit(model);
  return model;
}

function editConfig(model: string, change: (text: Record<string, unknown>) => void): void {
  const cfg = JSON.parse(readFileSync(join(model, "config.json"), "utf8"));
  change(cfg.text_config);
  writeFileSync(join(model, "config.json"), JSON.stringify(cfg));
}

describe("exit codes by kind", () => {
  it("the four kinds have four distinct codes, none of them 0 or 4 (a dropped expert)", () => {
    const codes = Object.values(EXIT_KINDS);
    expect(new Set(codes).size).toBe(4);
    expect(codes).not.toContain(0);
    expect(codes).not.toContain(4);
  });

  it("usage: an unknown flag exits 2 naming it", async () => {
    const r = await captureCli(["run", "--no-such-flag"]);
    expect(r.code).toBe(EXIT_KINDS.usage);
    expect(r.stderr).toMatch(/--no-such-flag/);
  });

  it("config: a config.json without hidden_size exits 3", async () => {
    const model = copy("no-hidden", (m) => editConfig(m, (t) => delete t.hidden_size));
    const r = await captureCli(["run", "--model", model, "--ids", "1", "--quiet"]);
    expect(r.code).toBe(EXIT_KINDS.config);
    expect(r.stderr).toMatch(/hidden_size is missing/);
  });

  it("io: a shard missing from disk exits 5 naming it", async () => {
    let shard = "";
    const model = copy("no-shard", (m) => {
      shard = readdirSync(m).filter((f) => /^model-\d+-of-\d+\.safetensors$/.test(f)).sort()[1];
      unlinkSync(join(m, shard));
    });
    const r = await captureCli(["run", "--model", model, "--ids", "1", "--quiet"]);
    expect(r.code).toBe(EXIT_KINDS.io);
    expect(r.stderr).toContain(shard);
  });

  it("runtime: a memory plan that cannot fit exits 1 with both numbers", async () => {
    // The real K3 widths: the plan is made (and refused) before any weight is read.
    const model = copy("k3-sized", (m) =>
      editConfig(m, (t) => Object.assign(t, { hidden_size: 7168, num_experts: 896, num_experts_per_token: 16, moe_intermediate_size: 3072, routed_expert_hidden_size: 3584, intermediate_size: 33792 })),
    );
    const r = await captureCli(["run", "--model", model, "--preset", "max", "--ids", "1", "--quiet"]);
    expect(r.code).toBe(EXIT_KINDS.runtime);
    expect(r.stderr).toMatch(/memory plan needs .* GB but only .* GB is usable/);
  });

  it("Node's system errors are io; other unknown errors are runtime", () => {
    const enoent = Object.assign(new Error("ENOENT: no such file"), { code: "ENOENT", syscall: "open" });
    expect(exitCodeOf(enoent)).toBe(EXIT_KINDS.io);
    expect(exitCodeOf(new TypeError("x is undefined"))).toBe(EXIT_KINDS.runtime);
    expect(exitCodeOf("a string")).toBe(EXIT_KINDS.runtime);
  });

  it("every I/O error name exitCodeOf knows is an error class its package exports under that name", async () => {
    for (const [name, pkg] of Object.entries(IO_ERROR_NAMES)) {
      const mod = (await import(pkg)) as Record<string, unknown>;
      const cls = mod[name] as (new (...args: never[]) => Error) | undefined;
      expect(typeof cls, `${pkg} exports ${name}`).toBe("function");
      expect(cls!.prototype instanceof Error, `${name} is an Error`).toBe(true);
    }
  });
});
