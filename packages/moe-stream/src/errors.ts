/**
 * Typed errors of @k3/moe-stream. Each names the file / tensor / layer / expert and what was
 * expected, so a caller (and the engine's CLI) can print it as is.
 */
import { formatBytes, PackageError } from "@k3/native";

/**
 * The kind of failure: a bad argument or layout ("input"), a memory budget ("budget"), a checkpoint
 * file ("checkpoint"), an expert or trunk read ("read"), a checksum ("checksum"), the I/O engine or a
 * ceiling probe ("io"), a store used after close ("state"); a PackError carries the errno of the
 * failed write ("ENOSPC", ...) or "pack".
 */
export type MoeStreamErrorCode = "input" | "budget" | "checkpoint" | "read" | "checksum" | "io" | "state" | "pack" | "cancelled" | (string & {});

/** Base class of every error this package throws. */
export class MoeStreamError extends PackageError {
  declare readonly code: MoeStreamErrorCode;
  constructor(message: string, code: MoeStreamErrorCode = "input", options?: { cause?: unknown }) {
    super("@k3/moe-stream", code, message, options);
  }
}

/** The memory budget cannot hold what was asked for; both numbers are on the error. */
export class BudgetError extends MoeStreamError {
  readonly neededBytes: number;
  readonly budgetBytes: number;
  constructor(what: string, neededBytes: number, budgetBytes: number) {
    super(
      `${what}: needs ${formatBytes(neededBytes)} (${neededBytes} B) but the budget is ${formatBytes(budgetBytes)} (${budgetBytes} B)`,
      "budget",
    );
    this.neededBytes = neededBytes;
    this.budgetBytes = budgetBytes;
  }
}

/** A checkpoint file is missing, truncated, or its header/index is not what the layout needs. */
export class CheckpointError extends MoeStreamError {
  readonly file: string;
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super(`${file}: ${message}`, "checkpoint", options);
    this.file = file;
  }
}

/** Reading an expert failed (I/O error, short read, truncated shard): the layer's output is never produced. */
export class ExpertReadError extends MoeStreamError {
  readonly layer: number;
  readonly expert: number;
  readonly errno: number;
  constructor(layer: number, expert: number, errno: number, detail: string) {
    super(`layer ${layer} expert ${expert}: ${detail}`, "read");
    this.layer = layer;
    this.expert = expert;
    this.errno = errno;
  }
}

/** Stored bytes do not match their recorded checksum. */
export class ChecksumError extends MoeStreamError {
  readonly file: string;
  readonly tensor: string;
  /** `where`: the tensor's place when known (e.g. "layer 3, offset 8192 (+4096 bytes)"). */
  constructor(file: string, tensor: string, expected: number, got: number, where?: string) {
    super(
      `${file}: checksum mismatch in ${tensor}${where ? ` (${where})` : ""}: expected crc32 ${hex(expected)}, got ${hex(got)} (the file is corrupt; re-run packTrunk)`,
      "checksum",
    );
    this.file = file;
    this.tensor = tensor;
  }
}

/**
 * packTrunk could not finish (disk full, source changed, ...); the journal lets the next run resume.
 * `code` is the errno of the failed write ("ENOSPC", ...) when there is one, else "pack".
 */
export class PackError extends MoeStreamError {
  constructor(message: string, code?: string, options?: { cause?: unknown }) {
    super(message, code ?? "pack", options);
  }
}

/** The store or streamer was used after close(), or a request was malformed. */
export class StoreStateError extends MoeStreamError {
  constructor(message: string) {
    super(message, "state");
  }
}

/** A forward stopped because its caller asked (MoeForwardOptions.cancelled); no output was written. */
export class CancelledError extends MoeStreamError {
  constructor(message: string) {
    super(message, "cancelled");
  }
}

function hex(n: number): string {
  return "0x" + (n >>> 0).toString(16).padStart(8, "0");
}

/** The shared byte formatter (decimal units; @k3/native). */
export { formatBytes };
