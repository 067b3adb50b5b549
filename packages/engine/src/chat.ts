/**
 * A conversation held in process: the model state (KDA recurrent + conv state, MLA latent cache)
 * carries over between turns, so a new turn only prefills its own tokens, never the history.
 * Saves to and loads from a state file stamped with the model+config fingerprint.
 *
 * Each turn feeds: the end id the last reply stopped on, then the ids the chat format adds for the
 * new user message and the generation prompt (the difference between the rendered conversation with
 * and without them). A reply cut by --max-tokens (or aborted) leaves its message open in the model
 * state, so the next turn re-prefills the canonical transcript instead (counted in `reprefills`).
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { parseK3Output, type ChatMessage } from "@k3/tiktoken-bpe";
import type { Engine, GenerateOptions, GenerationResult, TokenEvent } from "./engine.js";
import { StateFileError, UsageError } from "./errors.js";
import { CHOICES, checkChoice } from "./options.js";
import type { ModelState } from "./model.js";
import { KdaState } from "./layers/kda.js";

export interface ChatOptions {
  system?: string;
  /** K3 thinking channel (default true). */
  thinking?: boolean;
  /** K3 thinking effort (default "max" as the released encoder). */
  effort?: "low" | "high" | "max";
}

const MAGIC = "K3ST";
const VERSION = 1;

export class ChatSession {
  messages: ChatMessage[] = [];
  private state: ModelState;
  /** Ids the last turn sampled but did not feed (its end id). */
  private pending: number[] = [];
  /** The last reply was cut (length or abort): its message is open in the state, so the next turn re-prefills. */
  private open = false;
  /** Turns that had to re-prefill the transcript (after a cut reply). */
  reprefills = 0;
  turn = 0;
  /** Tokens prefilled by the last turn (the delta, not the history). */
  lastPrefillTokens = 0;

  constructor(readonly engine: Engine, readonly options: ChatOptions = {}) {
    if (options.effort !== undefined) checkChoice("--effort", CHOICES.effort, options.effort, ' ("medium" does not exist for K3)');
    this.state = engine.newState();
    this.reset();
  }

  private render(messages: ChatMessage[], addGenerationPrompt: boolean): number[] {
    return this.engine.encodeChat(messages, { thinking: this.options.thinking ?? true, effort: this.options.effort, addGenerationPrompt });
  }

  /** Forgets the conversation (keeps the system message). */
  reset(): void {
    this.messages = this.options.system ? [{ role: "system", content: this.options.system }] : [];
    this.state = this.engine.newState();
    this.pending = [];
    this.open = false;
    this.turn = 0;
  }

  /** Sends a user message; yields the reply's tokens; returns the result (reply text is the raw output). */
  async *send(userText: string, options: GenerateOptions = {}): AsyncGenerator<TokenEvent, GenerationResult, void> {
    const withUser: ChatMessage[] = [...this.messages, { role: "user", content: userText }];
    const full = this.render(withUser, true);
    let delta: number[];
    if (this.open) {
      // The model state holds an unfinished assistant message: start over from the canonical transcript.
      this.state = this.engine.newState();
      this.reprefills++;
    }
    if (this.state.pos === 0) {
      delta = full;
    } else {
      const before = this.render(this.messages, false);
      const prefixOk = before.length <= full.length && before.every((id, i) => id === full[i]);
      if (!prefixOk) throw new UsageError("the chat format re-renders earlier turns differently; /reset to start over");
      delta = [...this.pending, ...full.slice(before.length)];
    }
    this.lastPrefillTokens = delta.length;
    const gen = this.engine.generate(delta, { ...options, state: this.state, stream: this.turn });
    let r = await gen.next();
    while (!r.done) {
      yield r.value;
      r = await gen.next();
    }
    const result = r.value;
    this.open = result.stopId === null;
    this.pending = this.open ? [] : result.unfed;
    // K3: keep the think channel as `reasoning` and the response as `content` (split on ids).
    const reply: ChatMessage =
      this.engine.chatFormat === "k3"
        ? (() => {
            const out = parseK3Output(this.engine.tokenizer, result.ids, { thinking: this.options.thinking ?? true });
            return out.reasoning !== null ? { role: "assistant", content: out.content, reasoning: out.reasoning } : { role: "assistant", content: out.content };
          })()
        : { role: "assistant", content: this.engine.tokenizer.decode(result.ids) };
    this.messages = [...withUser, reply];
    this.turn++;
    return result;
  }

  /** Writes the conversation and model state (atomically: temp file + rename). */
  save(file: string): void {
    const layers = this.state.layers.map((s) => this.engine.model.saveLayerState(s));
    const header = JSON.stringify({
      fingerprint: this.engine.fingerprint,
      pos: this.state.pos,
      ids: this.state.ids,
      messages: this.messages,
      pending: this.pending,
      open: this.open,
      turn: this.turn,
      options: this.options,
      layerBytes: layers.map((b) => b.length),
    });
    const head = Buffer.from(header, "utf8");
    const pre = Buffer.alloc(12);
    pre.write(MAGIC, 0, "ascii");
    pre.writeUInt32LE(VERSION, 4);
    pre.writeUInt32LE(head.length, 8);
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, Buffer.concat([pre, head, ...layers]));
    renameSync(tmp, file);
  }

  /** Restores a saved conversation; refuses another model/config or a damaged file. */
  load(file: string): void {
    let buf: Buffer;
    try {
      buf = readFileSync(file);
    } catch (err) {
      throw new StateFileError(file, `cannot read (${(err as NodeJS.ErrnoException).code})`, { cause: err });
    }
    if (buf.length < 12 || buf.toString("ascii", 0, 4) !== MAGIC) throw new StateFileError(file, "not a k3 state file (bad magic)");
    if (buf.readUInt32LE(4) !== VERSION) throw new StateFileError(file, `version ${buf.readUInt32LE(4)}, expected ${VERSION}`);
    const hlen = buf.readUInt32LE(8);
    if (12 + hlen > buf.length) throw new StateFileError(file, "truncated header");
    let raw: unknown;
    try {
      raw = JSON.parse(buf.toString("utf8", 12, 12 + hlen));
    } catch {
      throw new StateFileError(file, "header is not valid JSON");
    }
    const h = this.checkHeader(file, raw);
    const total = 12 + hlen + h.layerBytes.reduce((a, b) => a + b, 0);
    if (buf.length !== total) throw new StateFileError(file, `${buf.length} bytes, expected ${total} (truncated or padded)`);
    let off = 12 + hlen;
    const layers = h.layerBytes.map((len, l) => {
      const bytes = new Uint8Array(buf.buffer, buf.byteOffset + off, len).slice();
      off += len;
      try {
        return this.engine.model.loadLayerState(l, bytes);
      } catch (err) {
        throw new StateFileError(file, `layer ${l}: ${(err as Error).message}`, { cause: err });
      }
    });
    // Every layer record has seen exactly the `pos` tokens the header says were fed. An open reply
    // (cut or aborted) may have been stopped between the layers of a chunk; its state is never
    // continued (the next turn re-prefills), so only "not fewer" is asked of it.
    for (const [l, s] of layers.entries()) {
      const seen = s instanceof KdaState ? s.tokens : s.length;
      if (h.open ? seen < h.pos : seen !== h.pos) throw new StateFileError(file, `header pos = ${h.pos}, but layer ${l}'s record holds ${seen} tokens`);
    }
    this.state = { layers, pos: h.pos, ids: h.ids };
    this.messages = h.messages;
    this.pending = h.pending;
    this.open = h.open;
    this.turn = h.turn;
  }

  /**
   * Checks every header field on its own and against the model: a refusal names the field. What
   * holds for a file save() wrote: pos = ids.length; ids and pending are token ids of this vocabulary
   * (pending: the one end id a finished reply left unfed, none after an open reply); messages are an
   * optional system message, then turn (user, assistant) pairs; pos > 0 once a turn finished its
   * prefill; one byte count per layer.
   */
  private checkHeader(file: string, raw: unknown): StateHeader {
    const bad = (field: string, v: unknown, want: string): never => {
      throw new StateFileError(file, `header ${field} = ${short(v)}: expected ${want}`);
    };
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) bad("(header)", raw, "a JSON object");
    const h = raw as Record<string, unknown>;
    if (typeof h.fingerprint !== "string") bad("fingerprint", h.fingerprint, "a string");
    if (h.fingerprint !== this.engine.fingerprint) {
      throw new StateFileError(file, `saved for model fingerprint ${h.fingerprint}, this model is ${this.engine.fingerprint}: refusing to mix states`);
    }
    const n = this.engine.config.numLayers;
    const V = this.engine.config.vocabSize;
    const isId = (x: unknown) => Number.isInteger(x) && (x as number) >= 0 && (x as number) < V;
    if (!Array.isArray(h.layerBytes) || h.layerBytes.length !== n) {
      throw new StateFileError(file, `has ${Array.isArray(h.layerBytes) ? h.layerBytes.length : short(h.layerBytes)} layer records, the model has ${n} layers`);
    }
    h.layerBytes.forEach((x, l) => Number.isSafeInteger(x) && x > 0 ? 0 : bad(`layerBytes[${l}]`, x, "a positive integer byte count"));
    if (!Array.isArray(h.ids)) bad("ids", h.ids, `a list of token ids in 0..${V - 1}`);
    const ids = h.ids as unknown[];
    ids.forEach((x, i) => (isId(x) ? 0 : bad(`ids[${i}]`, x, `a token id in 0..${V - 1}`)));
    if (!Number.isSafeInteger(h.pos) || (h.pos as number) < 0) bad("pos", h.pos, "an integer >= 0");
    if (h.pos !== ids.length) bad("pos", h.pos, `the number of ids (${ids.length})`);
    if (h.open !== undefined && typeof h.open !== "boolean") bad("open", h.open, "true or false");
    const open = h.open === true;
    const pending = h.pending ?? [];
    if (!Array.isArray(pending) || pending.length > 1 || (open && pending.length > 0)) bad("pending", h.pending, open ? "[] (the reply is open)" : "[] or [the end id the last reply stopped on]");
    (pending as unknown[]).forEach((x, i) => (isId(x) ? 0 : bad(`pending[${i}]`, x, `a token id in 0..${V - 1}`)));
    if (!Number.isSafeInteger(h.turn) || (h.turn as number) < 0) bad("turn", h.turn, "an integer >= 0");
    const turn = h.turn as number;
    if (h.options !== undefined) {
      const o = h.options as Record<string, unknown>;
      if (o === null || typeof o !== "object" || Array.isArray(o)) bad("options", o, "an object");
      if (o.system !== undefined && typeof o.system !== "string") bad("options.system", o.system, "a string");
      if (o.thinking !== undefined && typeof o.thinking !== "boolean") bad("options.thinking", o.thinking, "true or false");
      if (o.effort !== undefined && o.effort !== "low" && o.effort !== "high" && o.effort !== "max") bad("options.effort", o.effort, `"low", "high" or "max"`);
    }
    if (!Array.isArray(h.messages)) bad("messages", h.messages, "a list of messages");
    const messages = h.messages as unknown[];
    const sys = messages.length > 0 && (messages[0] as { role?: unknown } | null)?.role === "system" ? 1 : 0;
    if (messages.length !== sys + 2 * turn) bad("messages", `${messages.length} messages`, `${sys ? "a system message and " : ""}${turn} user/assistant pair(s) (turn = ${turn})`);
    messages.forEach((m, i) => {
      const role = i < sys ? "system" : (i - sys) % 2 === 0 ? "user" : "assistant";
      if (m === null || typeof m !== "object" || Array.isArray(m)) bad(`messages[${i}]`, m, `a ${role} message object`);
      const msg = m as Record<string, unknown>;
      if (msg.role !== role) bad(`messages[${i}].role`, msg.role, JSON.stringify(role));
      if (typeof msg.content !== "string") bad(`messages[${i}].content`, msg.content, "a string");
      if (msg.reasoning !== undefined && (role !== "assistant" || typeof msg.reasoning !== "string")) bad(`messages[${i}].reasoning`, msg.reasoning, role === "assistant" ? "a string" : "absent (only assistant messages reason)");
    });
    // A finished turn fed its prompt; only a reply aborted during its prefill leaves pos at 0.
    if ((turn > 0) !== (ids.length > 0) && !(open && ids.length === 0)) bad("pos", h.pos, turn > 0 ? "> 0 after a finished turn" : "0 before any turn (turn = 0)");
    return { pos: h.pos as number, ids: ids as number[], messages: messages as ChatMessage[], pending: pending as number[], open, turn, layerBytes: h.layerBytes as number[] };
  }
}

interface StateHeader {
  pos: number;
  ids: number[];
  messages: ChatMessage[];
  pending: number[];
  open: boolean;
  turn: number;
  layerBytes: number[];
}

/** A header value as a refusal shows it (long lists and strings cut). */
function short(v: unknown): string {
  const s = typeof v === "string" && / messages$/.test(v) ? v : JSON.stringify(v) ?? String(v);
  return s.length > 60 ? s.slice(0, 57) + "..." : s;
}
