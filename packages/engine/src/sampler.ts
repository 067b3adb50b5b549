/**
 * Deterministic token sampling: greedy, or temperature → top-k → top-p drawn with PCG32, after
 * OpenAI's presence/frequency penalties; and the log-probabilities clients ask for (`logprobsOf`).
 *
 * The same (logits, options, seed, stream) always gives the same token on every machine: the
 * candidate order is fixed (logit descending, ties to the lower id), probabilities are computed in
 * float64 in that order, and the random stream is PCG32 (O'Neill's pcg32_random_r, XSH RR).
 */
import { UsageError } from "./errors.js";
import { checkSamplingOption, DEFAULTS, SAMPLING_RULES } from "./options.js";

const MASK64 = 0xffffffffffffffffn;
const PCG_MULT = 6364136223846793005n;

/** PCG32 (64-bit state, 32-bit output, XSH RR), seeded like pcg32_srandom_r(seed, stream). */
export class Pcg32 {
  private state = 0n;
  private readonly inc: bigint;

  constructor(seed: number | bigint, stream: number | bigint = 0) {
    this.inc = ((BigInt(stream) << 1n) | 1n) & MASK64;
    this.nextU32();
    this.state = (this.state + (BigInt(seed) & MASK64)) & MASK64;
    this.nextU32();
  }

  /** The next 32-bit output. */
  nextU32(): number {
    const old = this.state;
    this.state = (old * PCG_MULT + this.inc) & MASK64;
    const xorshifted = Number((((old >> 18n) ^ old) >> 27n) & 0xffffffffn);
    const rot = Number(old >> 59n);
    return ((xorshifted >>> rot) | (xorshifted << ((32 - rot) & 31))) >>> 0;
  }

  /** A uniform double in [0, 1) with 32 bits of resolution. */
  nextUnit(): number {
    return this.nextU32() / 4294967296;
  }
}

export interface SamplingOptions {
  /** 0 (default) = greedy; at most 2 (options.ts MAX_TEMPERATURE). */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = no limit. */
  topK?: number;
  /** Keep the smallest prefix whose probability reaches p; 1 = no limit. */
  topP?: number;
  /** Seed of the PCG32 stream (default 0). */
  seed?: number;
  /**
   * OpenAI's penalties, in [-2, 2] (default 0): before sampling, every token already generated
   * in this call has its logit lowered by `count * frequencyPenalty + presencePenalty`.
   */
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** OpenAI's logit_bias: token id → a number in [-100, 100] added to its logit before every draw. */
  logitBias?: Record<number, number>;
}

/** Checks sampling options against options.ts SAMPLING_RULES; a bad value is a UsageError naming the option. */
export function validateSampling(o: SamplingOptions): Required<SamplingOptions> {
  const r = SAMPLING_RULES;
  const temperature = checkSamplingOption(r.temperature, o.temperature ?? DEFAULTS.temperature.engine);
  const topK = checkSamplingOption(r.topK, o.topK ?? DEFAULTS.topK);
  const topP = checkSamplingOption(r.topP, o.topP ?? DEFAULTS.topP);
  const seed = checkSamplingOption(r.seed, o.seed ?? DEFAULTS.seed);
  const presencePenalty = checkSamplingOption(r.presencePenalty, o.presencePenalty ?? DEFAULTS.presencePenalty);
  const frequencyPenalty = checkSamplingOption(r.frequencyPenalty, o.frequencyPenalty ?? DEFAULTS.frequencyPenalty);
  const logitBias: Record<number, number> = {};
  if (o.logitBias !== undefined && o.logitBias !== null) {
    if (typeof o.logitBias !== "object" || Array.isArray(o.logitBias)) throw new UsageError(`logit_bias: expected a map of token id to ${r.logitBias.expected}`);
    for (const [k, v] of Object.entries(o.logitBias)) {
      const id = Number(k);
      if (!/^\d+$/.test(k) || !Number.isSafeInteger(id)) throw new UsageError(`logit_bias: key ${JSON.stringify(k)} is not a token id`);
      logitBias[id] = checkSamplingOption(r.logitBias, v, `logit_bias[${k}]`);
    }
  }
  return { temperature, topK, topP, seed, presencePenalty, frequencyPenalty, logitBias };
}

/** Index of the largest logit; ties go to the lower id; NaN never wins. */
export function argmax(logits: Float32Array): number {
  let best = -1;
  let bestValue = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const v = logits[i];
    if (v > bestValue || (best < 0 && v === bestValue)) {
      best = i;
      bestValue = v;
    }
  }
  return best < 0 ? 0 : best;
}

/** A sampler bound to one random stream (one per generation or chat turn). */
export class Sampler {
  readonly options: Required<SamplingOptions>;
  private readonly rng: Pcg32;
  /** How often each token was generated so far (the penalties' c[j]). */
  private readonly counts = new Map<number, number>();

  constructor(options: SamplingOptions = {}, stream = 0) {
    this.options = validateSampling(options);
    this.rng = new Pcg32(this.options.seed, stream);
  }

  get greedy(): boolean {
    return this.options.temperature === 0 || this.options.topK === 1;
  }

  /** Records a generated token: the penalties count it from the next draw on. */
  accept(id: number): void {
    this.counts.set(id, (this.counts.get(id) ?? 0) + 1);
  }

  /**
   * The row the sampler draws from: the logits plus logit_bias, minus OpenAI's penalties,
   * `logit[j] - c[j] * frequency_penalty - (c[j] > 0) * presence_penalty` (c[j]: times token j
   * was generated, see accept). A fresh copy when a penalty applies; otherwise the row itself.
   */
  adjust(logits: Float32Array): Float32Array {
    const { presencePenalty, frequencyPenalty, logitBias } = this.options;
    const penalize = (presencePenalty !== 0 || frequencyPenalty !== 0) && this.counts.size > 0;
    const bias = Object.entries(logitBias);
    if (!penalize && bias.length === 0) return logits;
    const out = logits.slice();
    for (const [k, b] of bias) {
      const id = Number(k);
      if (id >= out.length) throw new UsageError(`logit_bias: token id ${id} is not in the vocabulary (0..${out.length - 1})`);
      out[id] = out[id] + b;
    }
    if (penalize) for (const [id, c] of this.counts) if (id < out.length) out[id] = out[id] - c * frequencyPenalty - presencePenalty;
    return out;
  }

  /** Picks the next token from a row of logits (as given: see adjust for the penalties). */
  sample(logits: Float32Array): number {
    if (this.greedy) return argmax(logits);
    const { temperature, topK, topP } = this.options;
    const candidates = topCandidates(logits, topK);
    const maxLogit = logits[candidates[0]];
    const probs = new Float64Array(candidates.length);
    let total = 0;
    for (let i = 0; i < candidates.length; i++) {
      const p = Math.exp((logits[candidates[i]] - maxLogit) / temperature);
      probs[i] = p;
      total += p;
    }
    let keep = candidates.length;
    if (topP < 1) {
      let cum = 0;
      for (let i = 0; i < candidates.length; i++) {
        cum += probs[i] / total;
        if (cum >= topP) {
          keep = i + 1;
          break;
        }
      }
    }
    let kept = 0;
    for (let i = 0; i < keep; i++) kept += probs[i];
    const target = this.rng.nextUnit() * kept;
    let cum = 0;
    for (let i = 0; i < keep; i++) {
      cum += probs[i];
      if (target < cum) return candidates[i];
    }
    return candidates[keep - 1];
  }
}

/** Ids of the finite logits in descending order (ties: lower id first), truncated to k when k > 0. */
function topCandidates(logits: Float32Array, k: number): ArrayLike<number> {
  const ids: number[] = [];
  for (let i = 0; i < logits.length; i++) if (!Number.isNaN(logits[i]) && logits[i] !== -Infinity) ids.push(i);
  if (ids.length === 0) return [0];
  const order = (a: number, b: number) => logits[b] - logits[a] || a - b;
  if (k > 0 && k < ids.length) {
    // Partial selection keeps big vocabularies cheap: a bounded insertion list of the best k.
    const best: number[] = [];
    for (const id of ids) {
      if (best.length === k && order(id, best[k - 1]) >= 0) continue;
      let pos = best.length === k ? k - 1 : best.length;
      if (best.length < k) best.push(id);
      while (pos > 0 && order(id, best[pos - 1]) < 0) {
        best[pos] = best[pos - 1];
        pos--;
      }
      best[pos] = id;
    }
    return best;
  }
  return sortByLogit(logits, ids);
}

const f32Bits = new Float32Array(1);
const u32Bits = new Uint32Array(f32Bits.buffer);

/**
 * The ids in the sampler's order (logit descending, ties: lower id first), exactly as
 * `ids.sort((a, b) => logits[b] - logits[a] || a - b)` gives them for ascending `ids`: each logit's
 * bits become an order-keeping 32-bit key, sorted by a stable LSD radix sort (4 passes of 8 bits),
 * so equal logits keep the ids' ascending order. A comparator sort of K3's 163,840 ids took ~65 ms
 * per draw (bench/sampler.bench.ts).
 */
export function sortByLogit(logits: Float32Array, ids: ArrayLike<number>): Int32Array {
  const n = ids.length;
  let keys = new Uint32Array(n);
  let vals = new Int32Array(n);
  for (let j = 0; j < n; j++) {
    const v = logits[ids[j]];
    f32Bits[0] = v === 0 ? 0 : v; // -0 ties with +0, as the comparator has it
    const bits = u32Bits[0];
    // IEEE order as unsigned integers (negative floats flipped whole), then reversed: descending.
    keys[j] = ~(bits & 0x80000000 ? ~bits : bits | 0x80000000) >>> 0;
    vals[j] = ids[j];
  }
  let keys2 = new Uint32Array(n);
  let vals2 = new Int32Array(n);
  const count = new Int32Array(256);
  for (let shift = 0; shift < 32; shift += 8) {
    count.fill(0);
    for (let j = 0; j < n; j++) count[(keys[j] >>> shift) & 255]++;
    if (count[(keys[0] >>> shift) & 255] === n) continue; // every key has this byte: the order stands
    for (let d = 0, sum = 0; d < 256; d++) {
      const c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (let j = 0; j < n; j++) {
      const at = count[(keys[j] >>> shift) & 255]++;
      keys2[at] = keys[j];
      vals2[at] = vals[j];
    }
    [keys, keys2] = [keys2, keys];
    [vals, vals2] = [vals2, vals];
  }
  return vals;
}

/** A token and its log-probability. */
export interface TokenLogprob {
  id: number;
  logprob: number;
}

/**
 * Log-softmax of a row at one id, and the `top` most likely ids (ties: lower id first), computed
 * in float64 in id order. -Infinity entries (masked tokens) have probability 0 and are never listed.
 */
export function logprobsOf(row: Float32Array, id: number, top = 0): { logprob: number; top: TokenLogprob[] } {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) if (row[i] > -Infinity) sum += Math.exp(row[i] - max);
  const lse = max + Math.log(sum);
  const lp = (i: number) => (row[i] > -Infinity ? row[i] - lse : -Infinity);
  return { logprob: lp(id), top: top > 0 ? Array.from(topCandidates(row, top)).filter((i) => row[i] > -Infinity).map((i) => ({ id: i, logprob: lp(i) })) : [] };
}

/**
 * Restricts what may be drawn (JSON mode): `mask` sets the logits of forbidden ids to -Infinity
 * in a row the sampler owns, given how many tokens may still be generated (this one included);
 * `accept` follows the drawn id and says whether the output is complete (generation then stops).
 */
export interface TokenConstraint {
  mask(row: Float32Array, remaining: number): void;
  accept(id: number): boolean;
}
