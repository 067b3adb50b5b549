/**
 * TrunkStreamer: serves each layer's trunk weights from a packed trunk (see trunk-pack.ts) under a
 * fixed budget: N pinned layers loaded once, the rest streamed through a ring of layer-sized slots.
 *
 * With >= 2 ring slots, acquiring layer L starts reading the next streamed layer of the schedule
 * into a free slot, so reading L+1 overlaps computing L. With one slot there is nothing to overlap
 * with: the async reader is never started and each layer is read when it is acquired.
 * Every layer read is split into `chunkBytes` pieces (4 KiB-aligned, O_DIRECT), all in flight at
 * once on the store's reader threads.
 */
import { join } from "node:path";
import { BudgetError, ChecksumError, MoeStreamError, StoreStateError, formatBytes } from "../errors.js";
import { type NativeExpertStore, type NativeReadDone } from "../native.js";
import { openNativeStore, type IoEngine, type IoEngineInUse } from "../io/io-engine.js";
import { ArenaViews } from "../io/arena-views.js";
import { ringSlotBytesFor, TRUNK_CHUNK_BYTES, wholePieces } from "../sizing.js";
import { readTrunkManifest, TRUNK_FILE, type TrunkGroup, type TrunkManifest, type TrunkTensor } from "./trunk-pack.js";

export interface TrunkStreamerOptions {
  /** Directory holding trunk.bin and trunk.json. */
  dir: string;
  /** Layers kept resident. */
  pinnedLayers?: number[];
  /** Ring slots for streamed layers (>= 1; 2 overlaps reading L+1 with computing L). */
  ringSlots?: number;
  /** Read piece size (multiple of 4096; default 64 MiB). */
  chunkBytes?: number;
  readers?: number;
  direct?: boolean;
  /** "auto" (default; io_uring else pread threads), "io_uring" (fails when unavailable) or "pread". */
  ioEngine?: IoEngine;
  /**
   * Check every tensor's crc32 as its layer's reads land, on the reader threads: "all" (default:
   * pinned and ring reads), "pinned" (ring reads unchecked), or "none".
   */
  verify?: "pinned" | "all" | "none";
  /** Fails with BudgetError before loading anything when the arena would exceed it. */
  budgetBytes?: number;
  /** Streamed layers in the order they will be acquired (default: ascending, cyclic). */
  schedule?: number[];
  prefault?: boolean;
}

/** One layer's trunk tensors, valid until release(). */
export interface TrunkLayer {
  layer: number;
  pinned: boolean;
  tensor(name: string): Uint8Array;
  info(name: string): TrunkTensor;
  names(): string[];
  release(): void;
}

export interface TrunkStreamerStats {
  pinnedLayers: number;
  pinnedBytes: number;
  ringSlots: number;
  ringSlotBytes: number;
  arenaBytes: number;
  /** Streamed-layer loads, and how many of them were started ahead by the async reader. */
  layerLoads: number;
  aheadLoads: number;
  /** Acquires that found their layer already fully read (the read was hidden). */
  readyOnAcquire: number;
  bytesRead: number;
  ioBusyNs: number;
  asyncReaderStarted: boolean;
  /** The engine serving reads. */
  engine: IoEngineInUse;
  engineNote: string;
}

interface RingSlot {
  index: number;
  firstChunk: number;
  layer: number | null;
  users: number;
  loading: Promise<void> | null;
  loaded: boolean;
  ahead: boolean;
}

export class TrunkStreamer {
  readonly manifest: TrunkManifest;
  private readonly groups = new Map<number, TrunkGroup>();
  private readonly nativeStore: NativeExpertStore;
  private readonly arena: ArenaViews;
  /** Read piece size (every layer read is split into these, all in flight at once). */
  readonly chunkBytes: number;
  /** Reads in flight (the engine's queue depth). */
  readonly readers: number;
  /** The packed trunk file. */
  readonly file: string;
  private readonly pinned = new Map<number, number>(); // layer -> first chunk
  private readonly ring: RingSlot[] = [];
  private readonly schedule: number[];
  private readonly verify: "pinned" | "all" | "none";
  private readonly jobs = new Map<number, (d: NativeReadDone) => void>();
  private readonly slotWaiters: Array<() => void> = [];
  private nextJob = 1;
  private pending = 0;
  private closed = false;
  private readonly counters = { layerLoads: 0, aheadLoads: 0, readyOnAcquire: 0, bytesRead: 0 };
  private asyncReaderStarted = false;
  private readonly engine: { engine: IoEngineInUse; engineNote: string };
  readonly arenaBytes: number;
  readonly ringSlotBytes: number;
  readonly pinnedBytes: number;

  /** Opens the trunk and loads the pinned layers (verified by default). */
  static async open(opts: TrunkStreamerOptions): Promise<TrunkStreamer> {
    const s = new TrunkStreamer(opts);
    try {
      await s.loadPinned();
    } catch (e) {
      s.close();
      throw e;
    }
    return s;
  }

  /** Arena bytes for these options, without opening anything but the manifest. */
  static arenaBytesFor(manifest: TrunkManifest, pinnedLayers: number[], ringSlots: number, chunkBytes = TRUNK_CHUNK_BYTES): { pinnedBytes: number; ringSlotBytes: number; bytes: number } {
    const layers = manifest.groups.filter((g) => g.layer !== null);
    const pinnedSet = new Set(pinnedLayers);
    const pinnedBytes = layers.filter((g) => pinnedSet.has(g.layer!)).reduce((a, g) => a + wholePieces(g.byteLength, chunkBytes), 0);
    const streamed = layers.filter((g) => !pinnedSet.has(g.layer!));
    const ringSlotBytes = streamed.length ? ringSlotBytesFor(Math.max(...streamed.map((g) => g.byteLength)), chunkBytes) : 0;
    return { pinnedBytes, ringSlotBytes, bytes: pinnedBytes + (streamed.length ? ringSlots : 0) * ringSlotBytes };
  }

  private constructor(opts: TrunkStreamerOptions) {
    this.manifest = readTrunkManifest(opts.dir);
    for (const g of this.manifest.groups) if (g.layer !== null) this.groups.set(g.layer, g);
    const chunkBytes = opts.chunkBytes ?? TRUNK_CHUNK_BYTES;
    if (!Number.isInteger(chunkBytes) || chunkBytes < 4096 || chunkBytes % 4096 !== 0)
      throw new MoeStreamError(`TrunkStreamer: chunkBytes must be a positive multiple of 4096, got ${chunkBytes}`);
    const ringSlots = opts.ringSlots ?? 2;
    if (!Number.isInteger(ringSlots) || ringSlots < 1) throw new MoeStreamError(`TrunkStreamer: ringSlots must be >= 1, got ${ringSlots}`);
    const pinnedLayers = [...new Set(opts.pinnedLayers ?? [])].sort((a, b) => a - b);
    for (const l of pinnedLayers) if (!this.groups.has(l)) throw new MoeStreamError(`TrunkStreamer: pinned layer ${l} is not in the trunk`);
    const { pinnedBytes, ringSlotBytes, bytes } = TrunkStreamer.arenaBytesFor(this.manifest, pinnedLayers, ringSlots, chunkBytes);
    if (opts.budgetBytes !== undefined && bytes > opts.budgetBytes)
      throw new BudgetError(`trunk arena (${pinnedLayers.length} pinned layers ${formatBytes(pinnedBytes)} + ${ringSlots} ring slots of ${formatBytes(ringSlotBytes)})`, bytes, opts.budgetBytes);
    this.chunkBytes = chunkBytes;
    this.readers = opts.readers ?? 8;
    this.file = join(opts.dir, TRUNK_FILE);
    this.arenaBytes = bytes;
    this.ringSlotBytes = ringSlotBytes;
    this.pinnedBytes = pinnedBytes;
    this.verify = opts.verify ?? "all";
    if (!["all", "pinned", "none"].includes(this.verify)) throw new MoeStreamError(`TrunkStreamer: verify must be "all", "pinned" or "none", got ${JSON.stringify(opts.verify)}`);
    const chunks = Math.max(1, bytes / chunkBytes);
    this.nativeStore = openNativeStore({
      files: [this.file], slotBytes: chunkBytes, slots: chunks, readers: this.readers,
      direct: opts.direct ?? true, maxPrefetchInflight: 1, prefault: opts.prefault ?? true, ioEngine: opts.ioEngine,
      onDone: (d) => this.onDone(d),
    });
    this.engine = this.nativeStore.stats();
    const size = this.nativeStore.fileInfo(0).size;
    if (size !== this.manifest.bytes) {
      this.nativeStore.close();
      throw new MoeStreamError(`${join(opts.dir, TRUNK_FILE)}: ${size} bytes, the manifest says ${this.manifest.bytes} (truncated or from another pack)`);
    }
    this.arena = new ArenaViews(this.nativeStore, "TrunkStreamer");
    let at = 0;
    for (const l of pinnedLayers) {
      this.pinned.set(l, at);
      at += Math.ceil(this.groups.get(l)!.byteLength / chunkBytes);
    }
    const streamed = [...this.groups.keys()].filter((l) => !this.pinned.has(l)).sort((a, b) => a - b);
    if (streamed.length > 0) {
      const perSlot = ringSlotBytes / chunkBytes;
      for (let i = 0; i < ringSlots; i++) this.ring.push({ index: i, firstChunk: at + i * perSlot, layer: null, users: 0, loading: null, loaded: false, ahead: false });
    }
    this.schedule = opts.schedule ?? streamed;
  }

  /** The trunk file, whether it is served by O_DIRECT, and the alignment it asked for. */
  fileInfo(): { file: string; size: number; direct: boolean; offsetAlign: number } {
    return { file: this.file, ...this.nativeStore.fileInfo(0) };
  }

  /** Layers read through the ring (not pinned), ascending. */
  streamedLayers(): number[] {
    return [...this.groups.keys()].filter((l) => !this.pinned.has(l)).sort((a, b) => a - b);
  }

  stats(): TrunkStreamerStats {
    const n = this.closed ? null : this.nativeStore.stats();
    return {
      pinnedLayers: this.pinned.size,
      pinnedBytes: this.pinnedBytes,
      ringSlots: this.ring.length,
      ringSlotBytes: this.ringSlotBytes,
      arenaBytes: this.arenaBytes,
      ...this.counters,
      ioBusyNs: n?.busyNs ?? 0,
      asyncReaderStarted: this.asyncReaderStarted,
      engine: this.engine.engine,
      engineNote: this.engine.engineNote,
    };
  }

  /** The layer's tensors; waits for its read if it is streamed. Call release() when done computing. */
  async acquire(layer: number): Promise<TrunkLayer> {
    if (this.closed) throw new StoreStateError("TrunkStreamer: used after close()");
    const g = this.groups.get(layer);
    if (!g) throw new MoeStreamError(`TrunkStreamer: no layer ${layer} in the trunk`);
    const pinnedChunk = this.pinned.get(layer);
    if (pinnedChunk !== undefined) return this.view(g, pinnedChunk, true, () => undefined);
    let slot = this.ring.find((s) => s.layer === layer);
    if (slot) {
      if (slot.loaded) this.counters.readyOnAcquire++;
    } else {
      slot = await this.freeSlot();
      this.load(slot, g, false);
    }
    slot.users++;
    // Start the next streamed layer now, so its read overlaps this layer's compute.
    if (this.ring.length >= 2) this.readAhead(layer);
    try {
      await slot.loading;
    } catch (e) {
      slot.users--;
      throw e;
    }
    const s = slot;
    return this.view(g, s.firstChunk, false, () => {
      s.users--;
      this.wakeSlotWaiter();
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.nativeStore.close();
    this.arena.clear();
  }

  // ---------------------------------------------------------------- internals

  /** A tensor of group `g` as read into the chunks from `firstChunk` (one view per pinned layer / ring slot). */
  private tensorBytes(g: TrunkGroup, firstChunk: number, t: TrunkTensor): Uint8Array {
    const regionBytes = wholePieces(g.byteLength, this.chunkBytes);
    return this.arena.bytes(firstChunk * this.chunkBytes, this.pinned.get(g.layer!) === firstChunk ? regionBytes : this.ringSlotBytes, t.offset, t.byteLength);
  }

  private view(g: TrunkGroup, firstChunk: number, pinned: boolean, onRelease: () => void): TrunkLayer {
    let released = false;
    return {
      layer: g.layer!,
      pinned,
      names: () => Object.keys(g.tensors),
      info: (name) => {
        const t = g.tensors[name];
        if (!t) throw new MoeStreamError(`trunk layer ${g.layer}: no tensor ${name}`);
        return t;
      },
      tensor: (name) => {
        const t = g.tensors[name];
        if (!t) throw new MoeStreamError(`trunk layer ${g.layer}: no tensor ${name}`);
        if (this.closed) throw new StoreStateError("TrunkStreamer: used after close()");
        return this.tensorBytes(g, firstChunk, t);
      },
      release: () => {
        if (!released) {
          released = true;
          onRelease();
        }
      },
    };
  }

  private readAhead(current: number): void {
    const i = this.schedule.indexOf(current);
    const next = this.schedule[(i + 1) % this.schedule.length];
    if (next === undefined || next === current || this.ring.some((s) => s.layer === next)) return;
    const slot = this.ring.find((s) => s.users === 0 && s.layer !== current && (s.loading === null || s.loaded));
    if (!slot) return;
    this.asyncReaderStarted = true;
    this.counters.aheadLoads++;
    const g = this.groups.get(next);
    if (!g) return; // not in the trunk: acquire() names it
    this.load(slot, g, true);
    slot.loading!.catch(() => undefined); // surfaced to whoever acquires it
  }

  private async freeSlot(): Promise<RingSlot> {
    for (;;) {
      const s = this.ring.find((r) => r.users === 0 && (r.loading === null || r.loaded) && !r.ahead) ?? this.ring.find((r) => r.users === 0 && (r.loading === null || r.loaded));
      if (s) return s;
      await new Promise<void>((r) => this.slotWaiters.push(r));
    }
  }

  private wakeSlotWaiter(): void {
    this.slotWaiters.splice(0).forEach((f) => f());
  }

  private load(slot: RingSlot, g: TrunkGroup, ahead: boolean): void {
    slot.layer = g.layer;
    slot.loaded = false;
    slot.ahead = ahead;
    this.counters.layerLoads++;
    const verify = this.verify === "all";
    slot.loading = this.readGroup(g, slot.firstChunk, verify).then(
      () => {
        slot.loaded = true;
        slot.ahead = false;
        this.wakeSlotWaiter();
      },
      (e) => {
        slot.layer = null;
        slot.loading = null;
        slot.ahead = false;
        this.wakeSlotWaiter();
        throw e;
      },
    );
  }

  private async loadPinned(): Promise<void> {
    await Promise.all([...this.pinned].map(([l, c]) => this.readGroup(this.groups.get(l)!, c, this.verify !== "none")));
  }

  /**
   * Reads a group in chunk-sized pieces, all in flight at once. With `verify`, the reader threads
   * check every tensor's crc32 as the pieces land (the last piece to finish reports a mismatch), so
   * the compute thread never hashes.
   */
  private async readGroup(g: TrunkGroup, firstChunk: number, verify: boolean): Promise<void> {
    const n = Math.ceil(g.byteLength / this.chunkBytes);
    const names = Object.keys(g.tensors);
    const reads: Array<[number, number, number, number, number]> = [];
    const done: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const off = i * this.chunkBytes;
      const id = this.nextJob++;
      reads.push([id, 0, g.offset + off, Math.min(this.chunkBytes, g.byteLength - off), firstChunk + i]);
      done.push(this.expect(id, g.offset + off, g, names));
    }
    if (verify) {
      const tensors = names.map((name): [string, number, number, number] => [name, g.offset + g.tensors[name].offset, g.tensors[name].byteLength, g.tensors[name].crc32]);
      this.nativeStore.readChecked(`layer ${g.layer}`, tensors, reads, false);
    } else for (const [id, file, offset, length, slot] of reads) this.nativeStore.read(id, file, offset, length, slot, false);
    await Promise.all(done);
    this.counters.bytesRead += g.byteLength;
  }

  /** The completion of read `id` (of group `g`, at file `offset`): resolves when its bytes are in. */
  private expect(id: number, offset: number, g: TrunkGroup, names: string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      this.jobs.set(id, (d) => {
        if (d.checksum) {
          const t = g.tensors[names[d.checksum.tensor]];
          const where = `layer ${g.layer}, offset ${g.offset + t.offset} (+${t.byteLength} bytes)${d.checksum.others ? `; ${d.checksum.others} more tensor(s) of the layer differ` : ""}`;
          reject(new ChecksumError(this.file, names[d.checksum.tensor], d.checksum.expected, d.checksum.got, where));
        } else if (d.status !== 0 || d.cancelled) reject(new MoeStreamError(`trunk layer ${g.layer}: ${d.cancelled ? "read cancelled (closed)" : d.message}`, "read"));
        else if (d.dataOffset !== 0) reject(new MoeStreamError(`trunk layer ${g.layer}: chunk at ${offset} is not 4 KiB-aligned in the file`));
        else resolve();
      });
      if (this.pending++ === 0) this.nativeStore.ref();
    });
  }

  private onDone(d: NativeReadDone): void {
    const cb = this.jobs.get(d.id);
    this.jobs.delete(d.id);
    if (--this.pending === 0 && !this.closed) this.nativeStore.unref();
    cb?.(d);
  }
}
