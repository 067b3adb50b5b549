/**
 * TrunkChunkStreamer: the trunk streamed in CHUNKS (whole tensors, at most `chunkBytes` each)
 * through a ring smaller than one layer, for budgets where two layer-sized slots do not fit
 * (a K3 MoE layer's trunk is 1.27 GB; K3 layer 0 is 2.34 GB).
 *
 * `layer(L)` yields the layer's chunks in file order; the consumer computes with a chunk's tensors
 * and releases it. With >= 2 ring slots the reader stays ahead: while chunk i is in use, chunks
 * i+1.. (then the next scheduled layer's first chunks) are read into the free slots, so reading
 * layer L+1 overlaps computing layer L inside ringSlots x chunk bytes. With one slot the async
 * reader never starts: each chunk is read when it is asked for.
 *
 * Chunks are cut at tensor boundaries; a tensor larger than `chunkBytes` is a chunk of its own
 * (the slot size is the largest chunk). Each chunk is one aligned O_DIRECT read.
 */
import { join } from "node:path";
import { BudgetError, ChecksumError, MoeStreamError, StoreStateError, formatBytes } from "../errors.js";
import { type NativeExpertStore, type NativeReadDone } from "../native.js";
import { openNativeStore, type IoEngine, type IoEngineInUse } from "../io/io-engine.js";
import { ArenaViews } from "../io/arena-views.js";
import { readTrunkManifest, TRUNK_FILE, type TrunkManifest, type TrunkTensor } from "./trunk-pack.js";

export interface TrunkChunk {
  layer: number;
  /** Position of this chunk in its layer, and how many the layer has. */
  index: number;
  count: number;
  names(): string[];
  tensor(name: string): Uint8Array;
  info(name: string): TrunkTensor;
  release(): void;
}

export interface TrunkChunkStreamerOptions {
  dir: string;
  /** Target chunk size (default 256 MiB); a bigger tensor gets a chunk of its own. */
  chunkBytes?: number;
  /** Ring slots (>= 1; 2 or more read ahead). */
  ringSlots?: number;
  /** Layers in the order they will be streamed (default: every layer, ascending, cyclic). */
  schedule?: number[];
  readers?: number;
  direct?: boolean;
  /** "auto" (default; io_uring else pread threads), "io_uring" (fails when unavailable) or "pread". */
  ioEngine?: IoEngine;
  /** Check every tensor's crc32 as its chunk lands, on the reader threads (default true). */
  verify?: boolean;
  budgetBytes?: number;
  prefault?: boolean;
}

interface ChunkPlan {
  layer: number;
  index: number;
  count: number;
  /** Aligned file range read into a slot. */
  start: number;
  length: number;
  tensors: Array<[string, TrunkTensor & { abs: number }]>;
}

interface Slot {
  index: number;
  chunk: ChunkPlan | null;
  loading: Promise<void> | null;
  inUse: boolean;
}

const ALIGN = 4096;

/** Splits every layer group into chunks of whole tensors. */
export function planTrunkChunks(manifest: TrunkManifest, chunkBytes: number): Map<number, ChunkPlan[]> {
  const out = new Map<number, ChunkPlan[]>();
  for (const g of manifest.groups) {
    if (g.layer === null) continue;
    const tensors = Object.entries(g.tensors)
      .map(([name, t]) => [name, { ...t, abs: g.offset + t.offset }] as [string, TrunkTensor & { abs: number }])
      .sort((a, b) => a[1].abs - b[1].abs);
    const chunks: ChunkPlan[] = [];
    let cur: Array<[string, TrunkTensor & { abs: number }]> = [];
    const flush = () => {
      if (cur.length === 0) return;
      const first = cur[0][1].abs;
      const last = cur[cur.length - 1][1];
      const start = Math.floor(first / ALIGN) * ALIGN;
      const end = Math.ceil((last.abs + last.byteLength) / ALIGN) * ALIGN;
      chunks.push({ layer: g.layer!, index: chunks.length, count: 0, start, length: Math.max(ALIGN, end - start), tensors: cur });
      cur = [];
    };
    for (const entry of tensors) {
      const first = cur.length ? cur[0][1].abs : entry[1].abs;
      if (cur.length && entry[1].abs + entry[1].byteLength - first > chunkBytes) flush();
      cur.push(entry);
    }
    flush();
    for (const c of chunks) c.count = chunks.length;
    out.set(g.layer, chunks);
  }
  return out;
}

export class TrunkChunkStreamer {
  readonly manifest: TrunkManifest;
  readonly slotBytes: number;
  readonly arenaBytes: number;
  private readonly chunks: Map<number, ChunkPlan[]>;
  private readonly nativeStore: NativeExpertStore;
  private readonly arena: ArenaViews;
  private readonly slots: Slot[] = [];
  private readonly order: ChunkPlan[]; // every chunk of the schedule, in streaming order
  private readonly verify: boolean;
  /** The packed trunk file (named in errors). */
  readonly file: string;
  private readonly jobs = new Map<number, (d: NativeReadDone) => void>();
  private readonly waiters: Array<() => void> = [];
  private nextJob = 1;
  private pending = 0;
  private closed = false;
  private readonly engine: { engine: IoEngineInUse; engineNote: string };
  private cursor = 0; // next position in `order` the read-ahead may start
  private readonly counters = { chunkLoads: 0, aheadLoads: 0, readyOnAcquire: 0, bytesRead: 0 };
  private asyncReaderStarted = false;

  constructor(opts: TrunkChunkStreamerOptions) {
    this.manifest = readTrunkManifest(opts.dir);
    const chunkBytes = opts.chunkBytes ?? 256 << 20;
    if (!Number.isInteger(chunkBytes) || chunkBytes < ALIGN) throw new MoeStreamError(`TrunkChunkStreamer: chunkBytes must be an integer >= 4096, got ${chunkBytes}`);
    const ringSlots = opts.ringSlots ?? 2;
    if (!Number.isInteger(ringSlots) || ringSlots < 1) throw new MoeStreamError(`TrunkChunkStreamer: ringSlots must be >= 1, got ${ringSlots}`);
    this.chunks = planTrunkChunks(this.manifest, chunkBytes);
    const schedule = opts.schedule ?? [...this.chunks.keys()].sort((a, b) => a - b);
    for (const l of schedule) if (!this.chunks.has(l)) throw new MoeStreamError(`TrunkChunkStreamer: layer ${l} is not in the trunk`);
    this.order = schedule.flatMap((l) => this.chunks.get(l)!);
    this.slotBytes = Math.ceil(Math.max(ALIGN, ...this.order.map((c) => c.length)) / ALIGN) * ALIGN;
    this.arenaBytes = this.slotBytes * ringSlots;
    if (opts.budgetBytes !== undefined && this.arenaBytes > opts.budgetBytes)
      throw new BudgetError(`trunk chunk ring (${ringSlots} slots of ${formatBytes(this.slotBytes)})`, this.arenaBytes, opts.budgetBytes);
    this.verify = opts.verify ?? true;
    this.file = join(opts.dir, TRUNK_FILE);
    this.nativeStore = openNativeStore({
      files: [join(opts.dir, TRUNK_FILE)], slotBytes: this.slotBytes, slots: ringSlots, readers: opts.readers ?? 8,
      direct: opts.direct ?? true, maxPrefetchInflight: 1, prefault: opts.prefault ?? true, ioEngine: opts.ioEngine,
      onDone: (d) => this.onDone(d),
    });
    this.engine = this.nativeStore.stats();
    const size = this.nativeStore.fileInfo(0).size;
    if (size !== this.manifest.bytes) {
      this.nativeStore.close();
      throw new MoeStreamError(`${join(opts.dir, TRUNK_FILE)}: ${size} bytes, the manifest says ${this.manifest.bytes} (truncated or from another pack)`);
    }
    this.arena = new ArenaViews(this.nativeStore, "TrunkChunkStreamer");
    for (let i = 0; i < ringSlots; i++) this.slots.push({ index: i, chunk: null, loading: null, inUse: false });
  }

  stats() {
    const { engine, engineNote } = this.engine;
    return { ringSlots: this.slots.length, slotBytes: this.slotBytes, arenaBytes: this.arenaBytes, ...this.counters, asyncReaderStarted: this.asyncReaderStarted, engine, engineNote };
  }

  /** The chunks of `layer`, in file order. Release each chunk before asking for the next. */
  async *layer(layer: number): AsyncGenerator<TrunkChunk> {
    if (this.closed) throw new StoreStateError("TrunkChunkStreamer: used after close()");
    const list = this.chunks.get(layer);
    if (!list) throw new MoeStreamError(`TrunkChunkStreamer: no layer ${layer} in the trunk`);
    for (const c of list) {
      let slot = this.slots.find((s) => s.chunk === c);
      if (slot) {
        if (slot.loading === null) this.counters.readyOnAcquire++;
      } else {
        slot = await this.freeSlot();
        this.load(slot, c, false);
      }
      slot.inUse = true;
      // Keep the reader ahead: the chunks after this one, in schedule order.
      const pos = this.order.indexOf(c);
      if (pos >= 0) this.cursor = (pos + 1) % this.order.length;
      if (this.slots.length >= 2) this.readAhead();
      try {
        await slot.loading;
      } catch (e) {
        slot.inUse = false;
        throw e;
      }
      const s = slot;
      let released = false;
      const base = c.start;
      const byName = new Map(c.tensors);
      yield {
        layer,
        index: c.index,
        count: c.count,
        names: () => [...byName.keys()],
        info: (name) => {
          const t = byName.get(name);
          if (!t) throw new MoeStreamError(`trunk layer ${layer} chunk ${c.index}: no tensor ${name}`);
          return t;
        },
        tensor: (name) => {
          const t = byName.get(name);
          if (!t) throw new MoeStreamError(`trunk layer ${layer} chunk ${c.index}: no tensor ${name}`);
          if (this.closed) throw new StoreStateError("TrunkChunkStreamer: used after close()");
          return this.arena.bytes(s.index * this.slotBytes, this.slotBytes, t.abs - base, t.byteLength);
        },
        release: () => {
          if (released) return;
          released = true;
          s.inUse = false;
          s.chunk = null; // consumed: the slot is free for the reader
          this.wake();
          if (this.slots.length >= 2) this.readAhead();
        },
      };
      if (!released) throw new MoeStreamError(`trunk layer ${layer} chunk ${c.index}: release() it before asking for the next chunk`);
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.nativeStore.close();
    this.arena.clear();
  }

  /** Fills free slots with the next chunks of the schedule (wrapping around), nearest first. */
  private readAhead(): void {
    for (let step = 0; step < this.order.length; step++) {
      const c = this.order[(this.cursor + step) % this.order.length];
      if (this.slots.some((s) => s.chunk === c)) continue;
      const free = this.slots.find((s) => !s.inUse && s.chunk === null);
      if (!free) return;
      this.asyncReaderStarted = true;
      this.counters.aheadLoads++;
      this.load(free, c, true);
    }
  }

  private async freeSlot(): Promise<Slot> {
    for (;;) {
      const s = this.slots.find((x) => !x.inUse && x.chunk === null) ?? this.slots.find((x) => !x.inUse && x.loading === null);
      if (s) return s;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  private wake(): void {
    this.waiters.splice(0).forEach((f) => f());
  }

  private load(slot: Slot, c: ChunkPlan, ahead: boolean): void {
    slot.chunk = c;
    this.counters.chunkLoads++;
    const p = this.read(c.start, Math.min(c.length, this.manifest.bytes - c.start), slot.index, c).then(
      () => {
        if (slot.loading === p) slot.loading = null;
        this.counters.bytesRead += c.length;
        this.wake();
      },
      (e) => {
        slot.chunk = null;
        slot.loading = null;
        this.wake();
        throw e;
      },
    );
    if (ahead) p.catch(() => undefined);
    slot.loading = p;
  }

  /** One chunk's read; with verify, its tensors' crc32s are checked on the reader thread that finishes it. */
  private read(offset: number, length: number, slot: number, c: ChunkPlan): Promise<void> {
    return new Promise((resolve, reject) => {
      const id = this.nextJob++;
      this.jobs.set(id, (d) => {
        if (d.checksum) {
          const [name, t] = c.tensors[d.checksum.tensor];
          reject(new ChecksumError(this.file, name, d.checksum.expected, d.checksum.got, `layer ${c.layer} chunk ${c.index}, offset ${t.abs} (+${t.byteLength} bytes)${d.checksum.others ? `; ${d.checksum.others} more tensor(s) of the chunk differ` : ""}`));
        } else if (d.status !== 0 || d.cancelled) reject(new MoeStreamError(`trunk layer ${c.layer} chunk ${c.index}: ${d.cancelled ? "read cancelled (closed)" : d.message}`));
        else resolve();
      });
      if (this.pending++ === 0) this.nativeStore.ref();
      if (this.verify) this.nativeStore.readChecked(`layer ${c.layer} chunk ${c.index}`, c.tensors.map(([name, t]) => [name, t.abs, t.byteLength, t.crc32]), [[id, 0, offset, length, slot, offset]], false);
      else this.nativeStore.read(id, 0, offset, length, slot, false, offset);
    });
  }

  private onDone(d: NativeReadDone): void {
    const cb = this.jobs.get(d.id);
    this.jobs.delete(d.id);
    if (--this.pending === 0 && !this.closed) this.nativeStore.unref();
    cb?.(d);
  }
}
