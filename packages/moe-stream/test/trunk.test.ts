import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statfsSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { openCheckpointIndex } from "../src/store/checkpoint.js";
import { BudgetError, ChecksumError, CheckpointError, PackError } from "../src/errors.js";
import { progressPrinter, type Progress } from "@k3/native";
import { packTrunk, readTrunkManifest, verifyTrunkFile } from "../src/trunk/trunk-pack.js";
import { TrunkStreamer } from "../src/trunk/trunk-stream.js";
import { tinyK3Dir } from "./fixtures.js";

const dirs: string[] = [];
const scratch = () => {
  const d = mkdtempSync(join(tmpdir(), "k3-trunk-"));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const ckpt = openCheckpointIndex(tinyK3Dir);
function sourceBytes(name: string): Buffer {
  const t = ckpt.tensors.get(name)!;
  const fd = openSync(t.file, "r");
  const b = Buffer.alloc(t.byteLength);
  readSync(fd, b, 0, t.byteLength, t.offset);
  closeSync(fd);
  return b;
}

let packed: string | null = null;
let packing: Promise<unknown> | null = null;
/** tiny-k3 packed once (await packedReady() first). */
function packedOnce(): string {
  if (!packed) throw new Error("await packedReady() first");
  return packed;
}
async function packedReady(): Promise<string> {
  if (!packing) {
    const d = scratch();
    packing = packTrunk(tinyK3Dir, d).then(() => (packed = d));
  }
  await packing;
  return packedOnce();
}

describe("packTrunk", () => {
  it("moves data in pieces of pieceBytes (one 4 KiB piece at a time gives the same file); a bad size is refused by name", async () => {
    await packedReady();
    const small = scratch();
    const r = await packTrunk(tinyK3Dir, small, { pieceBytes: 4096 });
    expect(Buffer.compare(readFileSync(join(small, "trunk.bin")), readFileSync(join((await packedReady()), "trunk.bin")))).toBe(0);
    expect(r.manifest.groups).toEqual(readTrunkManifest((await packedReady())).groups);
    for (const bad of [1000, 0, 2 ** 31])
      await expect(packTrunk(tinyK3Dir, scratch(), { pieceBytes: bad })).rejects.toThrow(new RegExp(`pieceBytes must be a multiple of 4096 in \\[4096, 1073741824\\], got ${bad}`));
  });

  it("packs every non-expert tensor of tiny-k3, 4 KiB-aligned per layer, byte-exact and verified", async () => {
    const out = scratch();
    const events: Progress[] = [];
    const r = await packTrunk(tinyK3Dir, out, { onProgress: (p) => events.push(p) });
    const m = readTrunkManifest(out);
    expect(m.groups.map((g) => g.name)).toEqual([...Array.from({ length: 13 }, (_, l) => `layer.${l}`), "global"]);
    const trunk = readFileSync(r.file);
    let count = 0;
    for (const g of m.groups) {
      expect(g.offset % 4096).toBe(0);
      expect(g.byteLength % 4096).toBe(0);
      for (const [name, t] of Object.entries(g.tensors)) {
        expect(name).not.toMatch(/\.experts\.\d+\./);
        expect(trunk.subarray(g.offset + t.offset, g.offset + t.offset + t.byteLength).equals(sourceBytes(name))).toBe(true);
        count++;
      }
    }
    const nonExpert = [...ckpt.tensors.keys()].filter((n) => !/\.experts\.\d+\./.test(n)).length;
    expect(count).toBe(nonExpert);
    expect(m.groups[1].tensors["language_model.model.layers.1.block_sparse_moe.gate.weight"]).toBeDefined();
    expect(existsSync(join(out, "trunk.journal"))).toBe(false);
    expect(existsSync(join(out, "trunk.bin.partial"))).toBe(false);
    expect(events.at(-1)!.done).toBe(true);
    expect(events.at(-1)!.bytesDone).toBe(m.bytes);
  });

  it("prints JSON lines when not on a TTY and a bar on a TTY", () => {
    const lines: string[] = [];
    const fake = { isTTY: false, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream;
    const print = progressPrinter(fake, { intervalMs: 0 });
    print({ phase: "pack", item: "layer.3", bytesDone: 50, bytesTotal: 100, bytesResumed: 0, rate: 1e6, etaSeconds: 2, done: false });
    expect(JSON.parse(lines[0])).toMatchObject({ phase: "pack", bytesDone: 50, bytesTotal: 100, etaSeconds: 2 });
    const tty: string[] = [];
    progressPrinter({ isTTY: true, write: (s: string) => tty.push(s) } as unknown as NodeJS.WriteStream, { intervalMs: 0 })({
      phase: "pack", item: "layer.3", bytesDone: 50, bytesTotal: 100, bytesResumed: 0, rate: 1e6, etaSeconds: 2, done: false,
    });
    expect(tty[0]).toMatch(/^\rpack \[#{15}\.{15}\] 50\.0% .*ETA 2s layer\.3/);
  });

  it("the same bytes as every earlier packer (golden hashes of tiny-k3's trunk.bin and manifest groups)", async () => {
    const dir = await packedReady();
    const m = JSON.parse(readFileSync(join(dir, "trunk.json"), "utf8"));
    delete m.source; // shard mtimes
    expect(createHash("sha256").update(readFileSync(join(dir, "trunk.bin"))).digest("hex")).toBe("70472c965c243ffa7609061defa2479617c4098b476724bc42e76f6ed243845f");
    expect(createHash("sha256").update(JSON.stringify(m)).digest("hex")).toBe("e99cf12ae3c20fb7e74304b0d2929a533e4d0a4977f9a4679828f8cc71e93b0b");
  });

  it("O_DIRECT (the default on a disk) and buffered packs give the same files; the result says how it read and wrote", async () => {
    const dir = await packedReady();
    const out = scratch();
    const r = await packTrunk(tinyK3Dir, out, { direct: false, pieceBytes: 8192 });
    expect(r.io).toEqual({ read: "buffered (O_DIRECT not asked)", write: "buffered (asked)" });
    expect(readFileSync(r.file).equals(readFileSync(join(dir, "trunk.bin")))).toBe(true);
    expect(readFileSync(r.manifestFile, "utf8")).toBe(readFileSync(join(dir, "trunk.json"), "utf8"));
    const d = await packTrunk(tinyK3Dir, scratch());
    if (statfsSync(out).type === 0x01021994) expect(d.io.write).toMatch(/O_DIRECT|buffered \(O_DIRECT refused/);
    else expect(d.io).toEqual({ read: "O_DIRECT", write: "O_DIRECT" });
  });

  it("resumes after the packer is killed mid-way, with an identical result", async () => {
    await packedReady();
    const out = scratch();
    const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./pack-child.ts", import.meta.url)), tinyK3Dir, out, "150"], { stdio: "pipe" });
    const journal = join(out, "trunk.journal");
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      if (existsSync(journal) && readFileSync(journal, "utf8").split("\n").filter(Boolean).length >= 3) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    expect(existsSync(join(out, "trunk.bin"))).toBe(false); // nothing published by a killed run
    const before = readFileSync(journal, "utf8").split("\n").filter(Boolean).length;
    expect(before).toBeGreaterThanOrEqual(3);
    const r = await packTrunk(tinyK3Dir, out);
    expect(r.resumedGroups).toBeGreaterThanOrEqual(3);
    expect(readFileSync(r.file).equals(readFileSync(join((await packedReady()), "trunk.bin")))).toBe(true);
    expect(readFileSync(r.manifestFile, "utf8")).toBe(readFileSync(join((await packedReady()), "trunk.json"), "utf8"));
  }, 60_000);

  it("disk full: a PackError naming the free space; the next run resumes", async () => {
    await packedReady();
    const mnt = join(scratch(), "small");
    mkdirSync(mnt);
    const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]).status === 0;
    try {
      let err: unknown;
      try {
        await packTrunk(tinyK3Dir, mnt, mounted ? {} : { injectEnospcAfterBytes: 400_000 });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(PackError);
      expect((err as PackError).code).toBe("ENOSPC");
      expect((err as Error).message).toMatch(/disk full writing layer\.\d+ of the trunk .* free; free space and re-run to resume \(\d+ of 14 groups kept\)/);
      if (mounted) expect(spawnSync("mount", ["-o", "remount,size=16m", mnt]).status).toBe(0);
      const r = await packTrunk(tinyK3Dir, mnt);
      expect(r.resumedGroups).toBeGreaterThan(0);
      expect(readFileSync(r.file).equals(readFileSync(join((await packedReady()), "trunk.bin")))).toBe(true);
      console.log(`disk-full test used ${mounted ? "a real 1 MiB tmpfs" : "an injected ENOSPC (mount not permitted)"}`);
    } finally {
      if (mounted) spawnSync("umount", [mnt]);
    }
  });

  it("a changed byte is a checksum error naming the tensor", async () => {
    const out = scratch();
    await packTrunk(tinyK3Dir, out);
    const m = readTrunkManifest(out);
    const g = m.groups[2];
    const [name, t] = Object.entries(g.tensors)[1];
    const fd = openSync(join(out, "trunk.bin"), "r+");
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, g.offset + t.offset + 5);
    b[0] ^= 0x40;
    writeSync(fd, b, 0, 1, g.offset + t.offset + 5);
    closeSync(fd);
    await expect(verifyTrunkFile(join(out, "trunk.bin"), m)).rejects.toThrow(ChecksumError);
    await expect(verifyTrunkFile(join(out, "trunk.bin"), m)).rejects.toThrow(new RegExp(`checksum mismatch in ${name.replace(/\./g, "\\.")}`));
  });

  it("refuses a hostile manifest, naming the field", async () => {
    const out = scratch();
    await packTrunk(tinyK3Dir, out);
    const m = JSON.parse(readFileSync(join(out, "trunk.json"), "utf8"));
    m.groups[3].offset += 4096;
    writeFileSync(join(out, "trunk.json"), JSON.stringify(m));
    expect(() => readTrunkManifest(out)).toThrow(CheckpointError);
    expect(() => readTrunkManifest(out)).toThrow(/group layer\.3: offset .* break the 4 KiB tiling/);
    writeFileSync(join(out, "trunk.json"), "{not json");
    expect(() => readTrunkManifest(out)).toThrow(/trunk\.json: not valid JSON/);
  });

  it("refuses the manifests pnpm fuzz found crashing the reader or the engine (TypeError/RangeError) or giving other tokens", async () => {
    const out = scratch();
    await packTrunk(tinyK3Dir, out);
    const pristine = readFileSync(join(out, "trunk.json"), "utf8");
    const layerGroup = (m: { groups: { layer: number | null; tensors: Record<string, { offset: number; byteLength: number; dtype: string; shape: number[]; crc32: number }> }[] }) => m.groups.find((g) => g.layer === 7)!;
    const cases: [string, (m: ReturnType<typeof JSON.parse>) => void, RegExp][] = [
      ["a tensor entry null (TypeError reading 'offset')", (m) => (layerGroup(m).tensors[Object.keys(layerGroup(m).tensors)[0]] = null as never), /tensor .* must be an object/],
      ["tensors not an object", (m) => (layerGroup(m).tensors = "abc" as never), /tensors must be an object/],
      ["a bf16 tensor at an odd offset (RangeError in gemmBf16)", (m) => {
        const ts = Object.values(layerGroup(m).tensors).filter((t) => t.dtype === "BF16");
        ts[ts.length - 1].offset += 1;
      }, /offset \d+ is not a multiple of 64/],
      ["two groups for one layer (TypeError reading 'layer' in the streamer)", (m) => (m.groups.find((g: { layer: number | null }) => g.layer === 8).layer = 7), /layer 7 has a group already/],
      ["a shape that does not match the byte length", (m) => {
        const t = Object.values(layerGroup(m).tensors)[0];
        t.shape = [...t.shape, 2];
      }, /needs \d+/],
      ["an unknown dtype", (m) => (Object.values(layerGroup(m).tensors)[0].dtype = "Q4"), /dtype "Q4" is not a safetensors dtype/],
      ["a crc32 out of range", (m) => (Object.values(layerGroup(m).tensors)[0].crc32 = -1), /crc32 must be a 32-bit unsigned integer/],
      ["a tensor moved onto another's bytes (other tokens, no error)", (m) => {
        const ts = Object.values(layerGroup(m).tensors).sort((a, b) => a.offset - b.offset);
        ts[ts.length - 1].offset = 0;
      }, /overlap/],
    ];
    for (const [what, edit, message] of cases) {
      const m = JSON.parse(pristine);
      edit(m);
      writeFileSync(join(out, "trunk.json"), JSON.stringify(m));
      expect(() => readTrunkManifest(out), what).toThrow(CheckpointError);
      expect(() => readTrunkManifest(out), what).toThrow(message);
    }
    writeFileSync(join(out, "trunk.json"), pristine);
    expect(readTrunkManifest(out).groups.length).toBeGreaterThan(0);
  });
});

describe("TrunkStreamer", () => {
  it("serves pinned and streamed layers byte-exact; 2 ring slots read L+1 while L is in use", async () => {
    const dir = (await packedReady());
    const s = await TrunkStreamer.open({ dir, pinnedLayers: [0, 5], ringSlots: 2, chunkBytes: 64 << 10, verify: "all" });
    try {
      for (let round = 0; round < 2; round++)
        for (let l = 0; l < 13; l++) {
          const layer = await s.acquire(l);
          expect(layer.pinned).toBe(l === 0 || l === 5);
          for (const name of layer.names()) expect(Buffer.from(layer.tensor(name)).equals(sourceBytes(name))).toBe(true);
          await new Promise((r) => setTimeout(r, 5)); // "compute"
          layer.release();
        }
      const st = s.stats();
      expect(st.asyncReaderStarted).toBe(true);
      expect(st.aheadLoads).toBeGreaterThan(15);
      expect(st.readyOnAcquire).toBeGreaterThan(15); // the read of L+1 finished during L's compute
    } finally {
      s.close();
    }
  });

  it("a one-slot ring never starts the async reader", async () => {
    const s = await TrunkStreamer.open({ dir: (await packedReady()), ringSlots: 1, chunkBytes: 64 << 10 });
    try {
      for (let l = 0; l < 13; l++) (await s.acquire(l)).release();
      expect(s.stats().asyncReaderStarted).toBe(false);
      expect(s.stats().aheadLoads).toBe(0);
      expect(s.stats().layerLoads).toBe(13);
    } finally {
      s.close();
    }
  });

  it("a budget too small fails before loading, with both numbers", async () => {
    await expect(TrunkStreamer.open({ dir: (await packedReady()), pinnedLayers: [1, 2, 3], ringSlots: 2, chunkBytes: 64 << 10, budgetBytes: 100_000 })).rejects.toThrow(BudgetError);
    await expect(TrunkStreamer.open({ dir: (await packedReady()), pinnedLayers: [1], ringSlots: 2, chunkBytes: 64 << 10, budgetBytes: 100_000 })).rejects.toThrow(/needs .* \(\d+ B\) but the budget is .* \(100000 B\)/);
  });

  it("a corrupted streamed layer fails its acquire with a checksum error", async () => {
    const out = scratch();
    await packTrunk(tinyK3Dir, out);
    const m = readTrunkManifest(out);
    const g = m.groups[4];
    const t = Object.values(g.tensors)[0];
    const fd = openSync(join(out, "trunk.bin"), "r+");
    writeSync(fd, Buffer.from([0xff ^ readFileSync(join(out, "trunk.bin"))[g.offset + t.offset]]), 0, 1, g.offset + t.offset);
    closeSync(fd);
    const s = await TrunkStreamer.open({ dir: out, ringSlots: 2, chunkBytes: 64 << 10, verify: "all" });
    try {
      await expect(s.acquire(4)).rejects.toThrow(ChecksumError);
      (await s.acquire(5)).release(); // the streamer keeps working
    } finally {
      s.close();
    }
  });
});
