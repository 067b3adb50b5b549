/**
 * Reads a small metadata file (config.json, index.json, a tokenizer file) only when it is a
 * regular file of at most `maxBytes`: a FIFO would block the open or the read forever, a symlink to
 * /dev/zero would grow memory without bound, and a huge sparse file would be read in full before a
 * parser refuses it. The checks use fstat on the opened descriptor (no check-then-open race), and
 * the open is non-blocking so a FIFO with no writer cannot hang it.
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from "node:fs";
import { PackageError } from "./errors.js";

/** Why a file was refused; `code` is an errno-like tag ("ENOTREG", "EFBIG") or the open's errno. */
export class FileRefusedError extends PackageError {
  constructor(
    readonly file: string,
    code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super("@k3/native", code, message, options);
  }
}

function kindOf(st: Stats): string {
  if (st.isFIFO()) return "a FIFO";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  if (st.isSocket()) return "a socket";
  if (st.isDirectory()) return "a directory";
  return "not a regular file";
}

/** The whole file, refused (FileRefusedError) unless it is a regular file of at most maxBytes. */
export function readRegularFileSync(file: string, maxBytes: number): Uint8Array {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new FileRefusedError(file, e.code ?? "EIO", `cannot open (${e.code ?? e.message})`, { cause: err });
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new FileRefusedError(file, "ENOTREG", `${kindOf(st)}, not a regular file`);
    if (st.size > maxBytes) throw new FileRefusedError(file, "EFBIG", `${st.size} bytes, more than the ${maxBytes} allowed for it`);
    const buf = Buffer.allocUnsafe(st.size);
    let done = 0;
    // A file that shrank while read ends early: return what is there (the parser judges it).
    while (done < st.size) {
      const got = readSync(fd, buf, done, st.size - done, done);
      if (got === 0) break;
      done += got;
    }
    return done === st.size ? buf : buf.subarray(0, done);
  } catch (err) {
    if (err instanceof FileRefusedError) throw err;
    const e = err as NodeJS.ErrnoException;
    throw new FileRefusedError(file, e.code ?? "EIO", `cannot read (${e.code ?? e.message})`, { cause: err });
  } finally {
    closeSync(fd);
  }
}

/** readRegularFileSync decoded as UTF-8 (invalid bytes become U+FFFD, as Buffer#toString does). */
export function readRegularTextSync(file: string, maxBytes: number): string {
  return new TextDecoder("utf-8").decode(readRegularFileSync(file, maxBytes));
}
