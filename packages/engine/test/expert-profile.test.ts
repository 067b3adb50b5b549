/** `--expert-profile FILE`: counts kept between runs seed the lfu cache and choose the warm; hostile files are refused. */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { EXPERT_PROFILE_FORMAT, hottestFirst, readExpertProfile, writeExpertProfile } from "../src/expert-profile.js";
import { UsageError } from "../src/errors.js";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-profile-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const k3 = captureCli;

// Two cache slots per MoE layer, filled before the run: what the profile changes is which two.
const RUN = ["run", "--model", TINY_K3, "--prompt", "fn main() {", "--max-tokens", "24", "--threads", "1", "--cache-gb", "0.0004", "--warm", "wait"];

async function run(name: string, extra: string[]) {
  const json = join(dir, `${name}.json`);
  const r = await k3([...RUN, "--json", json, ...extra]);
  expect(r.code, r.stderr).toBe(0);
  return { report: JSON.parse(readFileSync(json, "utf8")), stderr: r.stderr };
}

describe("expert profile", () => {
  it("a first run writes each layer's request counts; the next run seeds its cache with them and warms the most requested: more resident hits, the same tokens", async () => {
    const file = join(dir, "tiny.profile.json");
    const trace = join(dir, "trace");
    const first = await run("first", ["--expert-profile", file, "--dump-cache-trace", trace]);
    expect(first.stderr).toMatch(/does not exist yet; it is written at the end of this run/);
    expect(existsSync(`${file}.tmp`)).toBe(false);
    const profile = JSON.parse(readFileSync(file, "utf8"));
    expect(profile.format).toBe(EXPERT_PROFILE_FORMAT);
    // Fewer than 1,024 requests per layer: no halving yet, so the counts are the trace's histogram.
    const hist = JSON.parse(readFileSync(join(trace, "expert_hist.json"), "utf8")).histogram as Record<string, Record<string, number>>;
    for (const [layer, h] of Object.entries(hist))
      expect(Object.fromEntries(profile.layers[layer].map(([e, n]: [number, number]) => [String(e), n]))).toEqual(h);

    const second = await run("second", ["--expert-profile", file]);
    expect(second.stderr).toMatch(/seeds the expert cache and chooses what it warms/);
    expect(second.report.generated_ids).toEqual(first.report.generated_ids);
    expect(second.report.resident_hit_rate).toBeGreaterThan(first.report.resident_hit_rate);
    // The same requests again: every count doubled.
    const again = JSON.parse(readFileSync(file, "utf8"));
    for (const [layer, list] of Object.entries(profile.layers as Record<string, Array<[number, number]>>))
      expect(Object.fromEntries(again.layers[layer])).toEqual(Object.fromEntries(list.map(([e, n]) => [e, 2 * n])));

    const plain = await run("plain", []);
    expect(plain.report.generated_ids).toEqual(first.report.generated_ids);
    expect(plain.report.resident_hit_rate).toBe(first.report.resident_hit_rate);
  });

  it("refuses a profile that is not one, or of another checkpoint, naming the file and the field (exit 2 from the CLI)", async () => {
    const shape = { fingerprint: "abc", moeLayers: [1, 2], numExperts: 8 };
    const file = join(dir, "bad.json");
    const refuse = (text: string, message: RegExp) => {
      writeFileSync(file, text);
      expect(() => readExpertProfile(file, shape)).toThrow(UsageError);
      expect(() => readExpertProfile(file, shape)).toThrow(message);
    };
    const doc = (layers: unknown, extra: Record<string, unknown> = {}) => JSON.stringify({ format: EXPERT_PROFILE_FORMAT, fingerprint: "abc", layers, ...extra });
    expect(readExpertProfile(join(dir, "none.json"), shape)).toBeNull();
    refuse("{not json", /bad\.json: not JSON/);
    refuse("[]", /expected a JSON object/);
    refuse(doc({}, { format: "v0" }), /format "v0", expected "k3-expert-profile-v1"/);
    refuse(doc({}, { fingerprint: "xyz" }), /made for checkpoint "xyz", this one is "abc"/);
    refuse(doc([]), /layers: expected an object/);
    refuse(doc({ 0: [] }), /layers\.0: not a MoE layer of this checkpoint/);
    refuse(doc({ "1.5": [] }), /layers\.1\.5: not a MoE layer/);
    refuse(doc({ 1: {} }), /layers\.1: expected \[\[expert, count\], \.\.\.\]/);
    refuse(doc({ 1: [[8, 1]] }), /layers\.1\[0\]: expected \[expert 0\.\.7, count >= 0\], got \[8,1\]/);
    refuse(doc({ 1: [[1, -1]] }), /layers\.1\[0\]: expected/);
    refuse(doc({ 1: [[1, "2"]] }), /layers\.1\[0\]: expected/);
    refuse(doc({ 1: [[1, 1, 1]] }), /layers\.1\[0\]: expected/);
    refuse(doc({ 1: [[3, 1], [3, 2]] }), /layers\.1: expert 3 is listed twice/);
    writeFileSync(file, doc({ 1: [[3, 2.5], [0, 1]] }));
    expect(readExpertProfile(file, shape)).toEqual(new Map([[1, new Map([[3, 2.5], [0, 1]])]]));

    // Another checkpoint's profile through the CLI: a usage error before anything runs.
    writeExpertProfile(file, "someone-else", new Map([[1, new Map([[0, 1]])]]));
    const r = await k3([...RUN, "--expert-profile", file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--expert-profile .*bad\.json: made for checkpoint "someone-else"/);
  });

  it("hottestFirst: the most counted first, ties and uncounted experts in id order", () => {
    expect(hottestFirst(new Map([[5, 2], [1, 3], [3, 2]]), 6)).toEqual([1, 3, 5, 0, 2, 4]);
    expect(hottestFirst(undefined, 3)).toEqual([0, 1, 2]);
  });
});
