/**
 * DirectFileWriter: a file written front to back through O_DIRECT, from aligned staging buffers.
 *
 * Buffered writes cost this VM ~1.6 s of kernel CPU per GB (page-cache copy, dirty tracking,
 * writeback) and, on 2 cores, that CPU is what the producer of the bytes needs. Here the caller's
 * pieces are copied into 4 KiB-aligned staging buffers (native k3_arena_alloc memory, see
 * `alignedBuffer`), and each full buffer goes to the disk with one O_DIRECT pwrite on libuv's
 * thread pool while the next one fills: copying (the "generation" of a synth checkpoint is mostly
 * that copy) and writing overlap, with up to `buffers` writes in flight.
 *
 * - The file is written in order: every push continues where the last one ended.
 * - Tail: the last buffer is written rounded up to the O_DIRECT alignment (zero padding) and the
 *   file is cut back to its true length with ftruncate. drain() does this at any point; later pushes
 *   continue in the same buffer, which is rewritten whole at its aligned start.
 * - Fallback: when the filesystem refuses O_DIRECT (tmpfs answers the open, or a write, with
 *   EINVAL) every later write is buffered on the caller's fd; `fallback` says why.
 * - Durability is the caller's: it fsyncs its own fd after drain() (O_DIRECT bypasses the page
 *   cache, not the drive cache or the inode's metadata).
 *
 * The same interface as @k3/safetensors' WriteQueue (push / drain / idle / close), so a
 * SafetensorsWriter takes it through its `queue` option.
 */
import { closeSync, constants, ftruncateSync, openSync, write } from "node:fs";
import { native } from "../native.js";

/** Default staging buffer: 32 MiB (8-64 MiB writes keep this virtio disk's queue full). */
export const DIRECT_BUFFER_BYTES = 32 << 20;

/** Staging buffers, reusable by one writer after another (never by two at once). */
export class StagingBuffers {
  readonly buffers: Uint8Array[];
  readonly align: number;
  inUse = false;
  constructor(
    readonly bufferBytes = DIRECT_BUFFER_BYTES,
    count = 4,
    align = 4096,
  ) {
    if (!Number.isInteger(bufferBytes) || bufferBytes < align || bufferBytes % align !== 0) throw new RangeError(`StagingBuffers: bufferBytes ${bufferBytes} must be a positive multiple of ${align}`);
    if (!Number.isInteger(count) || count < 2 || count > 64) throw new RangeError(`StagingBuffers: count ${count} must be an integer in 2..64`);
    this.align = align;
    this.buffers = Array.from({ length: count }, () => new Uint8Array(native.alignedBuffer(bufferBytes, align)));
  }
}

export interface DirectWriterOptions {
  /** Staging buffers (default: 4 of 32 MiB, allocated for this writer). */
  staging?: StagingBuffers;
  /** false: plain buffered writes through the same buffers (the comparison path); default true. */
  direct?: boolean;
  /** Tests: act as if the filesystem refused O_DIRECT at open, or at the first write (EINVAL). */
  refuseDirect?: "open" | "write";
  /**
   * true: the all-zero HOLE_BLOCKs of each staging buffer (aligned from the buffer's start) are not
   * written, so they stay holes of a file the caller truncated to its full length first (they read
   * as zeros), and a sparse source copies into a sparse file. Real data costs one compare per block.
   */
  holes?: boolean;
}

/** Granule of the holes left by a `holes: true` writer. */
const HOLE_BLOCK = 256 << 10;
const ZEROS = new Uint8Array(HOLE_BLOCK);

/** The [from, to) runs of `buf` that are not all-zero HOLE_BLOCKs, in order. */
function nonZeroRuns(buf: Uint8Array): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  let run = -1;
  for (let o = 0; o < buf.length; o += HOLE_BLOCK) {
    const end = Math.min(o + HOLE_BLOCK, buf.length);
    const nonZero = Buffer.compare(buf.subarray(o, end), ZEROS.subarray(0, end - o)) !== 0;
    if (nonZero && run < 0) run = o;
    if (!nonZero && run >= 0) {
      runs.push([run, o]);
      run = -1;
    }
  }
  if (run >= 0) runs.push([run, buf.length]);
  return runs;
}

/** The O_DIRECT alignment of `file` (statx STATX_DIOALIGN, shared with the O_DIRECT reads). */
export function dioAlignment(file: string): { memAlign: number; offsetAlign: number } {
  return native.dioAlignment(file);
}

export class DirectFileWriter {
  /** Bytes handed to the kernel so far (padding excluded). */
  written = 0;
  /** Why the writes are buffered (null while O_DIRECT serves them, or when direct: false was asked). */
  fallback: string | null = null;
  private directFd = -1;
  /** O_DIRECT opened (stays true after close, so `direct` still tells how the file was written). */
  private directOpened = false;
  private readonly staging: StagingBuffers;
  private readonly free: Uint8Array[];
  private readonly align: number;
  private cur: Uint8Array | null = null;
  /** File offset of cur[0], and bytes of cur filled / already written by a drain. */
  private curStart = 0;
  private fill = 0;
  private flushed = 0;
  private running = 0;
  /** The end of the padded writes (the file may be longer than `end` until cut back). */
  private padEnd = 0;
  private failure: unknown = null;
  private waiters: Array<() => void> = [];
  private refuseHook: DirectWriterOptions["refuseDirect"];
  private closed = false;
  private readonly holes: boolean;

  /** `fd`: the caller's (buffered) descriptor of `file`, open for writing; it stays the caller's. */
  constructor(
    private readonly fd: number,
    private readonly file: string,
    options: DirectWriterOptions = {},
  ) {
    this.staging = options.staging ?? new StagingBuffers();
    if (this.staging.inUse) throw new Error("DirectFileWriter: these staging buffers belong to a writer that is still open");
    this.staging.inUse = true;
    this.free = [...this.staging.buffers];
    this.refuseHook = options.refuseDirect;
    this.holes = options.holes === true;
    let align = this.staging.align;
    if (options.direct !== false) {
      try {
        const a = dioAlignment(file);
        align = Math.max(a.offsetAlign, a.memAlign);
        if (align > this.staging.align || this.staging.bufferBytes % align !== 0) {
          this.fallback = `O_DIRECT needs ${align}-byte alignment, above the staging buffers' ${this.staging.align}`;
        } else if (this.refuseHook === "open") {
          this.fallback = "O_DIRECT refused by the filesystem (EINVAL at open, simulated)";
        } else {
          this.directFd = openSync(file, constants.O_WRONLY | constants.O_DIRECT);
          this.directOpened = true;
        }
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        this.fallback = `O_DIRECT refused by the filesystem (${e.code ?? e.message} at open)`;
      }
    }
    this.align = align;
  }

  /** True while O_DIRECT serves the writes. */
  get direct(): boolean {
    return this.directOpened && this.fallback === null;
  }

  /** True when every pushed byte has been written. */
  get idle(): boolean {
    return this.running === 0 && this.fill === this.flushed;
  }

  /** File offset the next push must start at. */
  get end(): number {
    return this.curStart + this.fill;
  }

  /**
   * Copies `view` into the staging buffers (it may be reused as soon as this returns); full
   * buffers are written while the next fill. `position` must be where the last push ended.
   * Resolves when there is room for more; rejects with the first failed write.
   */
  async push(view: Uint8Array, position: number): Promise<void> {
    this.check();
    if (position !== this.end) throw new RangeError(`DirectFileWriter ${this.file}: writes must be sequential: push at ${position}, but the file ends at ${this.end}`);
    let off = 0;
    while (off < view.length) {
      if (!this.cur) this.cur = this.free.pop() ?? (await this.takeFree());
      const room = this.cur.length - this.fill;
      const n = Math.min(room, view.length - off);
      this.cur.set(n === view.length ? view : view.subarray(off, off + n), this.fill);
      this.fill += n;
      off += n;
      if (this.fill === this.cur.length) {
        const buf = this.cur;
        this.submit(buf, buf.length, this.curStart, buf.length - this.flushed, true);
        this.cur = null;
        this.curStart += buf.length;
        this.fill = 0;
        this.flushed = 0;
      }
    }
  }

  /**
   * Writes everything pushed (the partial last buffer rounded up to the alignment, the file then cut
   * back to its true length) and waits for every write; rejects with the first failure.
   */
  async drain(): Promise<void> {
    if (this.cur && this.fill > this.flushed) {
      const len = this.direct ? Math.ceil(this.fill / this.align) * this.align : this.fill;
      this.cur.fill(0, this.fill, len);
      this.submit(this.cur, len, this.curStart, this.fill - this.flushed, false);
      this.flushed = this.fill;
    }
    while (this.running > 0) await new Promise<void>((res) => this.waiters.push(res));
    this.check();
    if (this.padEnd > this.end) {
      ftruncateSync(this.fd, this.end);
      this.padEnd = this.end;
    }
  }

  /**
   * Continues the file at `position` (a multiple of 4096, not before `end`) without writing the
   * bytes in between: they stay whatever the file holds there (a hole in a file the caller
   * truncated to its full length reads as zeros). What was pushed before goes out first, its last
   * buffer rounded up to the alignment with zeros that land inside the skipped range.
   */
  async skipTo(position: number): Promise<void> {
    this.check();
    if (position < this.end || position % 4096 !== 0) throw new RangeError(`DirectFileWriter ${this.file}: skipTo(${position}) must be a multiple of 4096 at or after the end, ${this.end}`);
    if (position === this.end) return;
    if (this.cur && this.fill > this.flushed) {
      const len = this.direct ? Math.ceil(this.fill / this.align) * this.align : this.fill;
      this.cur.fill(0, this.fill, len);
      this.submit(this.cur, len, this.curStart, this.fill - this.flushed, true);
    } else if (this.cur) {
      // Written whole by a drain(): its write (not releasing the buffer) must end before reuse.
      const buf = this.cur;
      this.cur = null;
      while (this.running > 0) await new Promise<void>((res) => this.waiters.push(res));
      this.free.push(buf);
    }
    this.cur = null;
    this.curStart = position;
    this.fill = 0;
    this.flushed = 0;
  }

  /** Closes the O_DIRECT descriptor and gives the staging buffers back (after drain()). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.directFd >= 0) closeSync(this.directFd);
    this.directFd = -1;
    this.staging.inUse = false;
  }

  private check(): void {
    if (this.failure) throw this.failure;
  }

  private takeFree(): Promise<Uint8Array> {
    return new Promise<Uint8Array>((res, rej) => {
      const again = () => {
        if (this.failure) return rej(this.failure);
        const b = this.free.pop();
        if (b) res(b);
        else this.waiters.push(again);
      };
      this.waiters.push(again);
    });
  }

  /**
   * Writes buf[0, len) at `position` (`bytes` of it new; with `holes`, only its non-zero runs);
   * `release` returns the buffer to the free list after.
   */
  private submit(buf: Uint8Array, len: number, position: number, bytes: number, release: boolean): void {
    const runs = this.holes ? nonZeroRuns(buf.subarray(0, len)) : [[0, len] as [number, number]];
    this.running++;
    let left = runs.length;
    let failed: unknown = null;
    const finish = () => {
      if (failed) this.failure ??= failed;
      else {
        this.written += bytes;
        this.padEnd = Math.max(this.padEnd, position + len);
      }
      this.running--;
      if (release) this.free.push(buf);
      const w = this.waiters;
      this.waiters = [];
      for (const res of w) res();
    };
    if (left === 0) return void setImmediate(finish);
    for (const [from, to] of runs)
      this.writeOut(buf.subarray(from, to), to - from, position + from, (err) => {
        if (err) failed ??= err;
        if (--left === 0) finish();
      });
  }

  /** One write; a short write continues with the rest; an O_DIRECT EINVAL switches to buffered and retries. */
  private writeOut(buf: Uint8Array, len: number, position: number, done: (err: unknown) => void): void {
    const direct = this.direct;
    const fd = direct ? this.directFd : this.fd;
    const simulated = direct && this.refuseHook === "write";
    const after = (err: NodeJS.ErrnoException | null, n: number) => {
      if (err?.code === "EINVAL" && direct) {
        this.fallback ??= `O_DIRECT refused by the filesystem (EINVAL writing at ${position}${simulated ? ", simulated" : ""})`;
        return this.writeOut(buf, len, position, done);
      }
      if (err || n === 0) return done(ioFailure(this.file, len, position, err));
      if (n < len) return this.writeOut(buf.subarray(n), len - n, position + n, done);
      done(null);
    };
    if (simulated) {
      this.refuseHook = undefined;
      const e = new Error("EINVAL: invalid argument, write (simulated)") as NodeJS.ErrnoException;
      e.code = "EINVAL";
      return void setImmediate(() => after(e, 0));
    }
    write(fd, buf, 0, len, position, after);
  }
}

function ioFailure(file: string, len: number, position: number, err: NodeJS.ErrnoException | null): Error {
  const e = new Error(`cannot write ${len} bytes at ${position} of ${file}: ${err ? (err.code ?? err.message) : "write returned 0 bytes"}`) as NodeJS.ErrnoException;
  if (err?.code) e.code = err.code;
  return e;
}

/**
 * `k3 synth`'s precomputed block (packages/engine/src/synth.ts, whose JS encode() is the reference):
 * `n` elements of kind 0 normal bf16, 1 normal f32 (mean + std x Irwin-Hall-4), 2 MXFP4 nibbles or
 * 3 E8M0 scales (s or s + 1) from the sfc32 state (a, b, c, d), written twice over. Built on a libuv
 * thread (native/src/synth_block.c) so the JS thread keeps feeding the O_DIRECT writes meanwhile.
 */
export function synthBlock(kind: number, state: Uint32Array, n: number, mean: number, std: number, s: number): Promise<ArrayBuffer> {
  return native.synthBlock(kind, state, n, mean, std, s);
}
