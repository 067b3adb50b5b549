/**
 * Teacher-forced agreement (`k3 run --tf-check`): feed a reference sequence (prompt + the tokens a
 * reference implementation produced after it) and, at every reference position, compare the
 * model's greedy choice with the reference token. One prefill pass instead of a generation, so a
 * long reference is checked at prefill speed, and one wrong layer shows up as the first position
 * where the two part (the reference engine's GATE 1: 32/32 on its tiny oracle).
 *
 * The prompt part runs like a normal prefill (the same chunk boundaries, so its state is the state
 * generation would have); the rest runs chunk by chunk with every position's logits, of which only
 * the argmax (and the two compared logits) are kept: memory stays at one chunk of logits.
 */
import { readFileSync } from "node:fs";
import { UsageError } from "./errors.js";
import type { Model } from "./model.js";
import { argmax } from "./sampler.js";

export interface TeacherForcingMismatch {
  /** Index into the reference continuation (0 = the first token after the prompt). */
  index: number;
  /** The token the reference has there, and what the model's argmax picked. */
  reference: number;
  model: number;
  /** Their logits at that position: how close the call was. */
  referenceLogit: number;
  modelLogit: number;
}

export interface TeacherForcingResult {
  promptTokens: number;
  /** Continuation positions checked (the reference tokens after the prompt). */
  positions: number;
  agreed: number;
  /** agreed / positions. */
  agreement: number;
  /** The model's argmax at every continuation position. */
  predicted: number[];
  /** The first 16 positions where the model and the reference part. */
  mismatches: TeacherForcingMismatch[];
  seconds: number;
}

export interface TeacherForcingOptions {
  /** The prefill chunk the run uses (EngineOptions.chunkSize, default 64). */
  chunkSize?: number;
  signal?: AbortSignal;
}

const MAX_MISMATCHES = 16;

/** Runs prompt ++ continuation teacher-forced and compares the argmax with each continuation token. */
export async function teacherForced(model: Model, prompt: number[], continuation: number[], options: TeacherForcingOptions = {}): Promise<TeacherForcingResult> {
  if (prompt.length === 0) throw new UsageError("teacher forcing: the prompt is empty");
  if (continuation.length === 0) throw new UsageError("teacher forcing: the reference has no tokens after the prompt");
  const V = model.cfg.vocabSize;
  for (const id of [...prompt, ...continuation])
    if (!Number.isInteger(id) || id < 0 || id >= V) throw new UsageError(`teacher forcing: ${id} is not a token id in 0..${V - 1}`);
  const t0 = performance.now();
  const chunk = Math.max(1, options.chunkSize ?? 64);
  const fwd = { chunkSize: chunk, signal: options.signal };
  const full = [...prompt, ...continuation];
  const state = model.newState();
  // Position p's logits predict token p + 1: the checked positions are P-1 .. P+R-2.
  const first = prompt.length - 1;
  const last = full.length - 2;
  // The prompt up to a chunk boundary without logits, as a prefill would run it.
  const aligned = Math.floor(first / chunk) * chunk;
  if (aligned > 0) await model.forward(full.slice(0, aligned), state, fwd);
  const predicted: number[] = [];
  const mismatches: TeacherForcingMismatch[] = [];
  let agreed = 0;
  for (let c0 = aligned; c0 <= last; c0 += chunk) {
    const piece = full.slice(c0, Math.min(c0 + chunk, last + 1));
    const logits = await model.forward(piece, state, { ...fwd, allLogits: true });
    for (let t = Math.max(0, first - c0); t < piece.length; t++) {
      const row = logits.subarray(t * V, (t + 1) * V);
      const index = c0 + t - first;
      const reference = continuation[index];
      const got = argmax(row);
      predicted.push(got);
      if (got === reference) agreed++;
      else if (mismatches.length < MAX_MISMATCHES) mismatches.push({ index, reference, model: got, referenceLogit: row[reference], modelLogit: row[got] });
    }
  }
  const positions = continuation.length;
  return { promptTokens: prompt.length, positions, agreed, agreement: agreed / positions, predicted, mismatches, seconds: (performance.now() - t0) / 1000 };
}

/**
 * The reference of `--tf-check`: comma-separated ids (the continuation), or a JSON run report with
 * `generated_ids` (ours, or the reference engine's k3_run.json, which also carries `prompt_ids`).
 * Returns the continuation, and the report's prompt ids when it has them.
 */
export function loadReference(spec: string): { continuation: number[]; prompt?: number[] } {
  const ids = (xs: unknown, what: string): number[] => {
    if (!Array.isArray(xs) || !xs.every((x) => Number.isInteger(x) && x >= 0)) throw new UsageError(`--tf-check ${spec}: ${what} must be an array of token ids`);
    return xs as number[];
  };
  if (/^\s*\d+(\s*,\s*\d+)*\s*$/.test(spec)) return { continuation: spec.split(",").map((s) => Number(s.trim())) };
  let report: Record<string, unknown>;
  try {
    report = JSON.parse(readFileSync(spec, "utf8"));
  } catch (e) {
    throw new UsageError(`--tf-check ${spec}: not a list of ids, and not a readable JSON run report (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, { cause: e });
  }
  if (report === null || typeof report !== "object" || !("generated_ids" in report)) throw new UsageError(`--tf-check ${spec}: the JSON has no generated_ids (expected a run report from k3 run --json)`);
  const continuation = ids(report.generated_ids, "generated_ids");
  return "prompt_ids" in report ? { continuation, prompt: ids(report.prompt_ids, "prompt_ids") } : { continuation };
}

/** The human-readable verdict. */
export function formatTeacherForcing(r: TeacherForcingResult): string {
  const lines = [
    `teacher-forced agreement: ${r.agreed}/${r.positions} (${(100 * r.agreement).toFixed(1)}%) after a ${r.promptTokens}-token prompt, ${r.seconds.toFixed(3)} s`,
  ];
  for (const m of r.mismatches)
    lines.push(`  position ${m.index}: reference ${m.reference} (logit ${m.referenceLogit.toFixed(4)}), model ${m.model} (logit ${m.modelLogit.toFixed(4)})`);
  if (r.positions - r.agreed > r.mismatches.length) lines.push(`  ... ${r.positions - r.agreed - r.mismatches.length} more`);
  return lines.join("\n");
}
