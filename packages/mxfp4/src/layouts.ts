/**
 * Lossless conversions between the three MXFP4 layouts in use:
 *  - compressed-tensors (K3): packed [out, in/2] + scales [out, in/32]     (Mxfp4Matrix)
 *  - gpt-oss: *_blocks [..., out, in/32, 16] + *_scales [..., out, in/32]   (the same bytes, reshaped)
 *  - ggml block_mxfp4: 17 bytes per block, e then qs[16]; element j (0..15) in the low nibble of
 *    qs[j] and element j+16 in its high nibble; ggml's doubled int table with 2^(e-128) gives the same
 *    value as E2M1 with 2^(e-127), so e is the E8M0 byte unchanged and only the nibbles move.
 */
import { BLOCK_SIZE, Mxfp4Error, checkMatrix, validateScales, type Mxfp4Matrix } from "./codec.js";

/** gpt-oss tensors: `blocks` shaped [rows, cols/32, 16], `scales` shaped [rows, cols/32]. */
export interface GptOssTensors {
  blocks: Uint8Array;
  scales: Uint8Array;
  blocksShape: [number, number, number];
  scalesShape: [number, number];
}

/** Zero-copy: a compressed-tensors row reshaped to [cols/32, 16] is a gpt-oss blocks row. */
export function toGptOss(m: Mxfp4Matrix): GptOssTensors {
  validateScales(m, "toGptOss");
  return {
    blocks: m.packed,
    scales: m.scales,
    blocksShape: [m.rows, m.cols / BLOCK_SIZE, 16],
    scalesShape: [m.rows, m.cols / BLOCK_SIZE],
  };
}

/**
 * Zero-copy view of gpt-oss tensors as an Mxfp4Matrix. `blocksShape` may have leading dimensions
 * (experts): they are folded into rows. Refuses mismatched shapes and 0xFF scales.
 */
export function fromGptOss(blocks: Uint8Array, scales: Uint8Array, blocksShape: readonly number[]): Mxfp4Matrix {
  if (blocksShape.length < 3 || blocksShape[blocksShape.length - 1] !== 16)
    throw new Mxfp4Error(`fromGptOss: blocks shape [${blocksShape.join(", ")}] must end in [out, in/32, 16]`);
  const perRow = blocksShape[blocksShape.length - 2];
  const rows = blocksShape.slice(0, -2).reduce((a, b) => a * b, 1);
  const m: Mxfp4Matrix = { packed: blocks, scales, rows, cols: perRow * BLOCK_SIZE };
  if (blocks.length !== rows * perRow * 16)
    throw new Mxfp4Error(`fromGptOss: blocks has ${blocks.length} bytes, shape [${blocksShape.join(", ")}] needs ${rows * perRow * 16}`);
  if (scales.length !== rows * perRow)
    throw new Mxfp4Error(`fromGptOss: scales has ${scales.length} bytes, expected ${rows} x ${perRow} = ${rows * perRow}`);
  validateScales(m, "fromGptOss");
  return m;
}

/** Bytes of one ggml block_mxfp4. */
export const GGML_BLOCK_BYTES = 17;

/** Compressed-tensors -> ggml block_mxfp4 bytes (rows * cols/32 blocks of 17 bytes, row-major). */
export function toGgml(m: Mxfp4Matrix): Uint8Array {
  validateScales(m, "toGgml");
  const n = m.scales.length;
  const out = new Uint8Array(n * GGML_BLOCK_BYTES);
  for (let blk = 0; blk < n; blk++) {
    const src = blk * 16;
    const dst = blk * GGML_BLOCK_BYTES;
    out[dst] = m.scales[blk];
    for (let j = 0; j < 16; j++) {
      // element j sits in byte j>>1 (nibble j&1); element j+16 in byte 8+(j>>1)
      const a = m.packed[src + (j >> 1)];
      const b = m.packed[src + 8 + (j >> 1)];
      const lo = j & 1 ? a >> 4 : a & 15;
      const hi = j & 1 ? b >> 4 : b & 15;
      out[dst + 1 + j] = lo | (hi << 4);
    }
  }
  return out;
}

/** ggml block_mxfp4 bytes [rows, cols/32 blocks] -> compressed-tensors (new buffers). */
export function fromGgml(bytes: Uint8Array, rows: number, cols: number): Mxfp4Matrix {
  if (!Number.isSafeInteger(rows) || rows < 0 || !Number.isSafeInteger(cols) || cols < 0 || cols % BLOCK_SIZE !== 0)
    throw new Mxfp4Error(`fromGgml: rows (${rows}) and cols (${cols}) must be non-negative integers with cols a multiple of 32`);
  const n = (rows * cols) / BLOCK_SIZE;
  if (bytes.length !== n * GGML_BLOCK_BYTES)
    throw new Mxfp4Error(`fromGgml: ${bytes.length} bytes, expected ${n} blocks x 17 = ${n * GGML_BLOCK_BYTES}`);
  const packed = new Uint8Array(n * 16);
  const scales = new Uint8Array(n);
  for (let blk = 0; blk < n; blk++) {
    const src = blk * GGML_BLOCK_BYTES;
    scales[blk] = bytes[src];
    for (let k = 0; k < 16; k++) {
      // byte k holds elements 2k (low) and 2k+1 (high); element e < 16 is qs[e] low, else qs[e-16] high
      const code = (e: number) => (e < 16 ? bytes[src + 1 + e] & 15 : bytes[src + 1 + e - 16] >> 4);
      packed[blk * 16 + k] = code(2 * k) | (code(2 * k + 1) << 4);
    }
  }
  const m = { packed, scales, rows, cols };
  checkMatrix(m, "fromGgml");
  validateScales(m, "fromGgml");
  return m;
}
