/**
 * Perplexity of a text (`k3 eval --text FILE`): the mean negative log-likelihood of every token
 * given the ones before it, from one chunked prefill with every position's logits. Position p's
 * logits score token p + 1, so a sequence of n ids scores n - 1 tokens (the first, [BOS] for a
 * text, is given). Only one chunk of logits is held at a time.
 */
import { UsageError } from "./errors.js";
import type { Model } from "./model.js";

/** -log softmax(row)[target] in float64 (shifted by the row's max, so no exp overflows). */
export function tokenNll(row: Float32Array, target: number): number {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  return Math.log(sum) + max - row[target];
}

export interface NllResult {
  /** Tokens run (the first is not scored). */
  tokens: number;
  /** NLL (nats) of ids[1..n-1], each given the ones before it. */
  nll: Float64Array;
  meanNll: number;
  /** exp(meanNll). */
  perplexity: number;
}

/** Runs ids through the model in chunks of `chunkSize` and scores every next token. */
export async function sequenceNll(model: Model, ids: number[], opts: { chunkSize?: number; signal?: AbortSignal } = {}): Promise<NllResult> {
  const V = model.cfg.vocabSize;
  if (ids.length < 2) throw new UsageError(`eval: ${ids.length} token(s); at least 2 are needed to score one`);
  for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= V) throw new UsageError(`eval: ${id} is not a token id in 0..${V - 1}`);
  const chunk = Math.max(1, opts.chunkSize ?? 64);
  const state = model.newState();
  const nll = new Float64Array(ids.length - 1);
  // The last position predicts nothing: it is not run.
  for (let c0 = 0; c0 < ids.length - 1; c0 += chunk) {
    const piece = ids.slice(c0, Math.min(c0 + chunk, ids.length - 1));
    const logits = await model.forward(piece, state, { chunkSize: chunk, signal: opts.signal, allLogits: true });
    for (let t = 0; t < piece.length; t++) nll[c0 + t] = tokenNll(logits.subarray(t * V, (t + 1) * V), ids[c0 + t + 1]);
  }
  let sum = 0;
  for (const x of nll) sum += x;
  const meanNll = sum / nll.length;
  return { tokens: ids.length, nll, meanNll, perplexity: Math.exp(meanNll) };
}

/** The human-readable line. */
export function formatNll(r: NllResult, seconds: number): string {
  return `eval: ${r.nll.length} tokens scored (${r.tokens} run), mean NLL ${r.meanNll.toFixed(6)} nats, perplexity ${r.perplexity.toFixed(4)}, ${seconds.toFixed(3)} s (${(r.tokens - 1) / seconds >= 100 ? ((r.tokens - 1) / seconds).toFixed(0) : ((r.tokens - 1) / seconds).toFixed(1)} tok/s)`;
}
