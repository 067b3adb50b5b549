/**
 * Float64 TypeScript reference of the MLA layer in EXPANDED form (k_nope and v materialised per head
 * per position, the naive cache), with deliberately wrong variants of docs/invariants.md §5 so a test can show
 * the fixture comparison rejects each one.
 */
import type { MlaConfig } from "../src/index.js";

export type MlaVariant = "spec" | "rope" | "scale_nope_only" | "kv_b_swapped" | "norm_all_576";

type Vec = ArrayLike<number>;

function linear(W: Vec, x: Vec, rows: number, cols: number, xOff = 0): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    for (let c = 0; c < cols; c++) s += W[r * cols + c] * x[xOff + c];
    y[r] = s;
  }
  return y;
}

function rmsnorm(x: Float64Array, w: Vec, eps: number): Float64Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const f = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => w[i] * v * f);
}

/** Rotates pairs (i, i + r/2) by position * theta_i (what an accidental RoPE would do). */
function rope(x: Float64Array, pos: number): Float64Array {
  const r = x.length, half = r / 2, out = x.slice();
  for (let i = 0; i < half; i++) {
    const th = pos * Math.pow(10000, (-2 * i) / r);
    out[i] = x[i] * Math.cos(th) - x[i + half] * Math.sin(th);
    out[i + half] = x[i] * Math.sin(th) + x[i + half] * Math.cos(th);
  }
  return out;
}

export interface ExpandedCache {
  kNope: Float64Array[][]; // [pos][head]
  kPe: Float64Array[]; // [pos]
  v: Float64Array[][]; // [pos][head]
}

export function newExpandedCache(): ExpandedCache {
  return { kNope: [], kPe: [], v: [] };
}

/** out [T][D] for x [T][D]; appends to `cache` (expanded per head). W: checkpoint names -> f32/f64 arrays. */
export function mlaExpandedF64(x: Vec, T: number, W: Record<string, Vec>, c: MlaConfig, cache: ExpandedCache, variant: MlaVariant = "spec"): Float64Array {
  const { hidden: D, numHeads: H, qkNope: n, qkRope: r, vHead: dv, kvLoraRank: L } = c;
  const scale = variant === "scale_nope_only" ? 1 / Math.sqrt(n) : 1 / Math.sqrt(n + r);
  const out = new Float64Array(T * D);
  const pos0 = cache.kPe.length;
  const qs: Float64Array[] = [];
  for (let t = 0; t < T; t++) {
    let q: Float64Array;
    if (c.qLoraRank !== null) q = linear(W.q_b_proj, rmsnorm(linear(W.q_a_proj, x, c.qLoraRank, D, t * D), W.q_a_layernorm, c.normEps), H * (n + r), c.qLoraRank);
    else q = linear(W.q_proj, x, H * (n + r), D, t * D);
    qs.push(q);
    const a = linear(W.kv_a_proj_with_mqa, x, L + r, D, t * D);
    let lat: Float64Array, kpe: Float64Array;
    if (variant === "norm_all_576") {
      const all = rmsnorm(a, Array.from({ length: L + r }, (_, i) => (i < L ? W.kv_a_layernorm[i] : 1)), c.normEps);
      lat = all.slice(0, L);
      kpe = all.slice(L);
    } else {
      lat = rmsnorm(a.slice(0, L), W.kv_a_layernorm, c.normEps);
      kpe = a.slice(L);
    }
    const kv = linear(W.kv_b_proj, lat, H * (n + dv), L);
    const kn: Float64Array[] = [], vv: Float64Array[] = [];
    for (let h = 0; h < H; h++) {
      const rowsH = kv.subarray(h * (n + dv), (h + 1) * (n + dv));
      if (variant === "kv_b_swapped") {
        vv.push(rowsH.slice(0, dv));
        kn.push(rowsH.slice(dv, dv + n));
      } else {
        kn.push(rowsH.slice(0, n));
        vv.push(rowsH.slice(n, n + dv));
      }
    }
    cache.kNope.push(kn);
    cache.kPe.push(variant === "rope" ? rope(kpe, pos0 + t) : kpe);
    cache.v.push(vv);
  }
  for (let t = 0; t < T; t++) {
    const q = qs[t];
    const o = new Float64Array(H * dv);
    const last = pos0 + t;
    for (let h = 0; h < H; h++) {
      const qn = q.subarray(h * (n + r), h * (n + r) + n);
      let qp: Float64Array = q.slice(h * (n + r) + n, (h + 1) * (n + r));
      if (variant === "rope") qp = rope(qp, last);
      const sc = new Float64Array(last + 1);
      let mx = -Infinity;
      for (let s = 0; s <= last; s++) {
        let d = 0;
        for (let i = 0; i < n; i++) d += qn[i] * cache.kNope[s][h][i];
        for (let i = 0; i < r; i++) d += qp[i] * cache.kPe[s][i];
        sc[s] = d * scale;
        mx = Math.max(mx, sc[s]);
      }
      let z = 0;
      for (let s = 0; s <= last; s++) z += (sc[s] = Math.exp(sc[s] - mx));
      for (let s = 0; s <= last; s++) for (let j = 0; j < dv; j++) o[h * dv + j] += (sc[s] / z) * cache.v[s][h][j];
    }
    let oo = o;
    if (c.outputGate) {
      const g = linear(W.g_proj, x, H * dv, D, t * D);
      oo = o.map((val, i) => val / (1 + Math.exp(-g[i])));
    }
    out.set(linear(W.o_proj, oo, D, H * dv), t * D);
  }
  return out;
}
