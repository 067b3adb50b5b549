/**
 * Typed views of tensor bytes. A JS typed array needs its byte offset to be a multiple of its
 * element size; when a tensor's bytes are not aligned we either throw MisalignedView (default,
 * naming the tensor) or copy (`{ copy: true }`).
 */
import type { Dtype } from "./dtypes.js";
import { SafetensorsError } from "./errors.js";

export type TypedArrayFor<D extends Dtype> = D extends "F32" | "C64"
  ? Float32Array
  : D extends "F64"
    ? Float64Array
    : D extends "I32"
      ? Int32Array
      : D extends "U32"
        ? Uint32Array
        : D extends "I16"
          ? Int16Array
          : D extends "U16" | "F16" | "BF16"
            ? Uint16Array
            : D extends "I8"
              ? Int8Array
              : D extends "I64"
                ? BigInt64Array
                : D extends "U64"
                  ? BigUint64Array
                  : Uint8Array;

export type AnyTypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

type Ctor = { new (buffer: ArrayBufferLike, byteOffset: number, length: number): AnyTypedArray; BYTES_PER_ELEMENT: number };

/** The typed array class used for a dtype (raw bits for F16/BF16/F8/F4/F6; C64 as interleaved F32 pairs). */
export function typedArrayClass(dtype: Dtype): Ctor {
  switch (dtype) {
    case "F32":
    case "C64":
      return Float32Array;
    case "F64":
      return Float64Array;
    case "I32":
      return Int32Array;
    case "U32":
      return Uint32Array;
    case "I16":
      return Int16Array;
    case "U16":
    case "F16":
    case "BF16":
      return Uint16Array;
    case "I8":
      return Int8Array;
    case "I64":
      return BigInt64Array;
    case "U64":
      return BigUint64Array;
    default:
      return Uint8Array;
  }
}

export interface TypedViewOptions {
  /** Copy instead of throwing when the bytes are not aligned for the element type. */
  copy?: boolean;
  /** For messages. */
  tensor?: string;
  file?: string;
}

/** A typed view of `bytes` as `dtype`, zero-copy when aligned. */
export function typedView<D extends Dtype>(bytes: Uint8Array, dtype: D, options: TypedViewOptions = {}): TypedArrayFor<D> {
  const C = typedArrayClass(dtype);
  const size = C.BYTES_PER_ELEMENT;
  if (bytes.byteLength % size !== 0) {
    throw new SafetensorsError("MisalignedView", `${bytes.byteLength} bytes are not a whole number of ${size}-byte ${dtype} elements`, { tensor: options.tensor, file: options.file });
  }
  if (bytes.byteOffset % size !== 0) {
    if (!options.copy) {
      throw new SafetensorsError("MisalignedView", `the ${dtype} data starts at byte ${bytes.byteOffset} of its buffer, not a multiple of ${size}; pass { copy: true } to copy`, { tensor: options.tensor, file: options.file });
    }
    const copy = new Uint8Array(bytes.byteLength);
    copy.set(bytes);
    return new C(copy.buffer, 0, bytes.byteLength / size) as TypedArrayFor<D>;
  }
  return new C(bytes.buffer, bytes.byteOffset, bytes.byteLength / size) as TypedArrayFor<D>;
}
