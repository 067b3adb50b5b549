/**
 * Exact n-gram speculative decoding (`--spec N`): after each sampled token, up to N following tokens
 * are guessed from earlier text and the model runs the token and the guesses in ONE forward pass;
 * each guess the sampler then confirms saves a forward. On K3 a forward streams the trunk and up to
 * 1,472 experts, and guesses mostly route to the experts the token already needs, so a confirmed
 * guess costs a fraction of a token.
 *
 * Exact, not approximate: the verification pass runs the KDA recurrence ("recurrent" core), which
 * makes a multi-token call bit-identical to one-token calls (the GATE 3 property), MoE chunk-union
 * and MLA are bit-identical per token too, and the sampler draws once per emitted token, in order,
 * from the row the plain decoder would have given it. So the ids, the text and every logit are the
 * same with and without speculation, for greedy and seeded sampling alike (tested).
 *
 * Rejected guesses: the state is checkpointed before each verification (KDA states copied into
 * preallocated buffers, MLA caches only remember their length and are truncated), restored on a
 * rejection, and the accepted prefix is fed again in front of the next verification pass.
 */
import { KdaState } from "@k3/kda";
import { MlaCache } from "@k3/mla";
import { UsageError } from "./errors.js";
import type { ForwardOptions, Model, ModelState } from "./model.js";

/**
 * Guesses up to `maxDraft` tokens that follow `context` (which ends with the token just sampled).
 * Any guess is safe: a wrong one only costs its verification row. Default: ngramDraft.
 */
export type Drafter = (context: readonly number[], maxDraft: number) => number[];

/** How drafts are found (defaults in parentheses). */
export interface NgramDraftOptions {
  /** Longest suffix of the context looked up (8) and the shortest that may draft (2). */
  maxMatch?: number;
  minMatch?: number;
  /** A suffix seen only once drafts only if it is at least this long (4); two or more sightings must agree. */
  singleMatchMin?: number;
}

/**
 * Up to `maxDraft` tokens that followed the longest earlier occurrence(s) of the context's suffix.
 * Evidence-gated: with several earlier occurrences the draft is what all of them agree on; a single
 * occurrence drafts only for a long suffix. Returns [] when nothing qualifies.
 */
export function ngramDraft(context: ArrayLike<number>, maxDraft: number, opts: NgramDraftOptions = {}): number[] {
  const n = context.length;
  const maxMatch = Math.min(opts.maxMatch ?? 8, n - 1);
  const minMatch = Math.max(1, opts.minMatch ?? 2);
  const singleMin = opts.singleMatchMin ?? 4;
  if (maxDraft < 1) return [];
  for (let m = maxMatch; m >= minMatch; m--) {
    const starts: number[] = []; // where an earlier copy of the last m tokens ends (exclusive)
    for (let end = n - 1; end >= m; end--) {
      let k = 0;
      while (k < m && context[end - 1 - k] === context[n - 1 - k]) k++;
      if (k === m) starts.push(end);
    }
    if (starts.length === 0 || (starts.length === 1 && m < singleMin)) continue;
    // Past the end of the context the copy continues from the draft itself (a cycle repeats).
    const draft: number[] = [];
    const tokenAt = (at: number) => (at < n ? context[at] : draft[at - n]);
    for (let j = 0; j < maxDraft; j++) {
      const tok = tokenAt(starts[0] + j);
      if (!starts.every((s) => tokenAt(s + j) === tok)) break;
      draft.push(tok);
    }
    if (draft.length > 0) return draft;
  }
  return [];
}

/** The state before a verification pass: KDA states copied, MLA caches by length. */
class StateCheckpoint {
  private kda: (KdaState | null)[] = [];
  private mlaLength: number[] = [];
  private pos = 0;
  private ids = 0;

  save(state: ModelState): void {
    state.layers.forEach((l, i) => {
      if (l instanceof KdaState) this.kda[i] = this.kda[i] ? this.kda[i]!.copyFrom(l) : l.clone();
      else this.mlaLength[i] = (l as MlaCache).length;
    });
    this.pos = state.pos;
    this.ids = state.ids.length;
  }

  restore(state: ModelState): void {
    state.layers.forEach((l, i) => {
      if (l instanceof KdaState) l.copyFrom(this.kda[i]!);
      else (l as MlaCache).truncate(this.mlaLength[i]);
    });
    state.pos = this.pos;
    state.ids.length = this.ids;
  }
}

export interface SpeculationStats {
  /** Verification passes that carried drafts, tokens drafted, drafts the sampler confirmed. */
  rounds: number;
  drafted: number;
  accepted: number;
  /** Forward passes decode made (plain steps and verifications). */
  forwards: number;
}

/**
 * Stands in for decode's `model.forward([id], state)`: `next(id, context, limit)` returns the
 * logits after `id` (just sampled; `context` ends with it), from a verification pass or, while the
 * sampler keeps confirming drafts, from rows already computed. `settle()` must run when decoding
 * stops, so the state holds exactly the fed tokens again.
 */
export class SpeculativeDecoder {
  readonly stats: SpeculationStats = { rounds: 0, drafted: 0, accepted: 0, forwards: 0 };
  private readonly checkpoint = new StateCheckpoint();
  private rows: Float32Array | null = null; // rows of the pending verification: id, d1 .. dn
  private fed: number[] = []; // tokens fed since the checkpoint, before the drafts
  private drafts: number[] = [];
  private at = 0; // the row handed out last

  constructor(
    private readonly model: Model,
    private readonly state: ModelState,
    private readonly fwd: ForwardOptions,
    private readonly maxDraft: number,
    private readonly drafter: Drafter = (context, max) => ngramDraft(context, max),
  ) {}

  /** `limit`: most drafts worth verifying (tokens still to sample after the next one). */
  async next(id: number, context: readonly number[], limit: number): Promise<Float32Array> {
    let replay: number[] = [];
    if (this.rows) {
      if (this.at < this.drafts.length && id === this.drafts[this.at]) {
        this.at++;
        this.stats.accepted++;
        return this.row(this.at);
      }
      if (this.at < this.drafts.length) {
        // The sampler parted from the drafts: back to the checkpoint, and feed the confirmed part again.
        this.checkpoint.restore(this.state);
        replay = [...this.fed, ...this.drafts.slice(0, this.at)];
      }
      this.rows = null;
    }
    return this.verify(replay, id, context, limit);
  }

  /** Leaves the state holding exactly the tokens fed so far (drops unconfirmed drafts). */
  async settle(): Promise<void> {
    if (this.rows && this.at < this.drafts.length) {
      this.checkpoint.restore(this.state);
      await this.model.forward([...this.fed, ...this.drafts.slice(0, this.at)], this.state, { ...this.fwd, kdaCore: "recurrent", noLogits: true });
    }
    this.rows = null;
  }

  private async verify(replay: number[], id: number, context: readonly number[], limit: number): Promise<Float32Array> {
    const drafts = this.draft(context, Math.min(this.maxDraft, limit));
    const ids = [...replay, id, ...drafts];
    this.stats.forwards++;
    const opts: ForwardOptions = { ...this.fwd, kdaCore: "recurrent" };
    if (drafts.length === 0) return this.model.forward(ids, this.state, opts);
    this.checkpoint.save(this.state);
    this.stats.rounds++;
    this.stats.drafted += drafts.length;
    this.rows = await this.model.forward(ids, this.state, { ...opts, logitsFrom: replay.length });
    this.fed = [...replay, id];
    this.drafts = drafts;
    this.at = 0;
    return this.row(0);
  }

  /** The drafter's guess, checked: ids in the vocabulary, at most `max` of them. */
  private draft(context: readonly number[], max: number): number[] {
    if (max < 1) return [];
    const d = this.drafter(context, max);
    const V = this.model.cfg.vocabSize;
    if (!Array.isArray(d) || !d.every((t) => Number.isInteger(t) && t >= 0 && t < V)) throw new UsageError(`speculative drafter: returned ${JSON.stringify(d).slice(0, 80)}, expected an array of token ids in 0..${V - 1}`);
    return d.slice(0, max);
  }

  private row(i: number): Float32Array {
    const V = this.model.cfg.vocabSize;
    return this.rows!.subarray(i * V, (i + 1) * V);
  }
}
