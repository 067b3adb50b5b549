/**
 * The expert store: every routed expert in ONE read, straight from the checkpoint shards (or a
 * packed expert file), into a fixed arena, with a per-layer cache under a byte budget.
 *
 * - Reads run on the store's own engine (queue depth = `readers`): io_uring, or pread threads
 *   where io_uring is blocked (see ../io/io-engine.ts); O_DIRECT with an aligned-superset read when the
 *   shard offset is unaligned, buffered + POSIX_FADV_DONTNEED where the filesystem refuses O_DIRECT.
 * - `request(layer, ids)` looks every id up first (scan resistance: nothing of this request is
 *   evicted to make room for the rest of it), then submits all misses at once in disk order and
 *   hands back one promise per expert, plus `completed()`, an async iterator in completion order,
 *   so expert j can be computed while j+1... are still being read.
 * - The cache is partitioned per layer (`slotsPerLayer`), so a cache smaller than one token's
 *   working set still keeps each layer's experts instead of thrashing. Inside a layer the
 *   `cachePolicy` (cache-policy.ts) decides: "lfu" (default) keeps the most requested experts, a
 *   miss joining only when requested more often than the least-requested resident one; "lru".
 * - A prefetched expert is counted as a prefetch hit, never as a resident hit.
 * - `warm(list)` fills the layers' caches ahead of use (in disk order, a few reads at a time, never
 *   evicting): where the cache holds every expert, decode then reads nothing from disk.
 *
 * Arena = (layers x slotsPerLayer + ioSlots) slots; ioSlots >= 1. A request whose misses exceed the
 * free slots is served in waves: the caller must `release()` each handle after using it.
 */
import { StoreStateError, ExpertReadError, BudgetError, CheckpointError, MoeStreamError, formatBytes } from "../errors.js";
import type { ExpertLocation } from "./checkpoint.js";
import { type NativeExpertStore, type NativeReadDone } from "../native.js";
import { splitPieces, supersetBytes } from "../sizing.js";
import { openNativeStore, type IoEngine, type IoEngineInUse } from "../io/io-engine.js";
import { ArenaViews } from "../io/arena-views.js";
import { admits, chooseVictim, EXPERT_CACHE_POLICIES, RequestCounts, type ExpertCachePolicy } from "./cache-policy.js";

export interface ExpertStoreOptions {
  /** Every expert the store may serve (all layers). */
  experts: ExpertLocation[];
  /** Cache slots per MoE layer (0 = no cache). */
  slotsPerLayer?: number;
  /** Which expert a full layer keeps (cache-policy.ts): "lfu" (default) or "lru". */
  cachePolicy?: ExpertCachePolicy;
  /** Streaming slots shared by all layers (>= 1; default 18: one K3 token's 16 experts + 2). */
  ioSlots?: number;
  /** Reads in flight (default 16): io_uring queue depth, or pread threads. */
  readers?: number;
  /**
   * "auto" (default): io_uring when the kernel allows it, else pread threads (the reason is in
   * stats().engineNote); "io_uring" fails the open when it is unavailable; "pread" never tries it.
   * K3_NOURING=1 makes "auto" mean "pread"; K3_SQPOLL=1 asks io_uring for SQPOLL.
   */
  ioEngine?: IoEngine;
  /** Try O_DIRECT (default true); falls back to buffered reads per file when refused. */
  direct?: boolean;
  /** Fault every arena page in at open so RSS reflects the budget from the start (default true). */
  prefault?: boolean;
  /**
   * Split each expert read into pieces of this many bytes (multiple of 4096; 0 = one read per
   * expert, the default). Pieces are queued in order, so with many readers expert j lands before
   * j+1 instead of all experts finishing together: better compute/I-O overlap at the same bandwidth.
   */
  pieceBytes?: number;
  /** Most streaming slots prefetched experts may hold at once (default ioSlots / 2). */
  prefetchSlots?: number;
  /** Cap on prefetch reads in flight, so demand reads always find a free reader (default readers/4). */
  maxPrefetchInflight?: number;
  /** If set, open() fails with a BudgetError (both numbers) when the arena would exceed it. */
  budgetBytes?: number;
}

export type ExpertSource = "resident" | "prefetched" | "read";

export interface WarmOptions {
  /** Reads the warm keeps in flight (default 2; at most the store's readers). */
  inflight?: number;
  /**
   * "low" (default): queued behind demand and lookahead reads (a cancelPrefetch() drops the queued
   * ones; they are queued again); "demand": as demand reads, for a load that waits for the warm.
   */
  priority?: "low" | "demand";
  /** After each expert lands. */
  onProgress?: (p: WarmProgress) => void;
}

export interface WarmProgress {
  /** Experts read into the cache so far. */
  experts: number;
  /** Experts asked for. */
  total: number;
  /** Their bytes. */
  bytes: number;
}

/** How a warm ended: `experts` were read into the cache; the others were already there, or their layer's cache was full. */
export interface WarmResult extends WarmProgress {
  /** Already resident or being read when the warm reached them, or their layer's cache was full. */
  skipped: number;
  /** Reads that failed (the first error's message in `error`): a later demand read reports them as usual. */
  failed: number;
  error: string | null;
  /** The store closed or cancel() was called before the end. */
  cancelled: boolean;
  seconds: number;
}

export interface WarmTask {
  /** Resolves when every expert was read, skipped or failed, or at cancel() / close(); never rejects. */
  readonly done: Promise<WarmResult>;
  progress(): WarmProgress;
  /** Stops issuing reads (those in flight still land in the cache). */
  cancel(): void;
}

interface Warming {
  queue: ExpertLocation[];
  next: number;
  inflight: number;
  cap: number;
  low: boolean;
  /** Warm reads in flight per layer (they count against the layer's cache room). */
  perLayer: Map<number, number>;
  result: WarmResult;
  t0: number;
  resolve: (r: WarmResult) => void;
  onProgress?: (p: WarmProgress) => void;
}

/** One expert's bytes in the arena; valid until release(). */
export interface ExpertHandle {
  layer: number;
  id: number;
  location: ExpertLocation;
  /** A zero-copy view of the expert's bytes (all its tensors, in checkpoint order). */
  bytes: Uint8Array;
  source: ExpertSource;
  /** Unique per completed read: the same bytes keep the same readId while they stay resident. */
  readId: number;
  release(): void;
}

export interface ExpertRequest {
  /** One promise per requested id, in the order given. */
  handles: Promise<ExpertHandle>[];
  /** The same handles as they become ready (resident ones first). */
  completed(): AsyncIterableIterator<ExpertHandle>;
}

export interface ExpertStoreStats {
  requests: number;
  residentHits: number;
  prefetchHits: number;
  misses: number;
  evictions: number;
  /** Misses that were read, used and freed because the full layer kept more requested experts ("lfu"). */
  admissionsDeclined: number;
  /** residentHits / requests. */
  residentHitRate: number;
  /** Bytes the caller asked for from disk (the experts' own bytes). */
  bytesRequested: number;
  /** Bytes the device transferred (includes the aligned superset). */
  deviceBytes: number;
  reads: number;
  directReads: number;
  bufferedReads: number;
  prefetchIssued: number;
  prefetchCancelled: number;
  /** Device bytes of warm() reads (part of deviceBytes: the aligned superset included). */
  warmBytes: number;
  /** Wall time with at least one read in flight (ns). */
  ioBusyNs: number;
  /** Summed per-read durations (ns), for the mean latency. */
  readNs: number;
  /** deviceBytes / ioBusyNs, in GB/s (1e9 B): the read rate while reads were in flight. */
  readGBps: number;
  /** The engine serving reads. */
  engine: IoEngineInUse;
  /** Why io_uring (or SQPOLL) is not in use although it was allowed; "" otherwise. */
  engineNote: string;
}

type SlotState = "free" | "reading" | "ready";

interface Entry {
  layer: number;
  id: number;
  slot: number;
  state: SlotState;
  cached: boolean;
  /**
   * Chosen to join its layer's cache by the request that reads it: already in the layer's LRU map
   * (its victim evicted), cached when that request releases it.
   */
  joining: boolean;
  prefetched: boolean;
  pins: number;
  dataOffset: number;
  readId: number;
  piecesLeft: number;
  failure: NativeReadDone | null;
  /** The warm that is reading it (null otherwise): it joins the cache when it lands unless a request holds it. */
  warm: Warming | null;
  /**
   * Its place in the warm's queue while it is cached and unused since the warm read it (-1
   * otherwise): such entries keep queue order in the LRU order, whatever order their reads landed in.
   */
  warmRank: number;
  loc: ExpertLocation;
  waiters: Array<{ resolve: (h: ExpertHandle) => void; reject: (e: Error) => void; source: ExpertSource }>;
  error?: Error;
}

const key = (layer: number, id: number) => layer * 1_048_576 + id;

export class ExpertStore {
  readonly slotBytes: number;
  readonly slotCount: number;
  readonly slotsPerLayer: number;
  readonly ioSlots: number;
  readonly arenaBytes: number;
  readonly files: string[];
  readonly pieceBytes: number;
  /** Reads in flight (the engine's queue depth). */
  readonly readers: number;
  readonly prefetchSlots: number;
  private readonly fileAlign: number[];
  private readonly nativeStore: NativeExpertStore;
  private readonly arena: ArenaViews;
  private readonly locations = new Map<number, ExpertLocation>();
  private readonly fileIndex = new Map<string, number>();
  private readonly entries = new Map<number, Entry>();
  /** Per layer: cached entries in LRU order (oldest first). */
  private readonly lru = new Map<number, Map<number, Entry>>();
  readonly cachePolicy: ExpertCachePolicy;
  /** Per layer: how often each expert was requested (the "lfu" policy's counts). */
  private readonly counts = new Map<number, RequestCounts>();
  private readonly freeSlots: number[] = [];
  /** Entries waiting for a free slot (a request with more misses than free slots), oldest first. */
  private readonly slotWaiters: Entry[] = [];
  private readonly jobs = new Map<number, Entry>();
  private nextJob = 1;
  private readSeq = 0;
  private pending = 0;
  private closed = false;
  private warming: Warming | null = null;
  private readonly counters = {
    requests: 0, residentHits: 0, prefetchHits: 0, misses: 0, evictions: 0, admissionsDeclined: 0, bytesRequested: 0,
    prefetchIssued: 0, prefetchCancelled: 0, warmBytes: 0, readNs: 0,
  };

  /** The arena size open() would allocate for these options (for planning). */
  static arenaBytesFor(opts: ExpertStoreOptions): { slotBytes: number; slots: number; bytes: number } {
    const layers = new Set(opts.experts.map((e) => e.layer)).size;
    const maxLen = opts.experts.reduce((m, e) => Math.max(m, e.byteLength), 0);
    const slotBytes = supersetBytes(maxLen);
    const slots = layers * (opts.slotsPerLayer ?? 0) + (opts.ioSlots ?? 18);
    return { slotBytes, slots, bytes: slotBytes * slots };
  }

  static open(opts: ExpertStoreOptions): ExpertStore {
    return new ExpertStore(opts);
  }

  private constructor(opts: ExpertStoreOptions) {
    if (opts.experts.length === 0) throw new MoeStreamError("ExpertStore: no experts given");
    const slotsPerLayer = opts.slotsPerLayer ?? 0;
    const cachePolicy = opts.cachePolicy ?? "lfu";
    if (!EXPERT_CACHE_POLICIES.includes(cachePolicy)) throw new MoeStreamError(`ExpertStore: cachePolicy must be one of ${EXPERT_CACHE_POLICIES.join(", ")}, got ${JSON.stringify(cachePolicy)}`);
    const ioSlots = opts.ioSlots ?? 18;
    if (!Number.isInteger(slotsPerLayer) || slotsPerLayer < 0) throw new MoeStreamError(`ExpertStore: slotsPerLayer must be >= 0, got ${slotsPerLayer}`);
    if (!Number.isInteger(ioSlots) || ioSlots < 1) throw new MoeStreamError(`ExpertStore: ioSlots must be >= 1, got ${ioSlots}`);
    const { slotBytes, slots, bytes } = ExpertStore.arenaBytesFor(opts);
    if (opts.budgetBytes !== undefined && bytes > opts.budgetBytes)
      throw new BudgetError(`ExpertStore arena (${slots} slots of ${formatBytes(slotBytes)})`, bytes, opts.budgetBytes);
    for (const e of opts.experts) {
      if (!this.fileIndex.has(e.file)) this.fileIndex.set(e.file, this.fileIndex.size);
      this.locations.set(key(e.layer, e.id), e);
    }
    this.files = [...this.fileIndex.keys()];
    const readers = opts.readers ?? 16;
    this.nativeStore = openNativeStore({
      files: this.files, slotBytes, slots, readers, direct: opts.direct ?? true,
      maxPrefetchInflight: opts.maxPrefetchInflight ?? Math.max(1, readers >> 2), prefault: opts.prefault ?? true,
      ioEngine: opts.ioEngine, onDone: (d) => this.onDone(d),
    });
    this.readers = readers;
    this.slotBytes = slotBytes;
    this.slotCount = slots;
    this.slotsPerLayer = slotsPerLayer;
    this.cachePolicy = cachePolicy;
    this.ioSlots = ioSlots;
    this.arenaBytes = bytes;
    this.arena = new ArenaViews(this.nativeStore, "ExpertStore", undefined, bytes);
    this.fileAlign = this.files.map((_, i) => this.nativeStore.fileInfo(i).offsetAlign);
    // Hostile or stale locations fail here, naming the expert, instead of mid-generation.
    const sizes = this.files.map((_, i) => this.nativeStore.fileInfo(i).size);
    for (const e of opts.experts) {
      const size = sizes[this.fileIndex.get(e.file)!];
      if (!Number.isSafeInteger(e.offset) || e.offset < 0 || !Number.isSafeInteger(e.byteLength) || e.byteLength <= 0 || e.offset + e.byteLength > size) {
        this.nativeStore.close();
        throw new CheckpointError(e.file, `layer ${e.layer} expert ${e.id}: bytes [${e.offset}, ${e.offset + e.byteLength}) lie outside the ${size}-byte file (truncated shard?)`);
      }
    }
    const piece = opts.pieceBytes ?? 0;
    if (!Number.isInteger(piece) || piece < 0 || piece % 4096 !== 0 || this.fileAlign.some((a) => piece % a !== 0))
      throw new MoeStreamError(`ExpertStore: pieceBytes must be 0 or a multiple of 4096 and of every file's alignment, got ${piece}`);
    this.pieceBytes = piece;
    this.prefetchSlots = opts.prefetchSlots ?? Math.floor(ioSlots / 2);
    for (let s = slots - 1; s >= 0; s--) this.freeSlots.push(s);
  }

  /** Whether each file is served by O_DIRECT, and the alignment it asked for. */
  fileInfo(): Array<{ file: string; size: number; direct: boolean; offsetAlign: number; memAlign: number }> {
    return this.files.map((file, i) => ({ file, ...this.nativeStore.fileInfo(i) }));
  }

  location(layer: number, id: number): ExpertLocation {
    const loc = this.locations.get(key(layer, id));
    if (!loc) throw new MoeStreamError(`ExpertStore: layer ${layer} has no expert ${id}`);
    return loc;
  }

  /** Is the expert resident in the layer's cache right now (not counting prefetches)? */
  isResident(layer: number, id: number): boolean {
    const e = this.entries.get(key(layer, id));
    return !!e && e.cached && e.state === "ready";
  }

  /**
   * Gets the experts `ids` of `layer` (unique ids). Hits are pinned first; then which of the others
   * will join the cache is decided in `ids` order (chooseJoiners); then every miss is submitted at
   * once in (file, offset) order.
   */
  request(layer: number, ids: ArrayLike<number>): ExpertRequest {
    this.assertOpen();
    const list = Array.from(ids);
    if (new Set(list).size !== list.length) throw new MoeStreamError(`ExpertStore.request: duplicate expert ids in layer ${layer}`);
    const handles: Promise<ExpertHandle>[] = new Array(list.length);
    const ready: ExpertHandle[] = [];
    const readyWaiters: Array<() => void> = [];
    const notify = () => readyWaiters.splice(0).forEach((f) => f());
    let failed: Error | null = null;
    const misses: Array<{ loc: ExpertLocation; index: number }> = [];
    // 1. Look everything up and pin hits before any eviction can happen.
    const locs = list.map((id) => this.location(layer, id)); // validate every id before any side effect
    this.countsOf(layer).record(list);
    for (let i = 0; i < list.length; i++) {
      const loc = locs[i];
      this.counters.requests++;
      const e = this.entries.get(key(layer, loc.id));
      if (e && e.state !== "free") {
        // A prefetched expert is not a resident hit; joining another request's read is a miss.
        const source: ExpertSource = e.cached ? "resident" : e.prefetched ? "prefetched" : "read";
        if (source === "resident") this.counters.residentHits++;
        else if (source === "prefetched") this.counters.prefetchHits++;
        else this.counters.misses++;
        e.pins++;
        e.warmRank = -1;
        this.touch(e);
        handles[i] = this.whenReady(e, source);
      } else {
        this.counters.misses++;
        misses.push({ loc, index: i });
      }
    }
    // 2. Which of the experts not cached join the cache (victims evicted now, freeing their slots).
    const joiners = this.chooseJoiners(layer, list.filter((id) => {
      const e = this.entries.get(key(layer, id));
      return !e || e.state === "free" || (!e.cached && !e.joining);
    }));
    // 3. Submit all misses in disk order (slot permitting; the rest as slots free up).
    misses.sort((a, b) => (this.fileIndex.get(a.loc.file)! - this.fileIndex.get(b.loc.file)!) || a.loc.offset - b.loc.offset);
    for (const m of misses) handles[m.index] = this.readMiss(m.loc);
    if (joiners.length > 0) {
      const l = this.lruOf(layer);
      for (const id of joiners) {
        const e = this.entries.get(key(layer, id))!;
        e.joining = true;
        l.set(id, e);
      }
    }
    for (const h of handles)
      h.then(
        (x) => {
          ready.push(x);
          notify();
        },
        (err) => {
          failed ??= err;
          notify();
        },
      );
    const total = list.length;
    return {
      handles,
      completed: async function* () {
        let given = 0;
        while (given < total) {
          if (given < ready.length) {
            yield ready[given++];
            continue;
          }
          if (failed) throw failed;
          await new Promise<void>((r) => readyWaiters.push(r));
        }
      } as () => AsyncIterableIterator<ExpertHandle>,
    };
  }

  /**
   * Starts low-priority reads of experts the caller expects to need soon (e.g. the next layer's
   * router applied ahead). Capped so demand reads keep slots and readers; cancel with cancelPrefetch().
   * Returns how many reads were issued.
   */
  prefetch(layer: number, ids: ArrayLike<number>): number {
    this.assertOpen();
    let issued = 0;
    let held = 0;
    for (const e of this.entries.values()) if (e.prefetched && !e.cached) held++;
    for (const id of Array.from(ids)) {
      const loc = this.location(layer, id);
      if (this.entries.has(key(layer, id))) continue;
      // Never take a slot a waiting demand read needs, nor more than the prefetch share.
      if (this.slotWaiters.length > 0 || this.freeSlots.length === 0 || held >= this.prefetchSlots) break;
      const slot = this.freeSlots.pop()!;
      const e = this.newEntry(loc, slot, true);
      this.submit(e, true);
      issued++;
      held++;
    }
    this.counters.prefetchIssued += issued;
    return issued;
  }

  /**
   * Reads `experts` into their layers' caches ahead of use, in (file, offset) order, `inflight` at
   * a time; an expert already resident or being read is skipped, and so is one whose layer's cache
   * is full (a warm never evicts). One warm at a time.
   */
  warm(experts: ArrayLike<{ layer: number; id: number }>, opts: WarmOptions = {}): WarmTask {
    this.assertOpen();
    if (this.warming) throw new StoreStateError("ExpertStore.warm: a warm is already running");
    const cap = opts.inflight ?? 2;
    if (!Number.isInteger(cap) || cap < 1) throw new MoeStreamError(`ExpertStore.warm: inflight must be an integer >= 1, got ${cap}`);
    const queue = Array.from(experts, (x) => this.location(x.layer, x.id));
    queue.sort((a, b) => (this.fileIndex.get(a.file)! - this.fileIndex.get(b.file)!) || a.offset - b.offset);
    let resolve!: (r: WarmResult) => void;
    const done = new Promise<WarmResult>((r) => (resolve = r));
    const w: Warming = {
      queue, next: 0, inflight: 0, cap: Math.min(cap, this.readers), low: (opts.priority ?? "low") === "low", perLayer: new Map(),
      result: { experts: 0, total: queue.length, bytes: 0, skipped: 0, failed: 0, error: null, cancelled: false, seconds: 0 },
      t0: performance.now(), resolve, onProgress: opts.onProgress,
    };
    this.warming = w;
    this.pumpWarm();
    return {
      done,
      progress: () => ({ experts: w.result.experts, total: w.result.total, bytes: w.result.bytes }),
      cancel: () => this.endWarm(w, true),
    };
  }

  /** Drops queued prefetch reads and frees prefetched experts nobody has asked for. */
  cancelPrefetch(): number {
    if (this.closed) return 0;
    const n = this.nativeStore.cancelPrefetch();
    for (const e of [...this.entries.values()])
      if (e.prefetched && e.state === "ready" && e.pins === 0 && !e.cached) this.freeEntry(e);
    return n;
  }

  stats(): ExpertStoreStats {
    const n = this.closed ? null : this.nativeStore.stats();
    const c = this.counters;
    const deviceBytes = n?.deviceBytes ?? this.lastNative.deviceBytes;
    const busy = n?.busyNs ?? this.lastNative.busyNs;
    return {
      ...c,
      residentHitRate: c.requests ? c.residentHits / c.requests : 0,
      readGBps: busy > 0 ? deviceBytes / busy : 0,
      deviceBytes,
      reads: n?.reads ?? this.lastNative.reads,
      directReads: n?.directReads ?? this.lastNative.directReads,
      bufferedReads: n?.bufferedReads ?? this.lastNative.bufferedReads,
      ioBusyNs: n?.busyNs ?? this.lastNative.busyNs,
      engine: n?.engine ?? this.lastNative.engine,
      engineNote: n?.engineNote ?? this.lastNative.engineNote,
    };
  }

  /**
   * Test hook: the n-th next read fails with EIO, returns half its bytes ("short"), or has its
   * O_DIRECT read refused with EINVAL ("direct-einval": the file falls back to buffered reads), or
   * ("split", io_uring) moves in 4 KiB SQEs, completing only through resubmissions of the rest.
   */
  injectFault(afterReads: number, kind: "eio" | "short" | "direct-einval" | "split"): void {
    this.assertOpen();
    this.nativeStore.injectFault(afterReads, kind);
  }

  /** Waits for reads in flight, stops the readers, closes the files. Pending requests reject. */
  close(): void {
    if (this.closed) return;
    const n = this.nativeStore.stats();
    this.lastNative = { deviceBytes: n.deviceBytes, reads: n.reads, directReads: n.directReads, bufferedReads: n.bufferedReads, busyNs: n.busyNs, engine: n.engine, engineNote: n.engineNote };
    this.closed = true;
    if (this.warming) this.endWarm(this.warming, true);
    this.nativeStore.close(); // reads in flight finish; queued ones come back cancelled
    this.arena.clear(); // the arena is freed once the handles still held are collected
    const err = () => new StoreStateError("ExpertStore: closed while the read was waiting for a slot");
    for (const e of this.slotWaiters.splice(0)) {
      this.entries.delete(key(e.layer, e.id));
      for (const w of e.waiters.splice(0)) w.reject(err());
    }
  }

  private lastNative = { deviceBytes: 0, reads: 0, directReads: 0, bufferedReads: 0, busyNs: 0, engine: "pread" as IoEngineInUse, engineNote: "" };

  // ---------------------------------------------------------------- internals

  private assertOpen(): void {
    if (this.closed) throw new StoreStateError("ExpertStore: used after close()");
  }

  private newEntry(loc: ExpertLocation, slot: number, prefetched: boolean): Entry {
    const e: Entry = { layer: loc.layer, id: loc.id, slot, state: "reading", cached: false, joining: false, prefetched, pins: prefetched ? 0 : 1, dataOffset: 0, readId: 0, piecesLeft: 0, failure: null, warm: null, warmRank: -1, loc, waiters: [] };
    this.entries.set(key(loc.layer, loc.id), e);
    return e;
  }

  private readMiss(loc: ExpertLocation): Promise<ExpertHandle> {
    const slot = this.takeSlot();
    if (slot !== undefined) {
      const e = this.newEntry(loc, slot, false);
      const p = this.whenReady(e, "read");
      this.submit(e, false);
      return p;
    }
    // No slot yet: reserve the entry so a second request waits on the same read, then wait.
    const e = this.newEntry(loc, -1, false);
    const p = this.whenReady(e, "read");
    this.slotWaiters.push(e);
    return p;
  }

  /** A free slot, else the slot of an unused prefetched expert; undefined when all are busy. */
  private takeSlot(): number | undefined {
    if (this.freeSlots.length > 0) return this.freeSlots.pop();
    for (const e of this.entries.values())
      if (e.prefetched && !e.cached && e.state === "ready" && e.pins === 0) {
        const slot = e.slot;
        this.entries.delete(key(e.layer, e.id));
        return slot;
      }
    return undefined;
  }

  /** `prefetch`: low priority (lookahead or a background warm); bytesRequested counts demand reads only. */
  private submit(e: Entry, prefetch: boolean): void {
    if (this.pending === 0) this.nativeStore.ref();
    this.counters.bytesRequested += prefetch || e.warm ? 0 : e.loc.byteLength;
    const file = this.fileIndex.get(e.loc.file)!;
    const { offset, byteLength } = e.loc;
    e.failure = null;
    if (this.pieceBytes === 0 || byteLength <= this.pieceBytes) {
      e.piecesLeft = 1;
      e.dataOffset = -1; // reported by the read (the aligned start depends on the path that serves it)
      this.queueRead(e, file, offset, byteLength, prefetch, undefined);
      return;
    }
    // Pieces share one slot: file byte x lands at slot[x - base] whatever path serves each piece.
    const a = this.fileAlign[file];
    const base = Math.floor(offset / a) * a;
    const pieces = splitPieces(offset, byteLength, this.pieceBytes, a);
    e.piecesLeft = pieces.length;
    e.dataOffset = offset - base;
    for (const [s, len] of pieces) this.queueRead(e, file, s, len, prefetch, base);
  }

  private queueRead(e: Entry, file: number, offset: number, length: number, prefetch: boolean, base: number | undefined): void {
    const id = this.nextJob++;
    if (this.nextJob > 2 ** 30) this.nextJob = 1;
    this.jobs.set(id, e);
    this.pending++;
    this.nativeStore.read(id, file, offset, length, e.slot, prefetch, base);
  }

  private onDone(d: NativeReadDone): void {
    const e = this.jobs.get(d.id);
    this.jobs.delete(d.id);
    if (--this.pending === 0 && !this.closed) this.nativeStore.unref();
    if (!e) return;
    this.counters.readNs += Math.max(0, d.endNs - d.startNs);
    if (e.warm) this.counters.warmBytes += d.deviceBytes;
    // A read that finished while close() ran: the arena can no longer be viewed, so it fails as cancelled.
    if ((d.cancelled || d.status !== 0 || this.closed) && !e.failure) e.failure = this.closed && !d.cancelled && d.status === 0 ? { ...d, cancelled: true } : d;
    if (e.dataOffset < 0 && d.status === 0) e.dataOffset = d.dataOffset;
    if (--e.piecesLeft > 0) return;
    if (e.failure) return this.fail(e, e.failure);
    e.state = "ready";
    e.readId = ++this.readSeq;
    for (const w of e.waiters.splice(0)) w.resolve(this.handle(e, w.source));
    if (e.warm) this.warmLanded(e, null);
  }

  private fail(e: Entry, d: NativeReadDone): void {
    const err = d.cancelled
      ? new StoreStateError(`layer ${e.layer} expert ${e.id}: read cancelled (${this.closed ? "store closed" : "prefetch cancelled"})`)
      : new ExpertReadError(e.layer, e.id, d.status, d.message);
    if (d.cancelled && e.prefetched) this.counters.prefetchCancelled++;
    const waiters = e.waiters.splice(0);
    // A prefetched (or warm) entry that a demand request joined: re-read it as demand instead of failing.
    const rejoin = d.cancelled && (e.prefetched || e.warm !== null) && waiters.length > 0 && !this.closed;
    if (e.warm) this.warmLanded(e, !d.cancelled ? err : rejoin ? "rejoined" : "cancelled");
    if (rejoin) {
      e.prefetched = false;
      e.waiters = waiters;
      this.submit(e, false);
      return;
    }
    this.freeEntry(e); // a joiner leaves the layer's map: the cache is one short until the next miss
    for (const w of waiters) w.reject(err);
  }

  private whenReady(e: Entry, source: ExpertSource): Promise<ExpertHandle> {
    if (e.state === "ready") return Promise.resolve(this.handle(e, source));
    return new Promise((resolve, reject) => e.waiters.push({ resolve, reject, source }));
  }

  private handle(e: Entry, source: ExpertSource): ExpertHandle {
    const bytes = this.arena.bytes(e.slot * this.slotBytes, this.slotBytes, e.dataOffset, e.loc.byteLength);
    let released = false;
    return {
      layer: e.layer,
      id: e.id,
      location: e.loc,
      bytes,
      source,
      readId: e.readId,
      release: () => {
        if (released) return;
        released = true;
        this.unpin(e);
      },
    };
  }

  private touch(e: Entry): void {
    if (!e.cached && !e.joining) return;
    const l = this.lru.get(e.layer)!;
    l.delete(e.id);
    l.set(e.id, e);
  }

  /** After its last user: cached if its request chose it to join (see chooseJoiners), else freed. */
  private unpin(e: Entry): void {
    if (--e.pins > 0) return;
    e.prefetched = false;
    if (e.joining) {
      if (this.closed) return this.freeEntry(e);
      e.joining = false;
      e.cached = true;
      return;
    }
    if (e.cached || e.warm) return; // a warm read still in flight joins the cache when it lands
    this.freeEntry(e);
  }

  /**
   * Which of a request's experts that are not cached (`candidates`, in request order) join the
   * layer's cache once the request releases them. Decided when the request is made, evicting each
   * joiner's victim (cache-policy.ts) at once: the cache then holds the same experts whatever order
   * the reads complete and are computed in, exactly as cache-sim.ts replays a trace.
   */
  private chooseJoiners(layer: number, candidates: number[]): number[] {
    const joiners: number[] = [];
    if (this.slotsPerLayer === 0 || candidates.length === 0) return joiners;
    const l = this.lruOf(layer);
    const counts = this.countsOf(layer);
    for (const id of candidates) {
      if (l.size + joiners.length < this.slotsPerLayer) {
        joiners.push(id);
        continue;
      }
      // Only cached experts nobody holds can go: this request's hits are pinned, joiners not yet in the map.
      const victim = chooseVictim(this.cachePolicy, l.entries(), (_, v) => v.cached && v.pins === 0, counts)?.[1];
      if (!victim) continue;
      if (!admits(this.cachePolicy, id, victim.id, counts)) {
        this.counters.admissionsDeclined++;
        continue;
      }
      l.delete(victim.id);
      victim.cached = false;
      this.counters.evictions++;
      this.freeEntry(victim);
      joiners.push(id);
    }
    return joiners;
  }

  /** A warmed entry nobody holds joins its layer's cache if there is room (a warm never evicts), else is freed. */
  private admitWarmed(e: Entry): void {
    if (e.cached || e.joining) return;
    const l = this.lruOf(e.layer);
    if (this.closed || l.size >= this.slotsPerLayer) return this.freeEntry(e);
    e.cached = true;
    // Before the unused warmed experts queued after it: the LRU order is then the warm's, not the reads' completion order.
    const order = [...l.values()];
    const at = order.findIndex((x) => x.warmRank > e.warmRank);
    if (at < 0) {
      l.set(e.id, e);
      return;
    }
    order.splice(at, 0, e);
    l.clear();
    for (const x of order) l.set(x.id, x);
  }

  private lruOf(layer: number): Map<number, Entry> {
    let l = this.lru.get(layer);
    if (!l) this.lru.set(layer, (l = new Map()));
    return l;
  }

  /** Each layer's request counts so far (the "lfu" policy's, seeds included), to persist between runs. */
  requestCounts(): Map<number, Map<number, number>> {
    return new Map([...this.counts].map(([layer, c]) => [layer, new Map(c.entries())]));
  }

  /** Adds earlier runs' request counts of `layer` (validated ids; counts finite and >= 0). */
  seedCounts(layer: number, counts: Iterable<[number, number]>): void {
    this.assertOpen();
    const c = this.countsOf(layer);
    for (const [id, n] of counts) {
      this.location(layer, id);
      if (!Number.isFinite(n) || n < 0) throw new MoeStreamError(`ExpertStore.seedCounts: layer ${layer} expert ${id}: count ${n} is not a finite number >= 0`);
      c.add(id, n);
    }
  }

  private countsOf(layer: number): RequestCounts {
    let c = this.counts.get(layer);
    if (!c) this.counts.set(layer, (c = new RequestCounts()));
    return c;
  }

  private freeEntry(e: Entry): void {
    this.entries.delete(key(e.layer, e.id));
    if (e.cached || e.joining) this.lru.get(e.layer)?.delete(e.id);
    e.joining = false;
    this.releaseSlot(e.slot);
  }

  private releaseSlot(slot: number): void {
    if (slot < 0) return;
    this.freeSlots.push(slot);
    if (this.closed) return; // close() already failed every waiter
    const e = this.slotWaiters.shift();
    if (e) {
      e.slot = this.takeSlot()!;
      this.submit(e, false);
    }
    this.pumpWarm();
  }

  // ---------------------------------------------------------------- warm

  /** Issues warm reads while there is room: a free slot no demand read waits for, and cache room in the layer. */
  private pumpWarm(): void {
    const w = this.warming;
    if (!w || this.closed) return;
    while (w.inflight < w.cap && w.next < w.queue.length) {
      if (this.slotWaiters.length > 0 || this.freeSlots.length === 0) return; // resumes when a slot frees
      const loc = w.queue[w.next++];
      const inLayer = (this.lru.get(loc.layer)?.size ?? 0) + (w.perLayer.get(loc.layer) ?? 0);
      if (this.entries.has(key(loc.layer, loc.id)) || inLayer >= this.slotsPerLayer) {
        w.result.skipped++;
        continue;
      }
      const e = this.newEntry(loc, this.freeSlots.pop()!, false);
      e.pins = 0;
      e.warm = w;
      e.warmRank = w.next - 1;
      w.inflight++;
      w.perLayer.set(loc.layer, (w.perLayer.get(loc.layer) ?? 0) + 1);
      this.submit(e, w.low);
    }
    if (w.inflight === 0 && w.next >= w.queue.length) this.endWarm(w, false);
  }

  /** A warm read ended: landed (error null), cancelled (queued again), taken over by a demand read, or failed. */
  private warmLanded(e: Entry, error: Error | "cancelled" | "rejoined" | null): void {
    const w = e.warm!;
    e.warm = null;
    if (error === null && e.pins === 0) this.admitWarmed(e);
    if (this.warming !== w) return; // cancelled meanwhile: the read still lands in the cache
    w.inflight--;
    w.perLayer.set(e.layer, w.perLayer.get(e.layer)! - 1);
    if (error === null) {
      w.result.experts++;
      w.result.bytes += e.loc.byteLength;
      w.onProgress?.({ experts: w.result.experts, total: w.result.total, bytes: w.result.bytes });
    } else if (error === "cancelled") {
      if (!this.closed) w.queue.push(e.loc);
    } else if (error === "rejoined") {
      w.result.skipped++;
    } else {
      w.result.failed++;
      w.result.error ??= error.message;
    }
    // After fail() has freed this entry's slot: pump from a fresh call stack.
    queueMicrotask(() => this.pumpWarm());
  }

  private endWarm(w: Warming, cancelled: boolean): void {
    if (this.warming !== w) return;
    this.warming = null;
    w.result.cancelled = cancelled;
    w.result.seconds = (performance.now() - w.t0) / 1000;
    w.resolve({ ...w.result });
  }
}
