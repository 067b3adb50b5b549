/**
 * Float64 references for the real-width layer checks (test/realwidth-ci.test.ts), independent of
 * the engine's weight path: a tensor is located through this file's own reading of
 * model.safetensors.index.json and the shard's header, and read with plain `readSync` at absolute
 * file offsets in pieces of at most 64 MiB (not @k3/safetensors, not the engine's WeightSource, not
 * @k3/dense). An offset, row-stride or chunking mistake in the engine's path (or in the kernels at a
 * width the tiny fixtures never reach) then shows up as a mismatch. The math follows
 * reference/k3ref (kda.py, moe.py, ops.py) in float64; the KDA recurrence and the MLA layer are
 * @k3/kda's and @k3/mla's test references.
 */
import { closeSync, openSync, readFileSync, readSync } from "node:fs";
import { join } from "node:path";
import { recurrenceF64 } from "../../kda/test/reference.js";

export interface RefTensorInfo {
  file: string;
  dtype: string;
  shape: number[];
  /** Absolute byte offset of the data in `file`. */
  start: number;
  nbytes: number;
}

const PIECE = 64 << 20;
const ESIZE: Record<string, number> = { BF16: 2, F32: 4 };

/** The tensors of a checkpoint directory (or of one safetensors file), read independently. */
export class RefTensors {
  private readonly where = new Map<string, string>();
  private readonly headers = new Map<string, Map<string, RefTensorInfo>>();
  /** Bytes read so far (the test reports it). */
  bytesRead = 0;

  constructor(dir: string) {
    const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
    for (const [name, file] of Object.entries(index.weight_map)) this.where.set(name, join(dir, file));
  }

  has(name: string): boolean {
    return this.where.has(name);
  }

  info(name: string): RefTensorInfo {
    const file = this.where.get(name);
    if (!file) throw new Error(`reference: ${name} is not in the index`);
    let h = this.headers.get(file);
    if (!h) {
      h = readHeader(file);
      this.headers.set(file, h);
    }
    const t = h.get(name);
    if (!t) throw new Error(`reference: ${name} is not in ${file}`);
    return t;
  }

  /**
   * Calls `fn(r, row)` for every row r of a 2-D bf16/f32 tensor in order, `row` widened to f32 (a
   * reused buffer), reading whole rows in pieces of at most 64 MiB.
   */
  rows(name: string, fn: (r: number, row: Float32Array) => void): void {
    const t = this.info(name);
    if (t.shape.length !== 2) throw new Error(`reference: ${name} has shape ${JSON.stringify(t.shape)}, expected a matrix`);
    this.rowsOf(t, t.shape[0], t.shape[1], fn);
  }

  private rowsOf(t: RefTensorInfo, R: number, C: number, fn: (r: number, row: Float32Array) => void): void {
    const es = ESIZE[t.dtype];
    if (!es) throw new Error(`reference: a ${t.dtype} tensor in ${t.file}`);
    const rowBytes = C * es;
    const perPiece = Math.max(1, Math.floor(PIECE / rowBytes));
    const buf = Buffer.from(new ArrayBuffer(perPiece * rowBytes)); // aligned for the typed views
    const bits = new Uint32Array(C);
    const row = new Float32Array(bits.buffer);
    const fd = openSync(t.file, "r");
    try {
      for (let r0 = 0; r0 < R; r0 += perPiece) {
        const n = Math.min(perPiece, R - r0);
        readFully(fd, buf, n * rowBytes, t.start + r0 * rowBytes);
        this.bytesRead += n * rowBytes;
        for (let i = 0; i < n; i++) {
          if (es === 2) {
            const u16 = new Uint16Array(buf.buffer, buf.byteOffset + i * rowBytes, C);
            for (let c = 0; c < C; c++) bits[c] = u16[c] << 16;
          } else row.set(new Float32Array(buf.buffer, buf.byteOffset + i * rowBytes, C));
          fn(r0 + i, row);
        }
      }
    } finally {
      closeSync(fd);
    }
  }

  /** The whole tensor as f32 (row-major, any rank). */
  f32(name: string): Float32Array {
    const t = this.info(name);
    const n = t.shape.reduce((a, b) => a * b, 1);
    const out = new Float32Array(n);
    // Any rank is read as [shape[0], rest] through the same row reader.
    const R = t.shape.length > 1 ? t.shape[0] : 1;
    this.rowsOf(t, R, n / R, (r, row) => out.set(row, r * (n / R)));
    return out;
  }

  /** The whole tensor as f64. */
  f64(name: string): Float64Array {
    return Float64Array.from(this.f32(name));
  }

  /** y[T][out] = x[T][in] W^T for W [out, in], accumulated in f64. */
  linear(name: string, x: Float64Array, T: number): Float64Array {
    const [R, C] = this.info(name).shape;
    if (x.length !== T * C) throw new Error(`reference: ${name} takes ${C} inputs, x has ${x.length / T}`);
    const y = new Float64Array(T * R);
    this.rows(name, (r, w) => {
      for (let t = 0; t < T; t++) {
        let s = 0;
        const o = t * C;
        for (let c = 0; c < C; c++) s += w[c] * x[o + c];
        y[t * R + r] = s;
      }
    });
    return y;
  }
}

function readFully(fd: number, buf: Buffer, length: number, position: number): void {
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buf, done, length - done, position + done);
    if (n <= 0) throw new Error(`reference: short read at ${position + done}`);
    done += n;
  }
}

/** A safetensors header: u64 length, JSON { name: { dtype, shape, data_offsets } }, data after it. */
function readHeader(file: string): Map<string, RefTensorInfo> {
  const fd = openSync(file, "r");
  try {
    const len = Buffer.alloc(8);
    readFully(fd, len, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const json = Buffer.alloc(n);
    readFully(fd, json, n, 8);
    const h = JSON.parse(json.toString("utf8")) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
    const out = new Map<string, RefTensorInfo>();
    for (const [name, v] of Object.entries(h)) {
      if (name === "__metadata__") continue;
      out.set(name, { file, dtype: v.dtype, shape: v.shape, start: 8 + n + v.data_offsets[0], nbytes: v.data_offsets[1] - v.data_offsets[0] });
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

// ---------------------------------------------------------------- layers

const sigmoid = (v: number) => 1 / (1 + Math.exp(-v));
const silu = (v: number) => v * sigmoid(v);
const softplus = (v: number) => Math.max(v, 0) + Math.log1p(Math.exp(-Math.abs(v)));

export interface RefKdaConfig {
  numHeads: number;
  headDim: number;
  convKernel: number;
  gate: "k3-lowerbound" | "48b-softplus";
  lowerBound: number;
  eps: number;
}

/** Depthwise causal conv + SiLU from a zero state: u[t][c] = SiLU(sum_j w[c][j] x[t-(K-1)+j][c]). */
function shortConvF64(x: Float64Array, w: Float64Array, T: number, C: number, K: number): Float64Array {
  const u = new Float64Array(T * C);
  for (let t = 0; t < T; t++)
    for (let c = 0; c < C; c++) {
      let s = 0;
      for (let j = 0; j < K; j++) {
        const tt = t - (K - 1) + j;
        if (tt >= 0) s += w[c * K + j] * x[tt * C + c];
      }
      u[t * C + c] = silu(s);
    }
  return u;
}

/** x / sqrt(sum(x²) + eps) per group of `dim` (eps inside the sqrt of the sum), times `scale`. */
function l2normF64(x: Float64Array, dim: number, scale = 1): void {
  for (let o = 0; o < x.length; o += dim) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[o + i] * x[o + i];
    const f = scale / Math.sqrt(ss + 1e-6);
    for (let i = 0; i < dim; i++) x[o + i] *= f;
  }
}

/** The KDA mixer (reference/k3ref/kda.py kda_layer, recurrent core) on x [T][D] from a zero state. */
export function kdaLayerF64(ref: RefTensors, prefix: string, c: RefKdaConfig, x: Float64Array, T: number): Float64Array {
  const H = c.numHeads, dk = c.headDim, P = H * dk, K = c.convKernel;
  const conv = (n: string) => shortConvF64(ref.linear(`${prefix}${n}_proj.weight`, x, T), ref.f64(`${prefix}${n}_conv1d.weight`), T, P, K);
  const q = conv("q"), k = conv("k"), v = conv("v");
  l2normF64(q, dk, 1 / Math.sqrt(dk));
  l2normF64(k, dk);
  const z = ref.linear(`${prefix}f_b_proj.weight`, ref.linear(`${prefix}f_a_proj.weight`, x, T), T);
  const dt = ref.f64(`${prefix}dt_bias`);
  const aAll = ref.f64(`${prefix}A_log`);
  if (c.gate === "k3-lowerbound" ? aAll.length < H || aAll.subarray(H).some((a) => a !== 0) : aAll.length !== H) {
    throw new Error(`reference: ${prefix}A_log has ${aAll.length} entries for ${H} heads`);
  }
  const g = new Float64Array(T * P);
  for (let t = 0; t < T; t++)
    for (let i = 0; i < P; i++) {
      const a = Math.exp(aAll[Math.floor(i / dk)]);
      const zz = z[t * P + i] + dt[i];
      g[t * P + i] = c.gate === "k3-lowerbound" ? c.lowerBound * sigmoid(a * zz) : -a * softplus(zz);
    }
  const beta = ref.linear(`${prefix}b_proj.weight`, x, T).map(sigmoid);
  const { o } = recurrenceF64(q, k, v, g, beta, new Float64Array(H * dk * dk), T, H, dk, dk);
  const gam = ref.has(`${prefix}g_proj.weight`)
    ? ref.linear(`${prefix}g_proj.weight`, x, T)
    : ref.linear(`${prefix}g_b_proj.weight`, ref.linear(`${prefix}g_a_proj.weight`, x, T), T);
  const wn = ref.f64(`${prefix}o_norm.weight`);
  for (let s = 0; s < T * H; s++) {
    let ss = 0;
    for (let i = 0; i < dk; i++) ss += o[s * dk + i] ** 2;
    const f = 1 / Math.sqrt(ss / dk + c.eps);
    for (let i = 0; i < dk; i++) o[s * dk + i] = wn[i] * o[s * dk + i] * f * sigmoid(gam[s * dk + i]);
  }
  return ref.linear(`${prefix}o_proj.weight`, o, T);
}

/** down(act(gate x, up x)) (reference/k3ref/moe.py mlp): SiTU-GLU (K3) or SiLU-GLU (48B). */
export function gluMlpF64(ref: RefTensors, prefix: string, act: { kind: "situ"; beta1: number; beta2: number } | { kind: "silu" }, x: Float64Array, T: number): Float64Array {
  const a = ref.linear(`${prefix}gate_proj.weight`, x, T);
  const b = ref.linear(`${prefix}up_proj.weight`, x, T);
  for (let i = 0; i < a.length; i++) {
    a[i] = act.kind === "silu" ? silu(a[i]) * b[i] : act.beta1 * Math.tanh(a[i] / act.beta1) * sigmoid(a[i]) * (act.beta2 * Math.tanh(b[i] / act.beta2));
  }
  return ref.linear(`${prefix}down_proj.weight`, a, T);
}

/** Largest |got − want| over the rms of `want`, per token; the worst token. */
export function worstRelErr(got: ArrayLike<number>, want: ArrayLike<number>, T: number): { err: number; token: number; index: number; wantRms: number } {
  const D = want.length / T;
  let worst = { err: 0, token: 0, index: 0, wantRms: 0 };
  for (let t = 0; t < T; t++) {
    let ss = 0;
    for (let i = 0; i < D; i++) ss += want[t * D + i] ** 2;
    const rms = Math.sqrt(ss / D);
    for (let i = 0; i < D; i++) {
      const d = Math.abs(got[t * D + i] - want[t * D + i]);
      const e = Number.isFinite(d) ? d / rms : Infinity;
      if (!(e <= worst.err)) worst = { err: e, token: t, index: i, wantRms: rms };
    }
  }
  return worst;
}
