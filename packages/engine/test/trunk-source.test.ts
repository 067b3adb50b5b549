/**
 * A packed trunk is tied to the checkpoint it was packed from (issue #15): a trunk packed from one
 * model, run with a changed copy of it, gave the original's tokens. The engine now refuses a trunk
 * whose recorded source shards (names, sizes) or headers' sha256 differ from the checkpoint's.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packTrunk } from "@k3/moe-stream";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { TINY_48B, TINY_K3 } from "./helpers.js";

const root = mkdtempSync(join(tmpdir(), "k3-trunk-source-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const load = (dir: string, trunkDir: string) => Engine.load(dir, { mem: bigBox, preset: "ultra", trunkDir, threads: 1 });

describe("a packed trunk is refused with a checkpoint it was not packed from", async () => {
  const trunk = join(root, "trunk");
  await packTrunk(TINY_K3, trunk);

  it("records the source's headers hash and loads with its own checkpoint (a copy of it included)", async () => {
    const m = JSON.parse(readFileSync(join(trunk, "trunk.json"), "utf8"));
    expect(m.source.headersSha256).toMatch(/^[0-9a-f]{64}$/);
    const copy = join(root, "copy");
    cpSync(TINY_K3, copy, { recursive: true });
    for (const dir of [TINY_K3, copy]) (await load(dir, trunk)).close();
  });

  it("a changed copy (two same-shape tensors' names swapped in a shard header: same names, same sizes) is refused by the headers' hash", async () => {
    const changed = join(root, "changed");
    cpSync(TINY_K3, changed, { recursive: true });
    const shard = join(changed, "model-00001-of-00003.safetensors");
    const bytes = readFileSync(shard);
    const n = Number(bytes.readBigUInt64LE(0));
    const q = "layers.2.self_attn.q_proj.weight";
    const k = "layers.2.self_attn.k_proj.weight";
    const head = bytes.toString("utf8", 8, 8 + n).replaceAll(q, "@@").replaceAll(k, q).replaceAll("@@", k);
    expect(Buffer.byteLength(head)).toBe(n);
    bytes.write(head, 8, "utf8");
    writeFileSync(shard, bytes);
    await expect(load(changed, trunk)).rejects.toThrow(/--trunk .*trunk\.json: packed from shards whose headers hash to sha256 [0-9a-f]{16}\.\.\., this checkpoint's hash to [0-9a-f]{16}\.\.\. .*re-pack it/);
  });

  it("another model is refused naming the shards; a resized shard naming its sizes", async () => {
    await expect(load(TINY_48B, trunk)).rejects.toThrow(/packed from shards \[model-00001-of-00003\.safetensors, model-00002-of-00003\.safetensors, model-00003-of-00003\.safetensors\], this checkpoint has \[model-00001-of-00002\.safetensors, model-00002-of-00002\.safetensors\]/);
    // The trunk's record of a shard's size, changed: the checkpoint's shard no longer matches it.
    const other = join(root, "other-trunk");
    cpSync(trunk, other, { recursive: true });
    const m = JSON.parse(readFileSync(join(other, "trunk.json"), "utf8"));
    m.source.shards[2].size += 4096;
    writeFileSync(join(other, "trunk.json"), JSON.stringify(m));
    await expect(load(TINY_K3, other)).rejects.toThrow(new RegExp(`packed from model-00003-of-00003\\.safetensors of ${m.source.shards[2].size} bytes, this checkpoint's is ${m.source.shards[2].size - 4096} bytes`));
  });
});
