/**
 * The K3 / Kimi-Linear sigmoid router (docs/architecture.md §4.1), in fp32:
 *
 *   s  = sigmoid(W_r x)                  scores
 *   s' = s + e_score_correction_bias     used for SELECTION only
 *   [num_expert_group > 1: group score = sum of the top-2 s' of each group; keep the best
 *    topk_group groups, mask the others to -inf]
 *   I  = top-k of s' (ties: lower id first), ordered by descending s'
 *   w  = s_I / (sum s_I + 1e-20) * routed_scaling_factor    weights from the UNBIASED scores
 */
import { sigmoid, topK, type Linear } from "@k3/dense";
import { MoeStreamError } from "../errors.js";

export interface RouterConfig {
  numExperts: number;
  /** num_experts_per_token (K3: 16, 48B: 8). */
  topK: number;
  /** K3 1.0, 48B 2.446. */
  routedScalingFactor: number;
  /** moe_renormalize (true in both models). */
  renormalize?: boolean;
  numExpertGroup?: number;
  topkGroup?: number;
  /**
   * Reproduce Moonshot's bundled 48B `modeling_kimi.py`, whose in-place `+=` aliases the scores, so
   * the mixing weights come from the BIASED scores and dropped groups are masked with 0 instead of
   * -inf. Off by default: K3's code, vLLM and DeepSeek-V3 use unbiased weights. Use it only to
   * compare against an oracle built from that HF file.
   */
  hfBiasedWeights?: boolean;
}

export interface Routing {
  tokens: number;
  k: number;
  /** [tokens, k] expert ids, each row by descending biased score. */
  ids: Int32Array;
  /** [tokens, k] mixing weights (already x routed_scaling_factor). */
  weights: Float32Array;
}

/** Selection and weights from precomputed sigmoid scores [tokens, numExperts]. */
export function selectExperts(scores: Float32Array, bias: Float32Array | null, tokens: number, cfg: RouterConfig): Routing {
  const E = cfg.numExperts;
  const k = cfg.topK;
  validate(cfg);
  if (scores.length < tokens * E) throw new MoeStreamError(`router: scores hold ${scores.length} values, need ${tokens} x ${E}`);
  if (bias && bias.length !== E) throw new MoeStreamError(`router: e_score_correction_bias has ${bias.length} values, expected ${E}`);
  const ids = new Int32Array(tokens * k);
  const weights = new Float32Array(tokens * k);
  const biased = new Float32Array(E);
  const groups = cfg.numExpertGroup ?? 1;
  for (let t = 0; t < tokens; t++) {
    const s = scores.subarray(t * E, (t + 1) * E);
    for (let e = 0; e < E; e++) biased[e] = bias ? Math.fround(s[e] + bias[e]) : s[e];
    if (groups > 1) maskGroups(biased, groups, cfg.topkGroup ?? 1, cfg.hfBiasedWeights ? 0 : -Infinity);
    const pick = topK(biased, k).indices;
    let sum = 0;
    const source = cfg.hfBiasedWeights ? biased : s;
    for (let j = 0; j < k; j++) sum += source[pick[j]];
    const renorm = cfg.renormalize ?? true;
    for (let j = 0; j < k; j++) {
      ids[t * k + j] = pick[j];
      const w = renorm ? source[pick[j]] / (sum + 1e-20) : source[pick[j]];
      weights[t * k + j] = Math.fround(w * cfg.routedScalingFactor);
    }
  }
  return { tokens, k, ids, weights };
}

/** Keeps the topkGroup groups with the largest sum of their top-2 biased scores. */
function maskGroups(biased: Float32Array, groups: number, keep: number, fill: number): void {
  const per = biased.length / groups;
  const groupScore = new Float32Array(groups);
  for (let g = 0; g < groups; g++) {
    let a = -Infinity;
    let b = -Infinity;
    for (let i = g * per; i < (g + 1) * per; i++) {
      const v = biased[i];
      if (v > a) {
        b = a;
        a = v;
      } else if (v > b) b = v;
    }
    groupScore[g] = Math.fround(a + (per > 1 ? b : 0));
  }
  const kept = new Set(topK(groupScore, keep).indices);
  for (let g = 0; g < groups; g++) if (!kept.has(g)) biased.fill(fill, g * per, (g + 1) * per);
}

function validate(cfg: RouterConfig): void {
  const { numExperts: E, topK: k } = cfg;
  if (!Number.isInteger(E) || E < 1) throw new MoeStreamError(`router: numExperts must be a positive integer, got ${E}`);
  if (!Number.isInteger(k) || k < 1 || k > E) throw new MoeStreamError(`router: topK must be in [1, ${E}], got ${k}`);
  const G = cfg.numExpertGroup ?? 1;
  if (!Number.isInteger(G) || G < 1 || E % G !== 0) throw new MoeStreamError(`router: num_expert_group ${G} must divide numExperts ${E}`);
  const keep = cfg.topkGroup ?? 1;
  if (G > 1 && (!Number.isInteger(keep) || keep < 1 || keep > G || keep * (E / G) < k))
    throw new MoeStreamError(`router: topk_group ${keep} of ${G} groups leaves fewer than topK ${k} experts`);
}

/** The router of one MoE layer: W_r [numExperts, hidden] plus the selection bias. */
export class Router {
  readonly cfg: RouterConfig;
  readonly weight: Linear;
  readonly bias: Float32Array | null;

  constructor(cfg: RouterConfig, weight: Linear, bias: Float32Array | null) {
    validate(cfg);
    if (weight.rows !== cfg.numExperts)
      throw new MoeStreamError(`router: gate.weight has ${weight.rows} rows, expected numExperts ${cfg.numExperts}`);
    this.cfg = cfg;
    this.weight = weight;
    this.bias = bias;
  }

  /** Sigmoid scores [tokens, numExperts] for x [tokens, hidden]. */
  scores(x: Float32Array, tokens: number): Float32Array {
    if (x.length < tokens * this.weight.cols)
      throw new MoeStreamError(`router: x holds ${x.length} values, need ${tokens} x ${this.weight.cols}`);
    const logits = new Float32Array(tokens * this.cfg.numExperts);
    this.weight.apply(x, tokens, logits);
    return sigmoid(logits, logits);
  }

  route(x: Float32Array, tokens: number): Routing {
    return selectExperts(this.scores(x, tokens), this.bias, tokens, this.cfg);
  }
}
