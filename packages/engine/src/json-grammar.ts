/**
 * A byte-level JSON recognizer (a pushdown automaton over UTF-8 bytes) for constrained decoding:
 * `step(state, byte)` is the state after one more byte, or null when no valid JSON text (for the
 * schema) starts with the bytes so far. States are immutable (a linked stack of frozen-by-
 * convention frames), so a token trie can be walked from one state without copying or undoing.
 *
 * What it accepts: RFC 8259 JSON (strict UTF-8, escapes, numbers without leading zeros), with two
 * narrowings for generation: the top-level value is what the schema says (an object for JSON
 * mode), and at most MAX_WS whitespace bytes in a row (models otherwise loop on blank lines, the
 * reason llama.cpp's json.gbnf bounds them too). Nothing may follow the top-level value.
 *
 * `minCompletion(state)` is the exact length in bytes of the shortest text that completes the
 * value: JSON mode uses it to close the value within max_tokens (see json-mask.ts).
 */

/** What a value may be (json-schema.ts builds these from a JSON Schema). */
export type SchemaNode =
  | { kind: "any" }
  | { kind: "string" }
  | { kind: "number" }
  | { kind: "integer" }
  /** Exactly one of these JSON texts (enum, const, boolean, null), compared byte for byte. */
  | { kind: "literals"; values: Uint8Array[] }
  | { kind: "array"; items: SchemaNode }
  /** props null: any keys and values. Otherwise these keys, in this order, each optional unless required; no others. */
  | { kind: "object"; props: ObjectProp[] | null };

export interface ObjectProp {
  name: string;
  /** The key as JSON text, quotes included. */
  key: Uint8Array;
  value: SchemaNode;
  required: boolean;
}

/** Whitespace bytes allowed in a row between tokens. */
export const MAX_WS = 64;

export const ANY: SchemaNode = { kind: "any" };
/** JSON mode (`response_format: json_object`): an object with any keys and values. */
export const ANY_OBJECT: SchemaNode = { kind: "object", props: null };

const enc = new TextEncoder();
const LITERALS_ANY: Uint8Array[] = ["true", "false", "null"].map((s) => enc.encode(s));

// Frame tags.
const ROOT = 0;
const VALUE = 1;
const OBJ = 2;
const ARR = 3;
const STR = 4;
const NUM = 5;
const LIT = 6;

// Object / array phases.
const OPEN = 0; // after { or [
const KEY = 1; // a key is being read (its frame is above)
const COLON = 2; // after a key
const MEMBER = 3; // a value is being read (its frame is above)
const AFTER = 4; // after a value
const COMMA = 5; // after a comma

// Number phases (END_OK ones may end the number).
const N_START = 0;
const N_MINUS = 1;
const N_ZERO = 2;
const N_INT = 3;
const N_DOT = 4;
const N_FRAC = 5;
const N_E = 6;
const N_ESIGN = 7;
const N_EXP = 8;

interface RootFrame { t: 0; done: boolean }
interface ValueFrame { t: 1; schema: SchemaNode; ws: number }
interface ObjFrame { t: 2; schema: { kind: "object"; props: ObjectProp[] | null }; phase: number; last: number; ws: number }
interface ArrFrame { t: 3; items: SchemaNode; phase: number; ws: number }
/** esc: 0 none, 1 after a backslash, 2..5 hex digits of \u still due + 1; need: UTF-8 continuation bytes due, lo/hi: the next one's range. */
interface StrFrame { t: 4; esc: number; need: number; lo: number; hi: number }
interface NumFrame { t: 5; integer: boolean; phase: number }
/** live: indices of values still matching after `pos` bytes. */
interface LitFrame { t: 6; values: Uint8Array[]; live: number[]; pos: number }
type Frame = RootFrame | ValueFrame | ObjFrame | ArrFrame | StrFrame | NumFrame | LitFrame;

/** A recognizer state: the top frame and the rest of the stack. */
export interface JsonState {
  readonly f: Frame;
  readonly up: JsonState | null;
}

/** The state before any byte of a value of `schema`. */
export function initialState(schema: SchemaNode): JsonState {
  return { f: { t: VALUE, schema, ws: 0 }, up: { f: { t: ROOT, done: false }, up: null } };
}

/** True once the top-level value is complete (nothing more may follow). */
export function isComplete(s: JsonState): boolean {
  return s.f.t === ROOT && s.f.done;
}

/** True inside a string with no escape or UTF-8 sequence open (any plain string byte keeps it so). */
export function inPlainString(s: JsonState): boolean {
  return s.f.t === STR && s.f.esc === 0 && s.f.need === 0;
}

const isWs = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
const isDigit = (b: number) => b >= 0x30 && b <= 0x39;
const isHex = (b: number) => isDigit(b) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);

/** Feeds every byte; null when the bytes leave the language. */
export function stepBytes(s: JsonState | null, bytes: ArrayLike<number>): JsonState | null {
  for (let i = 0; i < bytes.length && s; i++) s = step(s, bytes[i]);
  return s;
}

/** The state after one more byte, or null. */
export function step(s: JsonState, b: number): JsonState | null {
  const f = s.f;
  switch (f.t) {
    case ROOT:
      return null;
    case VALUE:
      if (isWs(b)) return f.ws < MAX_WS ? { f: { t: VALUE, schema: f.schema, ws: f.ws + 1 }, up: s.up } : null;
      return startValue(f.schema, s.up!, b);
    case OBJ:
      return stepObj(f, s.up!, b);
    case ARR:
      return stepArr(f, s.up!, b);
    case STR:
      return stepStr(f, s.up!, b);
    case NUM:
      return stepNum(f, s.up!, b);
    case LIT:
      return stepLit(f, s.up!, b);
  }
}

/** The first byte of a value of `schema`, under `up`. */
function startValue(schema: SchemaNode, up: JsonState, b: number): JsonState | null {
  switch (schema.kind) {
    case "any":
      if (b === 0x7b) return { f: { t: OBJ, schema: ANY_OBJECT as ObjFrame["schema"], phase: OPEN, last: -1, ws: 0 }, up };
      if (b === 0x5b) return { f: { t: ARR, items: ANY, phase: OPEN, ws: 0 }, up };
      if (b === 0x22) return { f: PLAIN_STR, up };
      if (b === 0x2d || isDigit(b)) return stepNum({ t: NUM, integer: false, phase: N_START }, up, b);
      return startLit(LITERALS_ANY, up, b);
    case "object":
      return b === 0x7b ? { f: { t: OBJ, schema, phase: OPEN, last: -1, ws: 0 }, up } : null;
    case "array":
      return b === 0x5b ? { f: { t: ARR, items: schema.items, phase: OPEN, ws: 0 }, up } : null;
    case "string":
      return b === 0x22 ? { f: PLAIN_STR, up } : null;
    case "number":
    case "integer":
      return b === 0x2d || isDigit(b) ? stepNum({ t: NUM, integer: schema.kind === "integer", phase: N_START }, up, b) : null;
    case "literals":
      return startLit(schema.values, up, b);
  }
}

const PLAIN_STR: StrFrame = { t: STR, esc: 0, need: 0, lo: 0x80, hi: 0xbf };

function startLit(values: Uint8Array[], up: JsonState, b: number): JsonState | null {
  return stepLit({ t: LIT, values, live: values.map((_, i) => i), pos: 0 }, up, b);
}

/** Pops a finished child: the frame below learns that its key or value is complete. */
function childDone(up: JsonState, matched = -1): JsonState | null {
  const f = up.f;
  if (f.t === ROOT) return { f: { t: ROOT, done: true }, up: null };
  if (f.t === OBJ) {
    if (f.phase === KEY) return { f: { t: OBJ, schema: f.schema, phase: COLON, last: f.schema.props ? matched : -1, ws: 0 }, up: up.up };
    return { f: { t: OBJ, schema: f.schema, phase: AFTER, last: f.last, ws: 0 }, up: up.up };
  }
  if (f.t === ARR) return { f: { t: ARR, items: f.items, phase: AFTER, ws: 0 }, up: up.up };
  throw new Error(`json grammar: frame ${f.t} cannot hold a value`);
}

/** Keys of a closed object allowed after property `last`: each later one up to the first required. */
function keyChoices(props: ObjectProp[], last: number): number[] {
  const out: number[] = [];
  for (let k = last + 1; k < props.length; k++) {
    out.push(k);
    if (props[k].required) break;
  }
  return out;
}

function requiredAfter(props: ObjectProp[], last: number): boolean {
  for (let k = last + 1; k < props.length; k++) if (props[k].required) return true;
  return false;
}

function stepObj(f: ObjFrame, up: JsonState, b: number): JsonState | null {
  const here = (phase: number, ws = 0): JsonState => ({ f: { t: OBJ, schema: f.schema, phase, last: f.last, ws }, up });
  if (isWs(b) && f.phase !== KEY && f.phase !== MEMBER) return f.ws < MAX_WS ? here(f.phase, f.ws + 1) : null;
  const props = f.schema.props;
  switch (f.phase) {
    case OPEN:
    case COMMA:
      if (b === 0x7d && f.phase === OPEN) return props && requiredAfter(props, f.last) ? null : childDone(up);
      if (b !== 0x22) return null;
      if (!props) return { f: PLAIN_STR, up: here(KEY) };
      {
        const choices = keyChoices(props, f.last);
        if (choices.length === 0) return null;
        // The key frame's values are the whole property list; `live` starts at the allowed ones.
        return stepLit({ t: LIT, values: keysOf(f.schema), live: choices, pos: 0 }, here(KEY), b);
      }
    case COLON:
      if (b !== 0x3a) return null;
      return { f: { t: VALUE, schema: props ? props[f.last].value : ANY, ws: 0 }, up: here(MEMBER) };
    case AFTER:
      if (b === 0x2c) return props && keyChoices(props, f.last).length === 0 ? null : here(COMMA);
      if (b === 0x7d) return props && requiredAfter(props, f.last) ? null : childDone(up);
      return null;
    default:
      return null;
  }
}

const keyCache = new WeakMap<object, Uint8Array[]>();
function keysOf(schema: { props: ObjectProp[] | null }): Uint8Array[] {
  let k = keyCache.get(schema);
  if (!k) keyCache.set(schema, (k = schema.props!.map((p) => p.key)));
  return k;
}

function stepArr(f: ArrFrame, up: JsonState, b: number): JsonState | null {
  const here = (phase: number, ws = 0): JsonState => ({ f: { t: ARR, items: f.items, phase, ws }, up });
  if (isWs(b)) return f.ws < MAX_WS ? here(f.phase, f.ws + 1) : null;
  switch (f.phase) {
    case OPEN:
      if (b === 0x5d) return childDone(up);
      return startValue(f.items, here(MEMBER), b);
    case COMMA:
      return startValue(f.items, here(MEMBER), b);
    case AFTER:
      if (b === 0x2c) return here(COMMA);
      if (b === 0x5d) return childDone(up);
      return null;
    default:
      return null;
  }
}

function stepStr(f: StrFrame, up: JsonState, b: number): JsonState | null {
  const str = (esc: number, need: number, lo = 0x80, hi = 0xbf): JsonState => ({ f: esc === 0 && need === 0 ? PLAIN_STR : { t: STR, esc, need, lo, hi }, up });
  if (f.need > 0) return b >= f.lo && b <= f.hi ? str(0, f.need - 1) : null;
  if (f.esc === 1) {
    if (b === 0x75) return str(5, 0); // \u: four hex digits
    return b === 0x22 || b === 0x5c || b === 0x2f || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74 ? str(0, 0) : null;
  }
  if (f.esc >= 2) return isHex(b) ? str(f.esc === 2 ? 0 : f.esc - 1, 0) : null;
  if (b === 0x22) return childDone(up);
  if (b === 0x5c) return str(1, 0);
  if (b < 0x20) return null;
  if (b < 0x80) return { f: PLAIN_STR, up };
  // UTF-8 lead bytes, with the first continuation byte's range (no overlongs, surrogates or > U+10FFFF).
  if (b >= 0xc2 && b <= 0xdf) return str(0, 1);
  if (b === 0xe0) return str(0, 2, 0xa0, 0xbf);
  if (b === 0xed) return str(0, 2, 0x80, 0x9f);
  if (b >= 0xe1 && b <= 0xef) return str(0, 2);
  if (b === 0xf0) return str(0, 3, 0x90, 0xbf);
  if (b >= 0xf1 && b <= 0xf3) return str(0, 3);
  if (b === 0xf4) return str(0, 3, 0x80, 0x8f);
  return null;
}

function stepNum(f: NumFrame, up: JsonState, b: number): JsonState | null {
  const num = (phase: number): JsonState => ({ f: { t: NUM, integer: f.integer, phase }, up });
  const digit = isDigit(b);
  switch (f.phase) {
    case N_START:
      if (b === 0x2d) return num(N_MINUS);
      return digit ? num(b === 0x30 ? N_ZERO : N_INT) : null;
    case N_MINUS:
      return digit ? num(b === 0x30 ? N_ZERO : N_INT) : null;
    case N_ZERO:
    case N_INT:
      if (digit && f.phase === N_INT) return num(N_INT);
      if (!f.integer && b === 0x2e) return num(N_DOT);
      if (!f.integer && (b === 0x65 || b === 0x45)) return num(N_E);
      break;
    case N_DOT:
      return digit ? num(N_FRAC) : null;
    case N_FRAC:
      if (digit) return num(N_FRAC);
      if (b === 0x65 || b === 0x45) return num(N_E);
      break;
    case N_E:
      if (b === 0x2b || b === 0x2d) return num(N_ESIGN);
      return digit ? num(N_EXP) : null;
    case N_ESIGN:
      return digit ? num(N_EXP) : null;
    case N_EXP:
      if (digit) return num(N_EXP);
      break;
  }
  // A complete number ends at the first byte that cannot continue it: the frame below takes it.
  const after = childDone(up);
  return after && step(after, b);
}

function stepLit(f: LitFrame, up: JsonState, b: number): JsonState | null {
  const live = f.live.filter((i) => f.values[i].length > f.pos && f.values[i][f.pos] === b);
  if (live.length > 0) {
    const pos = f.pos + 1;
    // Done as soon as every candidate left ends here (a closing quote, or true/false/null).
    if (live.every((i) => f.values[i].length === pos)) return childDone(up, live[0]);
    return { f: { t: LIT, values: f.values, live, pos }, up };
  }
  // A literal that is a prefix of another (enum [1, 12]) ends at a byte that continues neither.
  const ended = f.live.find((i) => f.values[i].length === f.pos);
  if (ended === undefined) return null;
  const after = childDone(up, ended);
  return after && step(after, b);
}

// ---------------------------------------------------------------------------------------------
// Shortest completion
// ---------------------------------------------------------------------------------------------

const minLenCache = new WeakMap<SchemaNode, number>();

/** Bytes of the shortest value of `schema`. */
export function minValueLength(schema: SchemaNode): number {
  let n = minLenCache.get(schema);
  if (n !== undefined) return n;
  switch (schema.kind) {
    case "any":
    case "number":
    case "integer":
      n = 1;
      break;
    case "string":
    case "array":
      n = 2;
      break;
    case "literals":
      n = Math.min(...schema.values.map((v) => v.length));
      break;
    case "object":
      n = 1 + (schema.props ? restAfter(schema.props, -1, true) : 1);
      break;
  }
  minLenCache.set(schema, n);
  return n;
}

/** `"key":value` at its shortest. */
function memberLength(p: ObjectProp): number {
  return p.key.length + 1 + minValueLength(p.value);
}

/** Bytes that close an object after property `last`: the required members left (with commas) and `}`. */
function restAfter(props: ObjectProp[], last: number, first = false): number {
  let n = 1;
  let needComma = !first;
  for (let k = last + 1; k < props.length; k++) {
    if (!props[k].required) continue;
    n += memberLength(props[k]) + (needComma ? 1 : 0);
    needComma = true;
  }
  return n;
}

/** Exact length in bytes of the shortest continuation that completes the top-level value. */
export function minCompletion(s: JsonState): number {
  let n = 0;
  let child: Frame | null = null;
  for (let node: JsonState | null = s; node; node = node.up) {
    n += frameRest(node.f, child);
    child = node.f;
  }
  return n;
}

/** Bytes this frame still needs once the frames above it are complete (`child`: the one just above). */
function frameRest(f: Frame, child: Frame | null): number {
  switch (f.t) {
    case ROOT:
      return 0;
    case VALUE:
      return minValueLength(f.schema);
    case STR:
      return 1 + (f.need > 0 ? f.need : f.esc === 1 ? 1 : f.esc >= 2 ? f.esc - 1 : 0);
    case NUM:
      return f.phase === N_ZERO || f.phase === N_INT || f.phase === N_FRAC || f.phase === N_EXP ? 0 : 1;
    case LIT: {
      // A key literal is counted with its object (the key chosen decides the rest).
      let best = Infinity;
      for (const i of f.live) best = Math.min(best, f.values[i].length - f.pos);
      return best;
    }
    case ARR:
      if (f.phase === COMMA) return minValueLength(f.items) + 1;
      return 1;
    case OBJ: {
      const props = f.schema.props;
      if (!props) {
        // Free object: `:0}` after a key, `"":0}` after a comma, `}` otherwise.
        if (f.phase === KEY || f.phase === COLON) return 3;
        if (f.phase === COMMA) return 5;
        return 1;
      }
      switch (f.phase) {
        case OPEN:
          return restAfter(props, -1, true);
        case KEY: {
          // Replaces the key literal's own count: the cheapest live key with what it leaves to write.
          const lit = child as LitFrame;
          let best = Infinity;
          for (const k of lit.live) best = Math.min(best, lit.values[k].length - lit.pos + 1 + minValueLength(props[k].value) + restAfter(props, k));
          return best - frameRest(lit, null);
        }
        case COLON:
          return 1 + minValueLength(props[f.last].value) + restAfter(props, f.last);
        case MEMBER:
        case AFTER:
          return restAfter(props, f.last);
        case COMMA: {
          let best = Infinity;
          for (const k of keyChoices(props, f.last)) best = Math.min(best, memberLength(props[k]) + restAfter(props, k));
          return best;
        }
      }
      return 0;
    }
  }
}
