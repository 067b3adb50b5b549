/**
 * Typed errors. Every failure of @k3/safetensors is a `SafetensorsError` whose `code` names the
 * rule that was broken (the first group mirrors the official Rust reader's variants), with the
 * file, the tensor and the byte position in the header when they are known.
 */

import { PackageError } from "@k3/native";

export type SafetensorsErrorCode =
  // header framing (official: HeaderTooSmall, HeaderTooLarge, InvalidHeaderLength)
  | "HeaderTooSmall"
  | "HeaderTooLarge"
  | "InvalidHeaderLength"
  // header text (official: InvalidHeader(Utf8Error), InvalidHeaderDeserialization)
  | "InvalidUtf8"
  | "InvalidJson"
  | "InvalidHeader"
  | "InvalidTensorEntry"
  | "InvalidMetadata"
  | "DuplicateKey"
  | "UnknownDtype"
  // layout (official: InvalidOffset, TensorInvalidInfo, MisalignedSlice, ValidationOverflow,
  // MetadataIncompleteBuffer)
  | "InvalidOffset"
  | "TensorInvalidInfo"
  | "MisalignedSlice"
  | "ValidationOverflow"
  | "MetadataIncompleteBuffer"
  // sharded checkpoints
  | "InvalidIndex"
  | "UnsafeShardPath"
  | "MissingShard"
  | "TooManyShards"
  | "TensorNotInShard"
  | "TensorNotInIndex"
  | "DuplicateTensor"
  | "NoTensorFiles"
  // access
  | "TensorNotFound"
  | "MisalignedView"
  | "BufferTooSmall"
  | "ShortRead"
  | "Closed"
  | "IoError"
  // writer
  | "InvalidArgument";

export interface SafetensorsErrorDetails {
  /** The file the error is about. */
  file?: string;
  /** The tensor (or key) the error is about. */
  tensor?: string;
  /** Byte position in the header JSON (0 = the first byte after the 8-byte length). */
  position?: number;
  cause?: unknown;
}

export class SafetensorsError extends PackageError {
  declare readonly code: SafetensorsErrorCode;
  readonly file?: string;
  readonly tensor?: string;
  readonly position?: number;
  /** The message without the file/tensor/position prefix. */
  readonly detail: string;

  constructor(code: SafetensorsErrorCode, detail: string, details: SafetensorsErrorDetails = {}) {
    const where: string[] = [];
    if (details.file !== undefined) where.push(details.file);
    if (details.tensor !== undefined) where.push(`tensor ${JSON.stringify(details.tensor)}`);
    if (details.position !== undefined) where.push(`header byte ${details.position}`);
    super("@k3/safetensors", code, `${code}: ${detail}${where.length ? ` (${where.join(", ")})` : ""}`, { cause: details.cause });
    this.name = "SafetensorsError";
    this.detail = detail;
    this.file = details.file;
    this.tensor = details.tensor;
    this.position = details.position;
  }

  /** The same error, attributed to a file. */
  withFile(file: string): SafetensorsError {
    if (this.file !== undefined) return this;
    return new SafetensorsError(this.code, this.detail, { file, tensor: this.tensor, position: this.position, cause: this.cause });
  }
}

/** Wraps a Node I/O error as IoError naming the file and what we were doing. */
export function ioError(file: string, doing: string, cause: unknown): SafetensorsError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new SafetensorsError("IoError", `${doing}: ${reason}`, { file, cause });
}
