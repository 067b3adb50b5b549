/**
 * How one routed expert turns its input rows into output rows, straight from the bytes the
 * expert store read (no copy, no dequantised matrix):
 *
 *   E(u) = W2 · φ(W1 u, W3 u)      w1 = gate, w3 = up, w2 = down (docs/architecture.md §4.2)
 *
 * φ is SiTU-GLU for K3 (with the config's two bounds) and SiLU-GLU for Kimi-Linear-48B. The MLP
 * is @k3/dense's GluMlp over views of the expert's bytes (dense `Linear`s or MXFP4 matrices); the
 * kernels are @k3/dense's and the MXFP4 provider's (@k3/mxfp4); none is written here.
 */
import { GluMlp, Linear, Scratch, type GluActivation, type LinearMap, type SituBetas } from "@k3/dense";
import { matmul as mxfp4Matmul, Mxfp4Error, validateScales, type Mxfp4Matrix } from "@k3/mxfp4";
import type { ExpertLocation } from "../store/checkpoint.js";
import { MoeStreamError } from "../errors.js";
import { native } from "../native.js";

/**
 * The SiTU bounds an expert compute runs with: the config's, always given for SiTU (an omitted
 * pair fell back to 4 / 25 and hid the config's values from every expert).
 */
export function situBetasFor(activation: GluActivation, betas: SituBetas | undefined, what: string): SituBetas {
  if (activation !== "situ" && activation !== "silu") throw new MoeStreamError(`${what}: activation ${String(activation)} is not situ or silu`);
  if (activation === "silu") return betas ?? { beta: NaN, linearBeta: NaN };
  if (!betas || !(betas.beta > 0) || !(betas.linearBeta > 0))
    throw new MoeStreamError(`${what}: SiTU needs its bounds (config activation_situ_beta / activation_situ_linear_beta), got ${JSON.stringify(betas)}`);
  return betas;
}

export interface ExpertCompute {
  /** Input width of the expert (K3: the 3584 latent; 48B: hidden). */
  readonly inDim: number;
  readonly outDim: number;
  /**
   * Y[b] = E(X[b]) for b < batch: X [batch, inDim], Y [batch, outDim]. Y[b] must equal the batch-1
   * result bit for bit. `readId` identifies the read that filled `bytes` (validate once per read).
   */
  run(bytes: Uint8Array, loc: ExpertLocation, X: Float32Array, batch: number, Y: Float32Array, readId?: number): void;
  /**
   * Optional: several experts in one native call (a layer's ready experts at once). Expert i serves
   * items[i].rows batch rows, which follow those of the experts before it: batch row r reads row
   * xRow[r] of X [*, inDim] and writes row yRow[r] of Y [*, outDim]. Y rows equal run()'s bit for bit.
   * Experts whose bytes the kernel refuses (an MXFP4 0xFF scale) come back as failures, in item
   * order, with the error run() would have thrown; their Y rows are then garbage, the others valid.
   */
  runMany?(items: readonly ExpertBatchItem[], X: Float32Array, xRow: Int32Array, Y: Float32Array, yRow: Int32Array): readonly ExpertBatchFailure[] | void;
}

/** An expert of a runMany() call whose bytes were refused: items[index], and why. */
export interface ExpertBatchFailure {
  index: number;
  error: Error;
}

/** One expert of a runMany() call. */
export interface ExpertBatchItem {
  bytes: Uint8Array;
  location: ExpertLocation;
  rows: number;
}

function tensor(bytes: Uint8Array, loc: ExpertLocation, name: string): { view: Uint8Array; dtype: string; shape: number[] } {
  const t = loc.tensors[name];
  if (!t) throw new MoeStreamError(`layer ${loc.layer} expert ${loc.id}: no tensor ${name} (has ${Object.keys(loc.tensors).join(", ")})`);
  return { view: bytes.subarray(t.offset, t.offset + t.byteLength), dtype: t.dtype, shape: t.shape };
}

/** Experts stored as dense matrices (48B: BF16 `experts.{e}.w{1,2,3}.weight`; F32 in fixtures). */
export function denseExpertCompute(opts: { inDim: number; interDim: number; activation: GluActivation; situBetas?: SituBetas }): ExpertCompute {
  const scratch = new Scratch();
  const { inDim, interDim, activation } = opts;
  const betas = situBetasFor(activation, opts.situBetas, "denseExpertCompute");
  return {
    inDim,
    outDim: inDim,
    run(bytes, loc, X, batch, Y) {
      const mat = (n: string, rows: number, cols: number): Linear => {
        const t = tensor(bytes, loc, n);
        if (t.shape[0] !== rows || t.shape[1] !== cols)
          throw new MoeStreamError(`layer ${loc.layer} expert ${loc.id}: ${n} has shape [${t.shape}], expected [${rows}, ${cols}]`);
        return new Linear(`layer ${loc.layer} expert ${loc.id} ${n}`, { dtype: t.dtype, shape: t.shape, data: t.view }, rows, cols, (m) => new MoeStreamError(m));
      };
      const mlp = new GluMlp(mat("w1.weight", interDim, inDim), mat("w3.weight", interDim, inDim), mat("w2.weight", inDim, interDim), activation, betas);
      mlp.forward(X, batch, Y, scratch);
    },
    runMany(items, X, xRow, Y, yRow) {
      if (items.length === 0) return;
      let dtype = "";
      let total = 0;
      const mats: ArrayBufferView[] = new Array(3 * items.length);
      const rows = scratchRows.get(items.length);
      for (let i = 0; i < items.length; i++) {
        const { bytes, location: loc } = items[i];
        const w = (n: string, rows: number, cols: number, at: number) => {
          const t = tensor(bytes, loc, n);
          if (t.shape[0] !== rows || t.shape[1] !== cols)
            throw new MoeStreamError(`layer ${loc.layer} expert ${loc.id}: ${n} has shape [${t.shape}], expected [${rows}, ${cols}]`);
          if (dtype && t.dtype !== dtype) throw new MoeStreamError(`layer ${loc.layer} expert ${loc.id}: ${n} is ${t.dtype}, the batch is ${dtype}`);
          dtype = t.dtype;
          mats[at] = t.view;
        };
        w("w1.weight", interDim, inDim, 3 * i);
        w("w3.weight", interDim, inDim, 3 * i + 1);
        w("w2.weight", inDim, interDim, 3 * i + 2);
        rows[i] = items[i].rows;
        total += items[i].rows;
      }
      if (dtype !== "BF16" && dtype !== "F32") throw new MoeStreamError(`experts of dtype ${dtype}: runMany takes BF16 or F32`);
      denseExperts(mats, rows, inDim, interDim, inDim, dtype === "BF16", activation, betas, X, xRow, Y, yRow, scratch.get("work", total * (2 * inDim + 2 * interDim)));
    },
  };
}

/** Reused Int32Arrays of a given length (per-expert row counts of a runMany call). */
class RowCounts {
  private readonly byLength = new Map<number, Int32Array>();
  get(n: number): Int32Array {
    let a = this.byLength.get(n);
    if (!a) this.byLength.set(n, (a = new Int32Array(n)));
    return a;
  }
}
const scratchRows = new RowCounts();

/**
 * Dense experts (bf16 bits or f32, w1/w3 [inter, inDim], w2 [outDim, inter]) in two pool
 * dispatches of the native kernel (native/src/moe_compute.c): batch row r reads X[xRow[r]] and
 * writes Y[yRow[r]]. Each row is bit-identical to the TS path (GluMlp over the same views).
 */
export function denseExperts(
  mats: ArrayBufferView[],
  rows: Int32Array,
  inDim: number,
  inter: number,
  outDim: number,
  bf16: boolean,
  act: GluActivation,
  betas: SituBetas,
  X: Float32Array,
  xRow: Int32Array,
  Y: Float32Array,
  yRow: Int32Array,
  work: Float32Array,
): void {
  native.moeExperts(mats, rows, inDim, inter, outDim, bf16, act === "situ" ? 1 : 0, betas.beta, betas.linearBeta, X, xRow, Y, yRow, work);
}

/** What an MXFP4 kernel provider must offer (e.g. @k3/mxfp4): Y[b] = W X[b], Y[b] bit-identical to batch 1. */
export interface Mxfp4Kernels {
  matmul(w: Mxfp4Matrix, X: Float32Array, batch: number, Y: Float32Array): void;
  /**
   * True when matmul itself refuses a 0xFF scale with an Mxfp4Error, even one written into a
   * buffer range it has already checked (an arena slot holding a new expert): then the per-read
   * scan of every expert's scales (1 MB per K3 expert, ~0.5 ms) is skipped.
   */
  readonly refusesBadScales?: boolean;
}

/** @k3/mxfp4's fp32 packed kernels (Y[b] bit-identical to matvec(X[b])). */
export const k3Mxfp4Kernels: Mxfp4Kernels = {
  matmul: (w, X, batch, Y) => void mxfp4Matmul(w, X, Y, batch),
  // @k3/mxfp4 scans each range once, then a 0xFF decodes to NaN, the call sees it, rescans and throws.
  refusesBadScales: true,
};

/**
 * K3 routed experts: MXFP4 w1/w3 [inter, latent], w2 [latent, inter], SiTU-GLU, in the latent space.
 * Scales are checked (0xFF = NaN block is refused) once per read: arena slots are reused, so a
 * cache keyed on the buffer range would miss a new expert landing in an old slot. Kernels that
 * refuse a bad scale themselves (`refusesBadScales`, @k3/mxfp4's) skip that scan; their refusal is
 * re-thrown naming the layer, expert and tensor.
 *
 * With @k3/mxfp4's kernels (the default) it also has runMany: a layer's ready experts in one native
 * call (native/src/moe_mxfp4.c, two pool dispatches through @k3/mxfp4's C table), bit-identical to
 * run() per expert; an expert whose products hold a NaN has its scales rescanned, and a 0xFF is
 * returned as that expert's failure with run()'s message. `batched: false` leaves runMany out.
 */
export function mxfp4ExpertCompute(opts: {
  inDim: number;
  interDim: number;
  activation?: GluActivation;
  situBetas?: SituBetas;
  kernels?: Mxfp4Kernels;
  batched?: boolean;
}): ExpertCompute {
  const scratch = new Scratch();
  const { inDim, interDim } = opts;
  const kernels = opts.kernels ?? k3Mxfp4Kernels;
  const activation = opts.activation ?? "situ";
  const betas = situBetasFor(activation, opts.situBetas, "mxfp4ExpertCompute");
  const validated = new Set<number>();
  const view = (bytes: Uint8Array, loc: ExpertLocation, w: string, rows: number, cols: number): Mxfp4Matrix => {
    const p = tensor(bytes, loc, `${w}.weight_packed`);
    const s = tensor(bytes, loc, `${w}.weight_scale`);
    if (p.shape[0] !== rows || p.shape[1] * 2 !== cols || s.shape[0] !== rows || s.shape[1] * 32 !== cols)
      throw new MoeStreamError(
        `layer ${loc.layer} expert ${loc.id}: ${w} packed [${p.shape}] / scale [${s.shape}], expected [${rows}, ${cols / 2}] / [${rows}, ${cols / 32}]`,
      );
    return { packed: p.view, scales: s.view, rows, cols };
  };
  const compute: ExpertCompute = {
    inDim,
    outDim: inDim,
    run(bytes, loc, X, batch, Y, readId) {
      const w1 = view(bytes, loc, "w1", interDim, inDim);
      const w3 = view(bytes, loc, "w3", interDim, inDim);
      const w2 = view(bytes, loc, "w2", inDim, interDim);
      const named = (name: string) => `layer ${loc.layer} expert ${loc.id} ${name}.weight_scale`;
      if (!kernels.refusesBadScales && (readId === undefined || !validated.has(readId))) {
        for (const [name, m] of [["w1", w1], ["w3", w3], ["w2", w2]] as const) validateScales(m, named(name));
        if (readId !== undefined) {
          if (validated.size > 65536) validated.clear();
          validated.add(readId);
        }
      }
      // The provider's matmul as a GluMlp matrix; a refusal is re-thrown naming the tensor.
      const linear = (name: string, m: Mxfp4Matrix): LinearMap => ({
        rows: m.rows,
        cols: m.cols,
        apply(A, T, out) {
          try {
            kernels.matmul(m, A, T, out);
          } catch (err) {
            if (err instanceof Mxfp4Error) validateScales(m, named(name)); // throws, naming the tensor
            throw err;
          }
        },
      });
      new GluMlp(linear("w1", w1), linear("w3", w3), linear("w2", w2), activation, betas).forward(X, batch, Y, scratch);
    },
  };
  if (kernels !== k3Mxfp4Kernels || opts.batched === false) return compute;
  compute.runMany = (items, X, xRow, Y, yRow) => {
    if (items.length === 0) return;
    const mats: Uint8Array[] = new Array(6 * items.length);
    const rows = scratchRows.get(items.length);
    const ms: Mxfp4Matrix[][] = new Array(items.length);
    let total = 0;
    for (let i = 0; i < items.length; i++) {
      const { bytes, location: loc } = items[i];
      const m = [view(bytes, loc, "w1", interDim, inDim), view(bytes, loc, "w3", interDim, inDim), view(bytes, loc, "w2", inDim, interDim)];
      for (let j = 0; j < 3; j++) {
        mats[6 * i + 2 * j] = m[j].packed;
        mats[6 * i + 2 * j + 1] = m[j].scales;
      }
      ms[i] = m;
      rows[i] = items[i].rows;
      total += items[i].rows;
    }
    const nan = scratchFlags.get(items.length);
    const work = scratch.get("work", total * (2 * inDim + 2 * interDim));
    const flagged = native.moeExpertsMxfp4(mats, rows, inDim, interDim, inDim, activation === "situ" ? 1 : 0, betas.beta, betas.linearBeta, X, xRow, Y, yRow, work, nan);
    if (flagged === 0) return;
    // A NaN: a 0xFF scale (refused, named as run() names it, w1 then w3 then w2) or NaN input (kept).
    const failures: ExpertBatchFailure[] = [];
    for (let i = 0; i < items.length; i++) {
      if (!nan[i]) continue;
      const loc = items[i].location;
      try {
        ["w1", "w3", "w2"].forEach((name, j) => validateScales(ms[i][j], `layer ${loc.layer} expert ${loc.id} ${name}.weight_scale`));
      } catch (err) {
        if (!(err instanceof Mxfp4Error)) throw err;
        failures.push({ index: i, error: err });
      }
    }
    return failures;
  };
  return compute;
}

/** Reused Uint8Arrays of a given length (runMany's per-expert NaN flags). */
class Flags {
  private readonly byLength = new Map<number, Uint8Array>();
  get(n: number): Uint8Array {
    let a = this.byLength.get(n);
    if (!a) this.byLength.set(n, (a = new Uint8Array(n)));
    return a;
  }
}
const scratchFlags = new Flags();
