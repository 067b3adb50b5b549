/**
 * WriteQueue: positioned writes kept in flight on libuv's thread pool, so the producer of the
 * bytes never waits for the disk unless `inFlight` writes are already outstanding, and the disk
 * never waits for the producer while the queue is full.
 *
 * Pieces pushed at contiguous positions are gathered into one `writev` of up to `batchBytes`,
 * cut at multiples of `batchBytes` in the file (aligned writes whatever the pieces' sizes; a piece
 * larger than a batch is split, never copied). A piece must stay unchanged until `drain()` settles.
 * The first failed write is reported by the next `push` or by `drain`.
 */
import { closeSync, fsyncSync, openSync, rmSync, writev } from "node:fs";
import { ioError } from "./errors.js";

/** Default batch: 32 MiB (8-64 MiB writes keep this virtio disk's queue full). */
export const DEFAULT_BATCH_BYTES = 32 << 20;
/** iovecs per writev (IOV_MAX is 1024 on Linux). */
const MAX_IOV = 512;

interface Batch {
  views: Uint8Array[];
  position: number;
  bytes: number;
}

/**
 * What a SafetensorsWriter writes its data through: a WriteQueue, or a sequential writer given as
 * WriterOptions.queue (e.g. @k3/moe-stream's O_DIRECT DirectFileWriter). `push` may keep `view`
 * until drain() settles; `close` (optional) runs once, after the last drain, before the writer
 * syncs and closes its own fd.
 */
export interface ByteQueue {
  push(view: Uint8Array, position: number): Promise<void>;
  drain(): Promise<void>;
  readonly idle: boolean;
  close?(): void;
}

/** Makes the queue of one file: `fd` is the writer's (buffered) descriptor of `file`. */
export type QueueFactory = (fd: number, file: string) => ByteQueue;

export interface WriteQueueOptions {
  /** Writes outstanding at once (>= 1; default 4). */
  inFlight?: number;
  /** Bytes per write (>= 4096; default 32 MiB). */
  batchBytes?: number;
}

export class WriteQueue implements ByteQueue {
  private readonly inFlight: number;
  private readonly batchBytes: number;
  private batch: Batch | null = null;
  private running = 0;
  private failure: unknown = null;
  private waiters: Array<() => void> = [];
  /** Bytes handed to the kernel so far. */
  written = 0;

  constructor(
    private readonly fd: number,
    private readonly file: string,
    options: WriteQueueOptions = {},
  ) {
    this.inFlight = Math.max(1, Math.floor(options.inFlight ?? 4));
    this.batchBytes = Math.max(4096, Math.floor(options.batchBytes ?? DEFAULT_BATCH_BYTES));
  }

  /** True when nothing is queued or in flight. */
  get idle(): boolean {
    return this.running === 0 && this.batch === null;
  }

  /**
   * Queues `view` for `position`; resolves when the queue has room for more (at once when fewer
   * than `inFlight` writes are outstanding). Rejects with the first failed write.
   */
  async push(view: Uint8Array, position: number): Promise<void> {
    this.check();
    let off = 0;
    while (off < view.length) {
      const at = position + off;
      if (this.batch && (this.batch.position + this.batch.bytes !== at || this.batch.views.length >= MAX_IOV)) this.submit();
      const boundary = (Math.floor(at / this.batchBytes) + 1) * this.batchBytes;
      const take = Math.min(view.length - off, boundary - at);
      const part = off === 0 && take === view.length ? view : view.subarray(off, off + take);
      if (!this.batch) this.batch = { views: [], position: at, bytes: 0 };
      this.batch.views.push(part);
      this.batch.bytes += take;
      off += take;
      if (at + take === boundary) this.submit();
      while (this.running >= this.inFlight) {
        await new Promise<void>((res) => this.waiters.push(res));
        this.check();
      }
    }
  }

  /** Submits what is gathered and waits for every write; rejects with the first failure. */
  async drain(): Promise<void> {
    if (this.batch) this.submit();
    while (this.running > 0) await new Promise<void>((res) => this.waiters.push(res));
    this.check();
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private submit(): void {
    const b = this.batch;
    this.batch = null;
    if (!b || b.bytes === 0) return;
    this.running++;
    this.write(b.views, b.position, b.bytes, b);
  }

  /** One writev; a short write continues with the rest. */
  private write(views: Uint8Array[], position: number, bytes: number, b: Batch): void {
    writev(this.fd, views, position, (err, n) => {
      if (!err && n < bytes && n > 0) {
        this.written += n;
        let skip = n;
        const rest: Uint8Array[] = [];
        for (const v of views) {
          if (skip >= v.length) skip -= v.length;
          else {
            rest.push(skip > 0 ? v.subarray(skip) : v);
            skip = 0;
          }
        }
        return this.write(rest, position + n, bytes - n, b);
      }
      if (err || n === 0) this.failure ??= ioError(this.file, `writing ${b.bytes} bytes at ${b.position}`, err ?? new Error("write returned 0 bytes"));
      else this.written += n;
      this.running--;
      const w = this.waiters;
      this.waiters = [];
      for (const res of w) res();
    });
  }
}

/**
 * Seconds to write `bytes` of one repeated 32 MiB pattern to `file` through a WriteQueue, then
 * fsync; the file is removed after. The write ceiling the writer's own benches compare against.
 */
export async function timeQueuedWrite(file: string, bytes: number, opts: WriteQueueOptions = {}): Promise<number> {
  const piece = Buffer.alloc(DEFAULT_BATCH_BYTES, 0x5a);
  const t0 = performance.now();
  const fd = openSync(file, "w");
  try {
    const q = new WriteQueue(fd, file, { inFlight: opts.inFlight ?? 4, batchBytes: opts.batchBytes ?? DEFAULT_BATCH_BYTES });
    for (let done = 0; done < bytes; ) {
      const n = Math.min(piece.length, bytes - done);
      await q.push(piece.subarray(0, n), done);
      done += n;
    }
    await q.drain();
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  const s = (performance.now() - t0) / 1000;
  rmSync(file, { force: true });
  return s;
}
