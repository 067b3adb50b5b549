/**
 * The parsed header of one safetensors file, stored column-wise: no per-tensor JS object exists
 * until one is asked for. The native parser and the pure-TS parser both produce exactly this.
 */

/** What a tensor is, from its name (see classify.ts). */
export const KIND_GLOBAL = 0; // not in a numbered layer (embeddings, final norm, lm_head, vision, ...)
export const KIND_TRUNK = 1; // a layer tensor that is not a routed expert
export const KIND_EXPERT = 2; // one routed expert's tensor: `...experts.{E}.<rest>`
export const KIND_SHARED = 3; // shared expert(s): `...shared_expert(s).<rest>`
export const KIND_FUSED = 4; // all experts fused in one tensor: `...experts.<non-numeric>`

export interface HeaderTable {
  /** Tensors in header (JSON) order. */
  count: number;
  /** The JSON length N from the first 8 bytes; tensor data starts at 8 + N. */
  headerLength: number;
  /** Total file size the header was validated against. */
  fileSize: number;
  /** dtype code per tensor (see dtypes.ts). */
  dtype: Uint8Array;
  /** data_offsets, relative to the data start 8 + N. */
  begin: Float64Array;
  end: Float64Array;
  /** Dims of tensor i are dims[shapeStart[i] .. shapeStart[i+1]). */
  shapeStart: Uint32Array;
  dims: Float64Array;
  /** UTF-8 of name i is nameBytes[nameStart[i] .. nameStart[i+1]). */
  nameStart: Uint32Array;
  nameBytes: Uint8Array;
  /** Layer number, or -1 (see classify.ts). */
  layer: Int32Array;
  /** Routed expert id, or -1. */
  expert: Int32Array;
  /** KIND_* per tensor. */
  kind: Uint8Array;
  /** `__metadata__` as [key, value] pairs in header order; null when absent or `null`. */
  metadata: [string, string][] | null;
}

/** Decodes name i (ASCII names take the fast latin1 path). */
export function tableName(t: HeaderTable, i: number): string {
  const a = t.nameStart[i];
  const b = t.nameStart[i + 1];
  const bytes = t.nameBytes;
  let ascii = true;
  for (let k = a; k < b; k++) {
    if (bytes[k] >= 0x80) {
      ascii = false;
      break;
    }
  }
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return ascii ? buf.toString("latin1", a, b) : buf.toString("utf8", a, b);
}

export function tableShape(t: HeaderTable, i: number): number[] {
  return Array.from(t.dims.subarray(t.shapeStart[i], t.shapeStart[i + 1]));
}
