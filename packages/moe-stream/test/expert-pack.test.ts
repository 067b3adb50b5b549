import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openCheckpointIndex } from "../src/store/checkpoint.js";
import { CheckpointError } from "../src/errors.js";
import { openPackedExperts, packExperts } from "../src/store/expert-pack.js";
import { ExpertStore } from "../src/store/expert-store.js";
import { tinyK3Dir } from "./fixtures.js";

let out: string;
beforeAll(() => {
  out = mkdtempSync(join(tmpdir(), "k3-xpack-"));
});
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe("packExperts", () => {
  it("packs tiny-k3's experts 4 KiB-aligned; the store reads the same bytes from either file", async () => {
    const index = packExperts(tinyK3Dir, out);
    expect(index.experts.length).toBe(12 * 16);
    const packed = openPackedExperts(out);
    expect(packed.every((e) => e.offset % 4096 === 0)).toBe(true);
    const shards = openCheckpointIndex(tinyK3Dir);
    const a = ExpertStore.open({ experts: packed, ioSlots: 4 });
    const b = ExpertStore.open({ experts: [1, 2].flatMap((l) => shards.experts(l)), ioSlots: 4 });
    try {
      for (const layer of [1, 2]) {
        const [x] = await Promise.all(a.request(layer, [5]).handles);
        const [y] = await Promise.all(b.request(layer, [5]).handles);
        expect(Buffer.from(x.bytes).equals(Buffer.from(y.bytes))).toBe(true);
        expect(Object.keys(x.location.tensors)).toEqual(Object.keys(y.location.tensors));
        x.release();
        y.release();
      }
      // Aligned reads: the device moves only whole pages of each expert, no superset page.
      expect(a.stats().deviceBytes).toBe(2 * 4096);
    } finally {
      a.close();
      b.close();
    }
  });

  it("refuses a tampered index, naming the entry", () => {
    const d = mkdtempSync(join(tmpdir(), "k3-xpack-bad-"));
    try {
      packExperts(tinyK3Dir, d, { layers: [1] });
      const idx = JSON.parse(readFileSync(join(d, "experts.json"), "utf8"));
      idx.experts[3].offset += 100;
      writeFileSync(join(d, "experts.json"), JSON.stringify(idx));
      expect(() => openPackedExperts(d)).toThrow(CheckpointError);
      expect(() => openPackedExperts(d)).toThrow(/experts\[3\] \(layer 1 expert 3\): offset \d+ .* unaligned/);
    } finally {
      rmSync(d, { recursive: true, force: true });
    }
  });
});
