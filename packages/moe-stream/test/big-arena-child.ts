// Child for the big-arena test: arenas above 4 GiB (never prefaulted: only the pages read are
// touched), used at both ends, closed, collected. Prints one JSON line; the parent requires exit 0.
// argv: dir (holding the sparse file `data.bin`, with pattern pages written by the parent)
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { ArenaViews } from "../src/io/arena-views.js";
import { ExpertStore } from "../src/store/expert-store.js";
import { openNativeStore } from "../src/io/io-engine.js";
import type { NativeReadDone } from "../src/native.js";
import { TrunkStreamer } from "../src/trunk/trunk-stream.js";
import { TRUNK_FILE, TRUNK_MANIFEST, type TrunkManifest } from "../src/trunk/trunk-pack.js";

const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))![1]) * 1024;
const gc = (globalThis as { gc?: () => void }).gc!;
const [dir] = process.argv.slice(2);
const file = join(dir, "data.bin");
const MiB = 2 ** 20;
const SLOT = 64 * MiB;
const SLOTS = 80; // 5 GiB
const pattern = (seed: number) => {
  const p = new Uint8Array(4096);
  for (let i = 0; i < p.length; i++) p[i] = (i * 31 + seed * 7 + 1) & 255;
  return p;
};
const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
const out: Record<string, unknown> = { rssStart: rss() };

// 1. The native store itself: read into slot 0 and into the last slot (bytes 4.94-5 GiB).
{
  const waits = new Map<number, (d: NativeReadDone) => void>();
  const store = openNativeStore({ files: [file], slotBytes: SLOT, slots: SLOTS, readers: 2, direct: true, maxPrefetchInflight: 1, prefault: false, onDone: (d) => waits.get(d.id)!(d) });
  out.rssAfterOpen = rss();
  const read = (id: number, offset: number, slot: number) =>
    new Promise<NativeReadDone>((res) => {
      waits.set(id, res);
      store.read(id, 0, offset, 4096, slot, false);
    });
  store.ref();
  const first = await read(1, 0, 0);
  const last = await read(2, 5 * 2 ** 30 + 4096 * 3, SLOTS - 1);
  store.unref();
  if (first.status !== 0 || last.status !== 0) throw new Error(`reads failed: ${first.message} ${last.message}`);
  const views = new ArenaViews(store, "test");
  const lastBytes = views.bytes((SLOTS - 1) * SLOT, SLOT, last.dataOffset, 4096);
  out.slot0 = same(views.bytes(0, SLOT, first.dataOffset, 4096), pattern(0));
  out.lastSlot = same(lastBytes, pattern(1));
  out.lastSlotByteOffset = lastBytes.byteOffset + (SLOTS - 1) * SLOT;
  // A view above 2^32 bytes is refused, naming it; so is a range outside the arena.
  try {
    store.view(0, 2 ** 32 + SLOT);
    out.bigView = "accepted";
  } catch (e) {
    out.bigView = (e as Error).message;
  }
  try {
    store.view(SLOTS * SLOT - 4096, 8192);
    out.outsideView = "accepted";
  } catch (e) {
    out.outsideView = (e as Error).message;
  }
  out.rssAfterReads = rss();
  store.close();
  // A view taken before close() stays mapped after it (it holds the arena), but close() has given
  // its pages back to the kernel: it reads zeros, never freed memory.
  out.lastSlotAfterClose = lastBytes.every((b) => b === 0);
  out.rssAfterClose = rss();
  try {
    store.view(0, 4096);
    out.viewAfterClose = "accepted";
  } catch (e) {
    out.viewAfterClose = (e as Error).message;
  }
  views.clear();
}
gc();
await new Promise((r) => setTimeout(r, 50));
gc();
out.rssAfterGc = rss();

// 2. An ExpertStore whose cache is above 4 GiB (300 slots of 17.5 MB) opens, reads, closes.
{
  const EXPERT = 17_547_264;
  const experts = Array.from({ length: 300 }, (_, id) => ({ layer: 1, id, file, offset: id * EXPERT, byteLength: EXPERT, tensors: {} }));
  const store = ExpertStore.open({ experts, slotsPerLayer: 290, ioSlots: 10, readers: 2, prefault: false });
  out.expertArena = store.arenaBytes;
  const [h] = await Promise.all(store.request(1, [0]).handles);
  out.expert0 = same(h.bytes.subarray(0, 4096), pattern(0));
  h.release();
  store.close();
}

// 3. A 2-slot trunk ring of 2 x 2.5 GB opens (this crashed at load) and closes; one small layer read.
{
  const tdir = join(dir, "trunk");
  const big = 2.5 * 2 ** 30;
  const manifest: TrunkManifest = {
    format: "k3-trunk", version: 1, align: 4096, file: TRUNK_FILE, bytes: big + 4096 * 2, source: { shards: [] },
    groups: [
      { name: "layer.0", layer: 0, offset: 0, byteLength: big, tensors: { w: { offset: 0, byteLength: big, dtype: "U8", shape: [big], crc32: 0 } } },
      { name: "layer.1", layer: 1, offset: big, byteLength: 4096, tensors: { w: { offset: 0, byteLength: 4096, dtype: "U8", shape: [4096], crc32: 0 } } },
      { name: "global", layer: null, offset: big + 4096, byteLength: 4096, tensors: {} },
    ],
  };
  const { mkdirSync, writeFileSync, ftruncateSync } = await import("node:fs");
  mkdirSync(tdir, { recursive: true });
  writeFileSync(join(tdir, TRUNK_MANIFEST), JSON.stringify(manifest));
  const fd = openSync(join(tdir, TRUNK_FILE), "w");
  ftruncateSync(fd, manifest.bytes);
  writeSync(fd, pattern(2), 0, 4096, big);
  closeSync(fd);
  const ring = await TrunkStreamer.open({ dir: tdir, ringSlots: 2, verify: "none", prefault: false, schedule: [1] });
  out.ringArena = ring.arenaBytes;
  const l1 = await ring.acquire(1);
  out.ringLayer1 = same(l1.tensor("w"), pattern(2));
  l1.release();
  ring.close();
}
out.rssEnd = rss();
console.log(JSON.stringify(out));
// No explicit exit: the process must wind down on its own with exit 0.
