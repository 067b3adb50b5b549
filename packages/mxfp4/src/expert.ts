/**
 * Views of one routed expert's contiguous byte run (K3: w1, w2, w3 packed + scale tensors stored
 * next to each other, 17,547,264 bytes) as three Mxfp4Matrix views, without copying.
 */
import { BLOCK_SIZE, Mxfp4Error, validateScales, type Mxfp4Matrix } from "./codec.js";

/** Where one projection's tensors sit, as byte offsets from the start of the run. */
export interface ExpertTensorOffsets {
  packedOffset: number;
  scaleOffset: number;
  /** Output features (rows of W). */
  rows: number;
  /** Input features (a multiple of 32). */
  cols: number;
}

/** w1 = gate [I, D], w3 = up [I, D], w2 = down [D, I] (K3: I = 3072, D = 3584). */
export interface ExpertLayout {
  w1: ExpertTensorOffsets;
  w2: ExpertTensorOffsets;
  w3: ExpertTensorOffsets;
}

export interface ExpertMatrices {
  w1: Mxfp4Matrix;
  w2: Mxfp4Matrix;
  w3: Mxfp4Matrix;
}

/** K3 routed-expert shapes (moe_intermediate_size 3072, latent hidden 3584). */
export const K3_EXPERT_SHAPES = Object.freeze({
  w1: { rows: 3072, cols: 3584 },
  w2: { rows: 3584, cols: 3072 },
  w3: { rows: 3072, cols: 3584 },
});

/** Bytes of one K3 expert's packed + scale tensors (3 x (rows*cols/2 + rows*cols/32)). */
export const K3_EXPERT_BYTES = 17_547_264;

function slice(bytes: Uint8Array, name: string, what: string, offset: number, length: number): Uint8Array {
  if (!Number.isSafeInteger(offset) || offset < 0 || offset + length > bytes.length)
    throw new Mxfp4Error(
      `expertView: ${name}.${what} [${offset}, ${offset + length}) lies outside the ${bytes.length}-byte expert run`,
    );
  return bytes.subarray(offset, offset + length);
}

/**
 * Slices `bytes` (one expert's run) into w1/w2/w3 views. Offsets come from the checkpoint header
 * (@k3/safetensors data_offsets minus the run's start). Checks bounds, shapes and overlaps, and
 * refuses 0xFF scales unless `validate` is false (then the caller must have validated them).
 */
export function expertView(bytes: Uint8Array, layout: ExpertLayout, options: { validate?: boolean } = {}): ExpertMatrices {
  const out = {} as ExpertMatrices;
  const ranges: Array<[number, number, string]> = [];
  for (const name of ["w1", "w2", "w3"] as const) {
    const t = layout[name];
    if (!t) throw new Mxfp4Error(`expertView: layout.${name} is missing`);
    if (!Number.isSafeInteger(t.rows) || t.rows <= 0 || !Number.isSafeInteger(t.cols) || t.cols <= 0 || t.cols % BLOCK_SIZE !== 0)
      throw new Mxfp4Error(`expertView: ${name} shape ${t.rows} x ${t.cols} is invalid (cols must be a positive multiple of 32)`);
    const packedBytes = (t.rows * t.cols) / 2;
    const scaleBytes = (t.rows * t.cols) / BLOCK_SIZE;
    const m: Mxfp4Matrix = {
      packed: slice(bytes, name, "weight_packed", t.packedOffset, packedBytes),
      scales: slice(bytes, name, "weight_scale", t.scaleOffset, scaleBytes),
      rows: t.rows,
      cols: t.cols,
    };
    ranges.push([t.packedOffset, t.packedOffset + packedBytes, `${name}.weight_packed`]);
    ranges.push([t.scaleOffset, t.scaleOffset + scaleBytes, `${name}.weight_scale`]);
    if (options.validate !== false) validateScales(m, `${name}.weight_scale`);
    out[name] = m;
  }
  ranges.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < ranges.length; i++)
    if (ranges[i][0] < ranges[i - 1][1])
      throw new Mxfp4Error(`expertView: ${ranges[i - 1][2]} and ${ranges[i][2]} overlap`);
  return out;
}
