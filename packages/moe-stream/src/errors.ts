/**
 * Typed errors of @k3/moe-stream. Each names the file / tensor / layer / expert and what was
 * expected, so a caller (and the engine's CLI) can print it as is.
 */
import { formatBytes } from "@k3/native";

/** Base class of every error this package throws. */
export class MoeStreamError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The memory budget cannot hold what was asked for; both numbers are on the error. */
export class BudgetError extends MoeStreamError {
  readonly neededBytes: number;
  readonly budgetBytes: number;
  constructor(what: string, neededBytes: number, budgetBytes: number) {
    super(
      `${what}: needs ${formatBytes(neededBytes)} (${neededBytes} B) but the budget is ${formatBytes(budgetBytes)} (${budgetBytes} B)`,
    );
    this.neededBytes = neededBytes;
    this.budgetBytes = budgetBytes;
  }
}

/** A checkpoint file is missing, truncated, or its header/index is not what the layout needs. */
export class CheckpointError extends MoeStreamError {
  readonly file: string;
  constructor(file: string, message: string) {
    super(`${file}: ${message}`);
    this.file = file;
  }
}

/** Reading an expert failed (I/O error, short read, truncated shard): the layer's output is never produced. */
export class ExpertReadError extends MoeStreamError {
  readonly layer: number;
  readonly expert: number;
  readonly errno: number;
  constructor(layer: number, expert: number, errno: number, detail: string) {
    super(`layer ${layer} expert ${expert}: ${detail}`);
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
    );
    this.file = file;
    this.tensor = tensor;
  }
}

/** packTrunk could not finish (disk full, source changed, ...); the journal lets the next run resume. */
export class PackError extends MoeStreamError {
  readonly code: string | undefined;
  constructor(message: string, code?: string) {
    super(message);
    this.code = code;
  }
}

/** The store or streamer was used after close(), or a request was malformed. */
export class StoreStateError extends MoeStreamError {}

function hex(n: number): string {
  return "0x" + (n >>> 0).toString(16).padStart(8, "0");
}

/** The shared byte formatter (decimal units; @k3/native). */
export { formatBytes };
