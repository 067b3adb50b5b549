/**
 * A bit-exact prompt cache: snapshots of the model state taken during prompt prefill, so a request
 * whose prompt starts with an earlier prompt (a chat client resending the conversation each turn)
 * prefills only the new tokens.
 *
 *   const cache = new PromptCache({ slots: 2 });
 *   await engine.complete(turn1Ids, { promptCache: cache, temperature: 0 });
 *   const r = await engine.complete(turn2Ids, { promptCache: cache, temperature: 0 }); // r.cachedTokens > 0
 *
 * Why snapshots are only taken at aligned positions (snapshotGrain: multiples of 64 when the chunk
 * size is a multiple of 64, else of the chunk size): Model.forward runs a prompt in chunks of
 * `chunkSize` counted from the start of the call, the mixers run each chunk in 64-token pieces, and
 * the KDA layers use the chunked WY/UT form inside a multi-token piece but the one-token recurrence
 * for T = 1; the two agree to ~1e-6, not bit for bit. A state restored at an aligned position of a
 * PROMPT prefill and continued with the rest of the prompt sees exactly the piece boundaries of one
 * cold forward(prompt), so the logits are the same bits. States after decode steps or at unaligned
 * positions are never stored. The key is the exact token-id sequence (plus the engine's
 * numerics key: checkpoint fingerprint, chunk size, KDA form); sampling options do not enter it.
 */
import { KdaState } from "./layers/kda.js";
import { MlaCache } from "./layers/mla.js";
import { MIXER_PIECE } from "./census.js";
import type { LayerState, ModelState } from "./model.js";
import { UsageError } from "./errors.js";
import { DEFAULTS, ENGINE_RULES, satisfies } from "./options.js";

export interface PromptCacheOptions {
  /** Snapshots kept at most (least recently used evicted first); default 1, 0 = cache off. */
  slots?: number;
  /** Total bytes of layer state the snapshots may hold (default 1 GiB); a larger snapshot is not stored. */
  maxBytes?: number;
}

/** Default cap on the bytes all snapshots hold together. */
export const DEFAULT_PROMPT_CACHE_BYTES = DEFAULTS.promptCacheMb * 2 ** 20;

/** One stored state: the model state after prefilling exactly `ids` (a chunk-aligned prompt prefix). */
export interface PromptSnapshot {
  /** The engine numerics the state was computed with (checkpoint fingerprint, chunk size, KDA form). */
  readonly key: string;
  /** Prompt ids the state has consumed (state.pos === ids.length). */
  readonly ids: readonly number[];
  /** Bytes of layer state held (KDA recurrent + conv states, MLA latent rows). */
  readonly bytes: number;
  readonly state: ModelState;
}

/** Counters since the cache was made (what a server's log or /health could show). */
export interface PromptCacheStats {
  lookups: number;
  hits: number;
  /** Prompt tokens that were restored instead of prefilled, summed over hits. */
  reusedTokens: number;
  stored: number;
  evicted: number;
  /** Snapshots refused because alone they exceed maxBytes. */
  tooLarge: number;
}

/** Bytes a layer state holds: KDA conv tails + S; MLA: its whole buffer (capacity rows). */
export function layerStateBytes(s: LayerState): number {
  return s instanceof KdaState ? s.byteLength : s.data.byteLength;
}

/** Bytes a model state holds (sum of its layers' states). */
export function stateBytes(state: ModelState): number {
  return state.layers.reduce((a, l) => a + layerStateBytes(l), 0);
}

/**
 * An independent copy of a state. MLA caches are copied with room for `extraTokens` more positions
 * (0: exactly their length, the compact form a snapshot is kept in); the capacity never changes
 * the values, the mixer grows a full cache by doubling anyway.
 */
export function copyState(state: ModelState, extraTokens = 0): ModelState {
  return {
    pos: state.pos,
    ids: [...state.ids],
    layers: state.layers.map((l) => (l instanceof KdaState ? l.clone() : MlaCache.load(l.save(), l.config, Math.max(1, l.length + extraTokens)))),
  };
}

function isPrefix(prefix: readonly number[], of: readonly number[]): boolean {
  if (prefix.length > of.length) return false;
  for (let i = 0; i < prefix.length; i++) if (prefix[i] !== of[i]) return false;
  return true;
}

/** LRU set of chunk-aligned prompt-prefill snapshots, capped in count and bytes. */
export class PromptCache {
  readonly slots: number;
  readonly maxBytes: number;
  /** Most recently used last. */
  private entries: PromptSnapshot[] = [];
  private readonly counters: PromptCacheStats = { lookups: 0, hits: 0, reusedTokens: 0, stored: 0, evicted: 0, tooLarge: 0 };

  constructor(options: PromptCacheOptions = {}) {
    const slots = options.slots ?? DEFAULTS.promptCacheSlots;
    const maxBytes = options.maxBytes ?? DEFAULT_PROMPT_CACHE_BYTES;
    if (!satisfies(ENGINE_RULES.promptCacheSlots, slots)) throw new UsageError(`prompt cache slots ${slots}: expected ${ENGINE_RULES.promptCacheSlots.expected}`);
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new UsageError(`prompt cache maxBytes ${maxBytes}: expected a non-negative integer number of bytes`);
    this.slots = slots;
    this.maxBytes = maxBytes;
  }

  /** False when the cache can hold nothing (0 slots or 0 bytes). */
  get enabled(): boolean {
    return this.slots > 0 && this.maxBytes > 0;
  }

  /** Snapshots held. */
  get size(): number {
    return this.entries.length;
  }

  /** Bytes of layer state held by all snapshots. */
  get bytes(): number {
    return this.entries.reduce((a, e) => a + e.bytes, 0);
  }

  /** The held snapshots, least recently used first (read-only views: never advance their states). */
  snapshots(): readonly PromptSnapshot[] {
    return [...this.entries];
  }

  stats(): PromptCacheStats {
    return { ...this.counters };
  }

  /** Drops every snapshot. */
  clear(): void {
    this.counters.evicted += this.entries.length;
    this.entries = [];
  }

  /**
   * The longest snapshot for `key` whose ids are a prefix of `prompt` and leave at least one
   * prompt token to run (the logits come from the last one); marks it most recently used.
   * The returned state must not be advanced: restore() gives a copy to run.
   */
  lookup(key: string, prompt: readonly number[]): PromptSnapshot | null {
    this.counters.lookups++;
    let best: PromptSnapshot | null = null;
    for (const e of this.entries) {
      if (e.key !== key || e.ids.length > prompt.length - 1 || (best && e.ids.length <= best.ids.length)) continue;
      if (isPrefix(e.ids, prompt)) best = e;
    }
    if (!best) return null;
    this.touch(best);
    this.counters.hits++;
    this.counters.reusedTokens += best.ids.length;
    return best;
  }

  /** A copy of a snapshot's state to advance, with MLA room for `extraTokens` more positions. */
  restore(snapshot: PromptSnapshot, extraTokens = 0): ModelState {
    return copyState(snapshot.state, extraTokens);
  }

  /**
   * Stores a copy of `state` (which must be the state after prefilling exactly state.ids from
   * position 0, at a chunk-aligned position: the engine guarantees both). Evicts least recently
   * used snapshots to fit `slots` and `maxBytes`. Returns the snapshot, or null when the cache is
   * off or the state alone exceeds maxBytes.
   */
  store(key: string, state: ModelState): PromptSnapshot | null {
    if (!this.enabled || state.pos === 0) return null;
    if (state.ids.length !== state.pos) throw new UsageError(`prompt cache: a state at position ${state.pos} with ${state.ids.length} ids cannot be stored (its ids must be every id it consumed)`);
    const same = this.entries.find((e) => e.key === key && e.ids.length === state.ids.length && isPrefix(e.ids, state.ids));
    if (same) {
      this.touch(same);
      return same;
    }
    const state2 = copyState(state);
    const bytes = stateBytes(state2);
    if (bytes > this.maxBytes) {
      this.counters.tooLarge++;
      return null;
    }
    const snap: PromptSnapshot = { key, ids: state2.ids, bytes, state: state2 };
    this.entries.push(snap);
    this.counters.stored++;
    let total = this.bytes;
    while (this.entries.length > this.slots || total > this.maxBytes) {
      const old = this.entries.shift()!;
      total -= old.bytes;
      this.counters.evicted++;
    }
    return snap;
  }

  private touch(e: PromptSnapshot): void {
    const i = this.entries.indexOf(e);
    if (i >= 0 && i !== this.entries.length - 1) {
      this.entries.splice(i, 1);
      this.entries.push(e);
    }
  }
}

/**
 * Where a prompt prefill stops to take a snapshot: the largest multiple of `grain` that leaves at
 * least one prompt token for the logits (0 when there is none).
 */
export function snapshotPoint(promptLength: number, grain: number): number {
  return Math.floor((promptLength - 1) / grain) * grain;
}

/**
 * The positions a snapshot may sit at: every multiple of 64 (MIXER_PIECE) when the chunk size is
 * one, because a prefill cut at any such position gives the bits of an uncut one (the mixers run in
 * 64-token pieces; README "Prefill"), so a large chunk does not thin out the cache; else multiples
 * of the chunk size, where the cuts of one cold forward fall.
 */
export function snapshotGrain(chunkSize: number): number {
  return chunkSize % MIXER_PIECE === 0 ? MIXER_PIECE : chunkSize;
}
