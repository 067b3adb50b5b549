/**
 * One MLA mixer layer (docs/architecture.md §3) in absorbed form: x [T][D] (already input-normed)
 * -> out [T][D], appending T positions to a latent cache of kvLora + rope values each.
 *   q      = q_b(RMSNorm(q_a x)) (K3) or q_proj x (48B), per head [q_nope | q_pe]
 *   a      = kv_a_proj_with_mqa x;  c = RMSNorm_{kvLora}(a[:kvLora]);  k_pe = a[kvLora:] (never rotated)
 *   q~_h   = W_UK^h^T q_nope_h;  o~_h = softmax((q~_h.c_s + q_pe_h.k_pe_s) (nope+rope)^-1/2) c_s
 *   o_h    = W_UV^h o~_h;  o = o * sigmoid(g_proj x) (K3);  out = o_proj o
 * kv_b_proj rows per head: [256h, 256h+128) = W_UK^h, [256h+128, 256h+256) = W_UV^h. Both per-head
 * products run natively on those rows, all heads in one pool call (not 2 x H small GEMVs).
 */
import { rmsNorm, sigmoidMul } from "@k3/dense";
import { MlaCache, type CacheDtype } from "./cache.js";
import { checkConfig, softmaxScale, type MlaConfig } from "./config.js";
import { attendLatent } from "./core.js";
import { MlaError } from "./errors.js";
import { native } from "./native.js";
import { linear, type Linear, vectorF32, type WeightTensor } from "./weights.js";
import { Scratch } from "@k3/dense";

/** Work buffers of every MlaLayer.forward (synchronous, so one set serves all layers). */
const scratch = new Scratch(32 << 20);

export interface MlaWeights {
  /** 48B. */
  q_proj?: WeightTensor;
  /** K3 (q_lora). */
  q_a_proj?: WeightTensor;
  q_a_layernorm?: WeightTensor;
  q_b_proj?: WeightTensor;
  kv_a_proj_with_mqa: WeightTensor;
  kv_a_layernorm: WeightTensor;
  kv_b_proj: WeightTensor;
  /** K3's output gate. */
  g_proj?: WeightTensor;
  o_proj: WeightTensor;
}

/** Intermediates of the last call (tests). */
export interface MlaTrace {
  c: Float32Array;
  kPe: Float32Array;
  latentOut: Float32Array;
}

export class MlaLayer {
  readonly config: MlaConfig;
  readonly scale: number;
  private readonly qProj?: Linear;
  private readonly qA?: Linear;
  private readonly qANorm?: Float32Array;
  private readonly qB?: Linear;
  private readonly kvA: Linear;
  private readonly kvANorm: Float32Array;
  private readonly kvB: Linear;
  private readonly gProj?: Linear;
  private readonly oProj: Linear;
  trace = false;
  lastTrace?: MlaTrace;

  constructor(weights: MlaWeights, config: MlaConfig) {
    this.config = checkConfig(config);
    if (typeof weights !== "object" || weights === null) throw new MlaError("weight", "weights must be an object of tensors");
    const c = this.config;
    const { hidden: D, numHeads: H, qkNope: n, qkRope: r, vHead: v, kvLoraRank: L } = c;
    const qWidth = H * (n + r);
    if (c.qLoraRank === null) {
      if (weights.q_a_proj !== undefined) throw new MlaError("weight", "q_a_proj given but config.qLoraRank is null (48B uses q_proj)");
      this.qProj = linear("q_proj", weights.q_proj, qWidth, D);
    } else {
      if (weights.q_proj !== undefined) throw new MlaError("weight", `q_proj given but config.qLoraRank is ${c.qLoraRank} (K3 uses q_a_proj/q_b_proj)`);
      this.qA = linear("q_a_proj", weights.q_a_proj, c.qLoraRank, D);
      this.qANorm = vectorF32("q_a_layernorm", weights.q_a_layernorm, [c.qLoraRank]);
      this.qB = linear("q_b_proj", weights.q_b_proj, qWidth, c.qLoraRank);
    }
    this.kvA = linear("kv_a_proj_with_mqa", weights.kv_a_proj_with_mqa, L + r, D);
    this.kvANorm = vectorF32("kv_a_layernorm", weights.kv_a_layernorm, [L]);
    this.kvB = linear("kv_b_proj", weights.kv_b_proj, H * (n + v), L);
    if (c.outputGate) this.gProj = linear("g_proj", weights.g_proj, H * v, D);
    else if (weights.g_proj !== undefined) throw new MlaError("weight", "g_proj given but config.outputGate is false");
    this.oProj = linear("o_proj", weights.o_proj, D, H * v);
    this.scale = softmaxScale(c);
  }

  /** An empty latent cache for `capacityTokens` positions (f32 by default, bf16 halves it). */
  newCache(capacityTokens: number, options: { dtype?: CacheDtype } = {}): MlaCache {
    return new MlaCache(this.config, capacityTokens, options.dtype ?? "f32");
  }

  /** Runs T = x.length / hidden new tokens at positions cache.length.., appending them to the cache. */
  forward(x: Float32Array, cache: MlaCache, out?: Float32Array): Float32Array {
    const c = this.config;
    const { hidden: D, numHeads: H, qkNope: n, qkRope: r, vHead: v, kvLoraRank: L } = c;
    if (!(x instanceof Float32Array)) throw new MlaError("input", "forward: x must be a Float32Array");
    if (x.length === 0 || x.length % D !== 0) throw new MlaError("input", `forward: x has ${x.length} values, expected a positive multiple of hidden = ${D}`);
    if (!(cache instanceof MlaCache)) throw new MlaError("input", "forward: cache must be an MlaCache (layer.newCache())");
    const cc = cache.config;
    if (cc.kvLoraRank !== L || cc.qkRope !== r || cc.numHeads !== H || cc.qkNope !== n)
      throw new MlaError("input", `forward: cache is for kvLoraRank=${cc.kvLoraRank} qkRope=${cc.qkRope} numHeads=${cc.numHeads}, layer has ${L}/${r}/${H}`);
    const T = x.length / D;
    if (cache.length + T > cache.capacity) throw new MlaError("cache", `cache full: ${cache.length} + ${T} positions exceed the capacity of ${cache.capacity}`);
    if (out && out.length !== T * D) throw new MlaError("input", `forward: out has ${out.length} values, expected ${T * D}`);

    // queries (work buffers reused across calls: module scratch, forward is synchronous)
    const sc = scratch;
    let q: Float32Array;
    if (this.qProj) q = this.qProj.apply(x, T, sc.get("q", T * H * (n + r)));
    else {
      const qa = this.qA!.apply(x, T, sc.get("qa", T * c.qLoraRank!));
      rmsNorm(qa, this.qANorm!, c.normEps, qa, c.qLoraRank!);
      q = this.qB!.apply(qa, T, sc.get("q", T * H * (n + r)));
    }
    // the latent and the shared k_pe, appended to the cache: rows [c | k_pe], c normed in place
    const rows = this.kvA.apply(x, T, sc.get("rows", T * (L + r)));
    for (let t = 0; t < T; t++) {
      const cRow = rows.subarray(t * (L + r), t * (L + r) + L);
      rmsNorm(cRow, this.kvANorm, c.normEps, cRow, L);
    }
    const pos0 = cache.length;
    cache.append(rows);

    // absorbed queries [T][H][L + r] = [W_UK^h^T q_nope | q_pe], straight from the kv_b_proj rows
    const qAbs = sc.get("qAbs", T * H * (L + r));
    native.absorb(q, T, H, H * (n + r), n + r, this.kvB.raw, n, v, L, qAbs, H * (L + r), L + r);
    for (let i = 0; i < T * H; i++) qAbs.set(q.subarray(i * (n + r) + n, (i + 1) * (n + r)), i * (L + r) + L);
    const latentOut = attendLatent(qAbs, T, H, cache, pos0, this.scale, sc.get("latentOut", T * H * L));
    if (this.trace) {
      const lat = new Float32Array(T * L);
      const kPe = new Float32Array(T * r);
      for (let t = 0; t < T; t++) {
        lat.set(rows.subarray(t * (L + r), t * (L + r) + L), t * L);
        kPe.set(rows.subarray(t * (L + r) + L, (t + 1) * (L + r)), t * r);
      }
      this.lastTrace = { c: lat, kPe, latentOut: latentOut.slice() };
    }

    // o_h = W_UV^h o~_h, then the K3 gate, then o_proj
    const o = sc.get("o", T * H * v);
    native.project(latentOut, T, H, H * L, L, this.kvB.raw, n, v, L, o, H * v, v);
    if (this.gProj) {
      sigmoidMul(o, this.gProj.apply(x, T, sc.get("gate", T * H * v)), o);
    }
    return this.oProj.apply(o, T, out);
  }
}
