/**
 * `--expert-profile FILE`: how often each MoE layer's experts were requested, kept between runs of
 * one checkpoint. At load the counts seed the expert cache's lfu policy and choose what the warm
 * reads (each layer's most requested experts instead of the first ones on disk); at close the
 * counts of this run (seeds included, halved as they age) are written back, atomically.
 *
 *   { "format": "k3-expert-profile-v1", "fingerprint": "<the checkpoint's>",
 *     "layers": { "<layer>": [[expert, count], ...] } }
 *
 * A profile of another checkpoint, or one that does not parse, is refused naming the file and
 * the field; a missing file is a first run.
 */
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { UsageError } from "./errors.js";

export const EXPERT_PROFILE_FORMAT = "k3-expert-profile-v1";
/** 93 layers x 896 experts as JSON is ~2 MB; anything far above is not a profile. */
const MAX_PROFILE_BYTES = 64 * 2 ** 20;

export type ExpertCounts = Map<number, Map<number, number>>;

export interface ProfileShape {
  fingerprint: string;
  moeLayers: readonly number[];
  numExperts: number;
}

/** The counts FILE holds, or null when it does not exist. */
export function readExpertProfile(file: string, shape: ProfileShape): ExpertCounts | null {
  if (!existsSync(file)) return null;
  const bad = (what: string) => new UsageError(`--expert-profile ${file}: ${what}`);
  const size = statSync(file).size;
  if (size > MAX_PROFILE_BYTES) throw bad(`${size} bytes, more than a profile's ${MAX_PROFILE_BYTES}`);
  let doc: unknown;
  try {
    doc = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw bad(`not JSON (${(e as Error).message})`);
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) throw bad("expected a JSON object");
  const d = doc as Record<string, unknown>;
  if (d.format !== EXPERT_PROFILE_FORMAT) throw bad(`format ${JSON.stringify(d.format)}, expected "${EXPERT_PROFILE_FORMAT}"`);
  if (d.fingerprint !== shape.fingerprint) throw bad(`made for checkpoint ${JSON.stringify(d.fingerprint)}, this one is ${JSON.stringify(shape.fingerprint)} (use another file per checkpoint)`);
  if (typeof d.layers !== "object" || d.layers === null || Array.isArray(d.layers)) throw bad("layers: expected an object of layer -> [[expert, count], ...]");
  const moe = new Set(shape.moeLayers);
  const out: ExpertCounts = new Map();
  for (const [key, list] of Object.entries(d.layers as Record<string, unknown>)) {
    const layer = Number(key);
    if (!/^\d+$/.test(key) || !moe.has(layer)) throw bad(`layers.${key}: not a MoE layer of this checkpoint`);
    if (!Array.isArray(list)) throw bad(`layers.${key}: expected [[expert, count], ...]`);
    const counts = new Map<number, number>();
    for (const [i, pair] of list.entries()) {
      const ok = Array.isArray(pair) && pair.length === 2 && Number.isInteger(pair[0]) && pair[0] >= 0 && pair[0] < shape.numExperts && typeof pair[1] === "number" && Number.isFinite(pair[1]) && pair[1] >= 0;
      if (!ok) throw bad(`layers.${key}[${i}]: expected [expert 0..${shape.numExperts - 1}, count >= 0], got ${JSON.stringify(pair)?.slice(0, 80)}`);
      if (counts.has(pair[0])) throw bad(`layers.${key}: expert ${pair[0]} is listed twice`);
      counts.set(pair[0], pair[1]);
    }
    out.set(layer, counts);
  }
  return out;
}

/** Writes the counts to FILE (through FILE.tmp and a rename: a crash never leaves half a profile). */
export function writeExpertProfile(file: string, fingerprint: string, counts: ExpertCounts): void {
  const layers: Record<string, Array<[number, number]>> = {};
  for (const [layer, c] of [...counts].sort((a, b) => a[0] - b[0]))
    layers[layer] = [...c].filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0] - b[0]);
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, JSON.stringify({ format: EXPERT_PROFILE_FORMAT, fingerprint, layers }) + "\n");
  renameSync(tmp, file);
}

/** A layer's experts, most counted first (ties and uncounted ones in id order): the warm takes its first `slots`. */
export function hottestFirst(counts: Map<number, number> | undefined, numExperts: number): number[] {
  const ids = Array.from({ length: numExperts }, (_, i) => i);
  if (!counts) return ids;
  return ids.sort((a, b) => (counts.get(b) ?? 0) - (counts.get(a) ?? 0) || a - b);
}
