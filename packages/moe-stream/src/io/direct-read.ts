/**
 * DirectFileReader: positioned reads of any byte range through O_DIRECT, for reading a file once
 * without filling the page cache. On this VM a buffered read costs ~1.7 s of kernel CPU per GB
 * (each page-cache page is a fresh page to back and clear), which a 2-core pack or verify pays on
 * the cores it needs; O_DIRECT moves the bytes straight into the caller's buffer.
 *
 * - Any range: the read covers the aligned window around [position, position + length) and the
 *   caller gets a view of the bytes it asked for, inside its buffer.
 * - Buffers must be 4 KiB-aligned (`alignedReadBuffer`) and hold `supersetBytes(length)` bytes.
 * - Fallback: where the filesystem refuses O_DIRECT (tmpfs answers the open or the read with
 *   EINVAL) the reads are buffered on a plain descriptor; `fallback` says why.
 */
import { closeSync, constants, openSync, read } from "node:fs";
import { dioAlignment } from "./direct-write.js";
import { CheckpointError } from "../errors.js";
import { native } from "../native.js";
import { DIRECT_ALIGN as BUFFER_ALIGN, supersetBytes } from "../sizing.js";

/** A buffer for DirectFileReader.read of up to `length` bytes at any position (its aligned superset). */
export function alignedReadBuffer(length: number): Uint8Array {
  return new Uint8Array(native.alignedBuffer(supersetBytes(length), BUFFER_ALIGN));
}

export class DirectFileReader {
  /** Why the reads are buffered (null while O_DIRECT serves them). */
  fallback: string | null = null;
  private fd = -1;
  private direct = false;
  private align = BUFFER_ALIGN;

  constructor(
    readonly file: string,
    options: { direct?: boolean } = {},
  ) {
    if (options.direct === false) {
      this.fallback = "O_DIRECT not asked";
    } else {
      try {
        const a = dioAlignment(file);
        const align = Math.max(a.memAlign, a.offsetAlign);
        if (align > BUFFER_ALIGN) this.fallback = `O_DIRECT needs ${align}-byte alignment, above the buffers' ${BUFFER_ALIGN}`;
        else {
          this.fd = openSync(file, constants.O_RDONLY | constants.O_DIRECT);
          this.direct = true;
          this.align = Math.max(align, 512);
        }
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        this.fallback = `O_DIRECT refused by the filesystem (${e.code ?? e.message} at open)`;
      }
    }
    if (this.fd < 0) this.fd = openSync(file, "r");
  }

  /** True while O_DIRECT serves the reads. */
  get isDirect(): boolean {
    return this.direct;
  }

  /**
   * Reads [position, position + length) through `buf` (from alignedReadBuffer, at least
   * supersetBytes(length) bytes) and returns the view of those bytes in it. A file that ends before
   * the range is a CheckpointError naming it.
   */
  async read(buf: Uint8Array, position: number, length: number): Promise<Uint8Array> {
    if (buf.length < supersetBytes(length)) throw new RangeError(`DirectFileReader ${this.file}: a ${buf.length}-byte buffer cannot hold the window of a ${length}-byte read`);
    const start = this.direct ? Math.floor(position / this.align) * this.align : position;
    const need = position + length - start;
    const span = this.direct ? Math.ceil(need / this.align) * this.align : need;
    let got = 0;
    while (got < need) {
      const n = await this.readOnce(buf, got, span - got, start + got);
      if (n === 0 || (this.direct && n % this.align !== 0 && got + n < need))
        throw new CheckpointError(this.file, `short read: ${Math.max(0, got + n - (position - start))} of ${length} bytes at offset ${position} (file truncated?)`);
      got += n;
    }
    return buf.subarray(position - start, position - start + length);
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  /** One read; an O_DIRECT EINVAL switches this reader to buffered reads and retries. */
  private readOnce(buf: Uint8Array, at: number, length: number, position: number): Promise<number> {
    return new Promise<number>((res, rej) =>
      read(this.fd, buf, at, length, position, (err, n) => {
        if (!err) return res(n);
        if (err.code === "EINVAL" && this.direct) {
          this.fallback = `O_DIRECT refused by the filesystem (EINVAL reading at ${position})`;
          closeSync(this.fd);
          this.fd = openSync(this.file, "r");
          this.direct = false;
          return this.readOnce(buf, at, length, position).then(res, rej);
        }
        rej(new CheckpointError(this.file, `read error at offset ${position}: ${err.code ?? err.message}`, { cause: err }));
      }),
    );
  }
}
