/**
 * The grouping rule of docs/formats.md §1.4, applied to one name. It is written without regular
 * expressions so that native/src/st_classify.c can implement the very same steps.
 *
 *   [model. | language_model.model.] layers.{L}. <rest>
 *     rest = (mlp|block_sparse_moe).experts.{E}.<x>      -> expert E of layer L
 *     rest = (mlp|block_sparse_moe).experts.<non-digit>   -> fused experts (gpt-oss style)
 *     rest = (mlp|block_sparse_moe).shared_expert(s).<x>  -> shared expert
 *     anything else in the layer                          -> trunk
 *   anything else                                         -> global
 * Numbers have 1..9 decimal digits; a longer number does not match.
 */
import { KIND_EXPERT, KIND_FUSED, KIND_GLOBAL, KIND_SHARED, KIND_TRUNK } from "./table.js";

export interface NameClass {
  layer: number;
  expert: number;
  kind: number;
}

/** Reads 1..9 digits at `at` followed by '.'; returns [value, index after the dot] or null. */
function numberThenDot(s: string, at: number): [number, number] | null {
  let v = 0;
  let i = at;
  while (i < s.length && i - at < 10) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) break;
    v = v * 10 + (c - 48);
    i++;
  }
  const digits = i - at;
  if (digits < 1 || digits > 9 || i >= s.length || s.charCodeAt(i) !== 46) return null;
  return [v, i + 1];
}

function startsAt(s: string, at: number, prefix: string): boolean {
  return s.startsWith(prefix, at);
}

export function classifyName(name: string): NameClass {
  let p = 0;
  if (startsAt(name, 0, "model.")) p = 6;
  else if (startsAt(name, 0, "language_model.model.")) p = 21;
  if (!startsAt(name, p, "layers.")) return { layer: -1, expert: -1, kind: KIND_GLOBAL };
  const layer = numberThenDot(name, p + 7);
  if (!layer) return { layer: -1, expert: -1, kind: KIND_GLOBAL };
  p = layer[1];
  if (startsAt(name, p, "mlp.")) p += 4;
  else if (startsAt(name, p, "block_sparse_moe.")) p += 17;
  else return { layer: layer[0], expert: -1, kind: KIND_TRUNK };
  if (startsAt(name, p, "experts.")) {
    const e = numberThenDot(name, p + 8);
    if (e && e[1] < name.length) return { layer: layer[0], expert: e[0], kind: KIND_EXPERT };
    const c = name.charCodeAt(p + 8);
    if (p + 8 < name.length && !(c >= 48 && c <= 57)) return { layer: layer[0], expert: -1, kind: KIND_FUSED };
    return { layer: layer[0], expert: -1, kind: KIND_TRUNK };
  }
  if (startsAt(name, p, "shared_experts.") || startsAt(name, p, "shared_expert.")) {
    return { layer: layer[0], expert: -1, kind: KIND_SHARED };
  }
  return { layer: layer[0], expert: -1, kind: KIND_TRUNK };
}
