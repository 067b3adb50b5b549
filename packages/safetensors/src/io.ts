/**
 * Positioned reads with Node's fs, sync and async: loops over short reads, splits reads larger
 * than 1 GiB (fs.read takes at most 2^31-1 bytes), positions as JS numbers up to 2^53-1.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { SafetensorsError, ioError } from "./errors.js";
import { headerLengthOf } from "./scan.js";

const CHUNK = 1 << 30;

/** Reads exactly `length` bytes at `position` into `target[offset..]`; ShortRead at EOF. */
export function preadExactSync(fd: number, file: string, target: Uint8Array, offset: number, length: number, position: number): void {
  let done = 0;
  while (done < length) {
    const want = Math.min(CHUNK, length - done);
    let got: number;
    try {
      got = readSync(fd, target, offset + done, want, position + done);
    } catch (err) {
      throw ioError(file, `reading ${length} bytes at ${position}`, err);
    }
    if (got === 0) throw new SafetensorsError("ShortRead", `the file ended after ${done} of ${length} bytes read at byte ${position}`, { file });
    done += got;
  }
}

export async function preadExact(handle: FileHandle, file: string, target: Uint8Array, offset: number, length: number, position: number): Promise<void> {
  let done = 0;
  while (done < length) {
    const want = Math.min(CHUNK, length - done);
    let got: number;
    try {
      ({ bytesRead: got } = await handle.read(target, offset + done, want, position + done));
    } catch (err) {
      throw ioError(file, `reading ${length} bytes at ${position}`, err);
    }
    if (got === 0) throw new SafetensorsError("ShortRead", `the file ended after ${done} of ${length} bytes read at byte ${position}`, { file });
    done += got;
  }
}

/** The 8-byte length and the header bytes of a file, with its size (validated framing). */
export interface RawHeader {
  header: Uint8Array;
  fileSize: number;
}

export function readRawHeaderSync(file: string): RawHeader {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (err) {
    throw ioError(file, "opening", err);
  }
  try {
    const fileSize = fstatSync(fd).size;
    const prefix = new Uint8Array(8);
    const got = fileSize >= 8 ? readSync(fd, prefix, 0, 8, 0) : 0;
    const n = headerLengthOf(prefix.subarray(0, got), fileSize, file);
    const header = new Uint8Array(n);
    preadExactSync(fd, file, header, 0, n, 8);
    return { header, fileSize };
  } finally {
    closeSync(fd);
  }
}

export async function readRawHeader(file: string): Promise<RawHeader> {
  let handle: FileHandle;
  try {
    handle = await open(file, "r");
  } catch (err) {
    throw ioError(file, "opening", err);
  }
  try {
    const fileSize = (await handle.stat()).size;
    const prefix = new Uint8Array(8);
    const got = fileSize >= 8 ? (await handle.read(prefix, 0, 8, 0)).bytesRead : 0;
    const n = headerLengthOf(prefix.subarray(0, got), fileSize, file);
    const header = new Uint8Array(n);
    await preadExact(handle, file, header, 0, n, 8);
    return { header, fileSize };
  } finally {
    await handle.close();
  }
}

/** Bytes of any ArrayBufferView, as a Uint8Array over the same memory. */
export function bytesOf(view: ArrayBufferView): Uint8Array {
  return view instanceof Uint8Array ? view : new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}
