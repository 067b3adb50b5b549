/**
 * `k3 run --dump-logits FILE` and `k3 compare-logits A B`: every decode step's logits as a
 * .safetensors file (tensors `logits.<step>` F32 [vocab], `ids` I32 [steps] = the token sampled at
 * each step; metadata: format, model fingerprint, prompt ids), readable by any safetensors reader
 * (e.g. `safetensors.torch.load_file`), streamed to disk step by step; and a comparison of two
 * such files (ours, another build's, or a PyTorch reference written in the same layout).
 */
import { openSafetensorsSync, SafetensorsWriter, typedView, type Checkpoint } from "@k3/safetensors";
import { UsageError } from "./errors.js";

export const LOGITS_FORMAT = "k3-logits-v1";

/** Streams each step's logits into a .safetensors file; finish() adds the ids and renames it into place. */
export class LogitsDumper {
  private readonly writer: SafetensorsWriter;
  private steps = 0;
  private vocab = 0;

  constructor(file: string, meta: { model: string; fingerprint: string; promptIds: number[] }) {
    this.writer = new SafetensorsWriter(file, {
      metadata: { format: LOGITS_FORMAT, model: meta.model, fingerprint: meta.fingerprint, prompt_ids: JSON.stringify(meta.promptIds) },
      fsync: false,
    });
  }

  /** The logits the sampler is about to draw step `step` from. */
  add(logits: Float32Array, step: number): void {
    if (step !== this.steps) throw new Error(`logits dump: step ${step} after ${this.steps - 1}`);
    this.vocab = logits.length;
    this.writer.add(`logits.${step}`, "F32", [logits.length], logits);
    this.steps++;
  }

  /** `ids[i]` = the token sampled from step i's logits. Returns the path. */
  finish(ids: number[]): string {
    if (ids.length !== this.steps) throw new Error(`logits dump: ${ids.length} ids for ${this.steps} steps`);
    this.writer.add("ids", "I32", [ids.length], Int32Array.from(ids));
    return this.writer.finish();
  }

  abort(): void {
    this.writer.abort();
  }
}

/** One dump, read back. */
export interface LogitsFile {
  file: string;
  promptIds: number[] | null;
  ids: number[];
  /** Lazily read rows. */
  row(step: number): Float32Array;
  steps: number;
  vocab: number;
}

export function readLogits(file: string): LogitsFile {
  let ck: Checkpoint;
  try {
    ck = openSafetensorsSync(file);
  } catch (e) {
    throw new UsageError(`${file}: ${(e as Error).message}`, { cause: e });
  }
  const meta = (ck.metadata ?? {}) as Record<string, string>;
  if (!ck.has("ids")) throw new UsageError(`${file}: no "ids" tensor (not a logits dump from k3 run --dump-logits?)`);
  const idsInfo = ck.get("ids");
  if (idsInfo.dtype !== "I32" || idsInfo.shape.length !== 1) throw new UsageError(`${file}: "ids" is ${idsInfo.dtype} [${idsInfo.shape}], expected I32 [steps]`);
  const ids = Array.from(typedView(ck.readSync("ids"), "I32") as Int32Array);
  let vocab = -1;
  for (let s = 0; s < ids.length; s++) {
    const t = ck.tryGet(`logits.${s}`);
    if (!t) throw new UsageError(`${file}: "ids" has ${ids.length} steps but there is no logits.${s}`);
    if (t.dtype !== "F32" || t.shape.length !== 1 || (vocab >= 0 && t.shape[0] !== vocab)) throw new UsageError(`${file}: logits.${s} is ${t.dtype} [${t.shape}], expected F32 [${vocab >= 0 ? vocab : "vocab"}]`);
    vocab = t.shape[0];
  }
  let promptIds: number[] | null = null;
  if (meta.prompt_ids !== undefined) {
    try {
      promptIds = JSON.parse(meta.prompt_ids);
    } catch {
      throw new UsageError(`${file}: metadata prompt_ids is not JSON`);
    }
  }
  return { file, promptIds, ids, steps: ids.length, vocab: Math.max(0, vocab), row: (s) => typedView(ck.readSync(`logits.${s}`), "F32") as Float32Array };
}

export interface LogitsComparison {
  steps: number;
  /** Per step: max |a-b|, ||a-b|| / ||b||, both argmaxes. */
  perStep: Array<{ step: number; maxAbs: number; relL2: number; argmaxA: number; argmaxB: number }>;
  worstMaxAbs: number;
  worstRelL2: number;
  /** First step whose argmax differs, or null. */
  firstArgmaxDiff: number | null;
  /** Both files sampled the same ids at every compared step. */
  sameIds: boolean;
  identical: boolean;
}

function argmaxOf(a: Float32Array): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

/** Compares the common steps of two dumps (B is the reference for the relative error). */
export function compareLogits(a: LogitsFile, b: LogitsFile): LogitsComparison {
  if (a.vocab !== b.vocab) throw new UsageError(`${a.file} has vocab ${a.vocab}, ${b.file} has ${b.vocab}`);
  if (a.promptIds && b.promptIds && JSON.stringify(a.promptIds) !== JSON.stringify(b.promptIds))
    throw new UsageError(`${a.file} and ${b.file} were made from different prompts (${a.promptIds.length} vs ${b.promptIds.length} ids): their logits are not comparable`);
  const steps = Math.min(a.steps, b.steps);
  const perStep: LogitsComparison["perStep"] = [];
  let identical = a.steps === b.steps;
  for (let s = 0; s < steps; s++) {
    const x = a.row(s);
    const y = b.row(s);
    let maxAbs = 0;
    let d2 = 0;
    let n2 = 0;
    for (let i = 0; i < x.length; i++) {
      const d = x[i] - y[i];
      if (Math.abs(d) > maxAbs || Number.isNaN(d)) maxAbs = Number.isNaN(d) ? Infinity : Math.abs(d);
      d2 += d * d;
      n2 += y[i] * y[i];
      if (!Object.is(x[i], y[i])) identical = false;
    }
    perStep.push({ step: s, maxAbs, relL2: n2 > 0 ? Math.sqrt(d2 / n2) : Math.sqrt(d2), argmaxA: argmaxOf(x), argmaxB: argmaxOf(y) });
  }
  const diff = perStep.find((p) => p.argmaxA !== p.argmaxB);
  return {
    steps,
    perStep,
    worstMaxAbs: Math.max(0, ...perStep.map((p) => p.maxAbs)),
    worstRelL2: Math.max(0, ...perStep.map((p) => p.relL2)),
    firstArgmaxDiff: diff ? diff.step : null,
    sameIds: a.ids.slice(0, steps).every((id, i) => id === b.ids[i]),
    identical,
  };
}

export function formatComparison(a: LogitsFile, b: LogitsFile, c: LogitsComparison): string {
  const lines = [
    `${a.file}: ${a.steps} steps; ${b.file}: ${b.steps} steps; vocab ${a.vocab}; compared ${c.steps}`,
    c.identical ? "bit-identical" : `worst max|a-b| ${c.worstMaxAbs.toExponential(3)}, worst rel-L2 ${c.worstRelL2.toExponential(3)}`,
    c.firstArgmaxDiff === null ? `argmax agrees at every step; sampled ids ${c.sameIds ? "identical" : "differ (sampling)"}` : `argmax first differs at step ${c.firstArgmaxDiff}`,
  ];
  for (const p of c.perStep.slice(0, 8)) lines.push(`  step ${p.step}: max|a-b| ${p.maxAbs.toExponential(2)}, rel-L2 ${p.relL2.toExponential(2)}, argmax ${p.argmaxA} / ${p.argmaxB}`);
  if (c.steps > 8) lines.push(`  ... ${c.steps - 8} more steps (--json for all)`);
  return lines.join("\n");
}
