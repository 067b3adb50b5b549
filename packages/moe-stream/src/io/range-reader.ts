/**
 * RangeReader: arbitrary byte ranges of a few files, read with the store's own engine (O_DIRECT
 * aligned supersets, io_uring or pread threads, a fixed pre-faulted arena) into caller-chosen
 * slots. For tensors streamed in pieces that are not experts or trunk layers: a low-memory
 * preset's lm_head in row chunks and its embedding rows. Nothing goes through the page cache
 * (where the filesystem allows O_DIRECT), so the bytes a run touches are in its RSS and its reads
 * cost what the disk costs.
 *
 *   const r = RangeReader.open({ files: [shard], slotBytes: 64 << 20, slots: 2 });
 *   const bytes = await r.read(shard, offset, length, 0);   // a view into slot 0, valid until slot 0 is read again
 */
import { ArenaViews } from "./arena-views.js";
import { MoeStreamError, StoreStateError } from "../errors.js";
import { type NativeExpertStore, type NativeReadDone } from "../native.js";
import { splitPieces, supersetBytes } from "../sizing.js";
import { openNativeStore, type IoEngine, type IoEngineInUse } from "./io-engine.js";

export interface RangeReaderOptions {
  /** Files ranges may come from. */
  files: string[];
  /** The longest range any read will ask for (each slot holds it plus the alignment superset). */
  maxRangeBytes: number;
  /** Slots (>= 1): a read goes into the slot the caller names; two let one read overlap using the other. */
  slots: number;
  /** Each read is split into in-order pieces of this many bytes, all in flight at once (multiple of 4096; default 4 MiB; 0 = one read). */
  pieceBytes?: number;
  /** Reads in flight (default 8). */
  readers?: number;
  /** Try O_DIRECT (default true); falls back to buffered reads per file when refused. */
  direct?: boolean;
  ioEngine?: IoEngine;
  /** Fault the arena in at open (default true), so RSS holds it from the start. */
  prefault?: boolean;
}

export interface RangeReaderStats {
  reads: number;
  /** Bytes asked for, and bytes the device transferred (aligned supersets included). */
  bytesRequested: number;
  deviceBytes: number;
  directReads: number;
  bufferedReads: number;
  /** Wall time with at least one read in flight (ns). */
  busyNs: number;
  engine: IoEngineInUse;
  engineNote: string;
}

interface Job {
  left: number;
  failure: NativeReadDone | null;
  resolve: () => void;
  reject: (e: Error) => void;
}

export class RangeReader {
  readonly slotBytes: number;
  readonly slots: number;
  readonly arenaBytes: number;
  readonly pieceBytes: number;
  /** Reads in flight (the engine's queue depth). */
  readonly readers: number;
  private readonly nativeStore: NativeExpertStore;
  private readonly arena: ArenaViews;
  private readonly fileIndex = new Map<string, number>();
  private readonly fileAlign: number[];
  private readonly fileSize: number[];
  private readonly jobs = new Map<number, Job>();
  private readonly busy = new Set<number>();
  private nextJob = 1;
  private pending = 0;
  private closed = false;
  private requested = 0;
  /** The figures at close() (stats() stays usable after it). */
  private last: RangeReaderStats | null = null;

  static open(opts: RangeReaderOptions): RangeReader {
    return new RangeReader(opts);
  }

  /** Arena bytes open() allocates for these options (for planning). */
  static arenaBytesFor(maxRangeBytes: number, slots: number): number {
    return supersetBytes(maxRangeBytes) * slots;
  }

  private constructor(opts: RangeReaderOptions) {
    if (opts.files.length === 0) throw new MoeStreamError("RangeReader: no files given");
    if (!Number.isSafeInteger(opts.maxRangeBytes) || opts.maxRangeBytes < 1) throw new MoeStreamError(`RangeReader: maxRangeBytes must be a positive integer, got ${opts.maxRangeBytes}`);
    if (!Number.isInteger(opts.slots) || opts.slots < 1) throw new MoeStreamError(`RangeReader: slots must be an integer >= 1, got ${opts.slots}`);
    const piece = opts.pieceBytes ?? 4 << 20;
    if (!Number.isInteger(piece) || piece < 0 || piece % 4096 !== 0) throw new MoeStreamError(`RangeReader: pieceBytes must be 0 or a multiple of 4096, got ${piece}`);
    for (const f of opts.files) if (!this.fileIndex.has(f)) this.fileIndex.set(f, this.fileIndex.size);
    this.slotBytes = supersetBytes(opts.maxRangeBytes);
    this.slots = opts.slots;
    this.arenaBytes = this.slotBytes * this.slots;
    this.pieceBytes = piece;
    this.readers = opts.readers ?? 8;
    this.nativeStore = openNativeStore({
      files: [...this.fileIndex.keys()], slotBytes: this.slotBytes, slots: this.slots, readers: this.readers,
      direct: opts.direct ?? true, maxPrefetchInflight: 1, prefault: opts.prefault ?? true, ioEngine: opts.ioEngine,
      onDone: (d) => this.onDone(d),
    });
    this.arena = new ArenaViews(this.nativeStore, "RangeReader");
    const infos = [...this.fileIndex.keys()].map((_, i) => this.nativeStore.fileInfo(i));
    this.fileAlign = infos.map((x) => x.offsetAlign);
    this.fileSize = infos.map((x) => x.size);
    if (piece % Math.max(...this.fileAlign) !== 0) {
      this.nativeStore.close();
      throw new MoeStreamError(`RangeReader: pieceBytes ${piece} is not a multiple of the files' direct-I/O alignment ${Math.max(...this.fileAlign)}`);
    }
  }

  /** Whether each file is served by O_DIRECT. */
  fileInfo(): Array<{ file: string; size: number; direct: boolean; offsetAlign: number }> {
    return [...this.fileIndex.keys()].map((file, i) => ({ file, ...this.nativeStore.fileInfo(i) }));
  }

  /**
   * Reads file[offset, offset + length) into `slot`; resolves to a view of exactly those bytes,
   * valid until the next read into the same slot (or close()). One read per slot at a time.
   */
  async read(file: string, offset: number, length: number, slot: number): Promise<Uint8Array> {
    if (this.closed) throw new StoreStateError("RangeReader: used after close()");
    const f = this.fileIndex.get(file);
    if (f === undefined) throw new MoeStreamError(`RangeReader.read: ${file} is not one of the reader's files`);
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.slots) throw new MoeStreamError(`RangeReader.read: slot ${slot} is outside 0..${this.slots - 1}`);
    if (this.busy.has(slot)) throw new MoeStreamError(`RangeReader.read: slot ${slot} already has a read in flight`);
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 1 || offset + length > this.fileSize[f])
      throw new MoeStreamError(`RangeReader.read: bytes [${offset}, ${offset + length}) lie outside the ${this.fileSize[f]}-byte file ${file}`);
    const a = this.fileAlign[f];
    const base = Math.floor(offset / a) * a;
    const end = offset + length;
    if (Math.ceil(end / a) * a - base > this.slotBytes)
      throw new MoeStreamError(`RangeReader.read: ${length} bytes (plus alignment) do not fit a ${this.slotBytes}-byte slot`);
    // Pieces share the slot: file byte x lands at slot[x - base] whatever path serves each piece.
    const pieces = splitPieces(offset, length, this.pieceBytes, a);
    this.busy.add(slot);
    this.requested += length;
    try {
      await new Promise<void>((resolve, reject) => {
        const job: Job = { left: pieces.length, failure: null, resolve, reject };
        for (const [s, len] of pieces) {
          const id = this.nextJob++;
          if (this.nextJob > 2 ** 30) this.nextJob = 1;
          this.jobs.set(id, job);
          if (this.pending++ === 0) this.nativeStore.ref();
          this.nativeStore.read(id, f, s, len, slot, false, base);
        }
      });
    } finally {
      this.busy.delete(slot);
    }
    if (this.closed) throw new StoreStateError("RangeReader: closed while a read was in flight");
    return this.arena.bytes(slot * this.slotBytes, this.slotBytes, offset - base, length);
  }

  stats(): RangeReaderStats {
    if (this.last) return this.last;
    const n = this.nativeStore.stats();
    return {
      reads: n.reads,
      bytesRequested: this.requested,
      deviceBytes: n.deviceBytes,
      directReads: n.directReads,
      bufferedReads: n.bufferedReads,
      busyNs: n.busyNs,
      engine: n.engine,
      engineNote: n.engineNote,
    };
  }

  close(): void {
    if (this.closed) return;
    this.last = this.stats();
    this.closed = true;
    this.nativeStore.close();
    this.arena.clear();
  }

  private onDone(d: NativeReadDone): void {
    const job = this.jobs.get(d.id);
    this.jobs.delete(d.id);
    if (--this.pending === 0 && !this.closed) this.nativeStore.unref();
    if (!job) return;
    if ((d.cancelled || d.status !== 0) && !job.failure) job.failure = d;
    if (--job.left > 0) return;
    if (job.failure) job.reject(new MoeStreamError(`RangeReader: ${job.failure.cancelled ? "read cancelled (closed)" : job.failure.message || `errno ${job.failure.status}`}`, "read"));
    else job.resolve();
  }
}
