/**
 * Chat encoding for Kimi K3 (XTML) and Kimi-Linear (im_* tokens), rendered straight to ids:
 * structural tokens are inserted as ids, every piece of text (role names, attributes, content,
 * reasoning) is encoded ORDINARILY, so text that spells a special token cannot inject one.
 *
 * K3 format (Moonshot's encoding_k3.py as mirrored by kimi-k3-in-c src/chat/k3_chat.c and the
 * public Python adapters; docs/architecture.md §8):
 *   message:   <|open|>message role="R"<|sep|>TEXT<|close|>message<|sep|><|end_of_msg|>
 *   assistant: <|open|>message role="assistant"<|sep|>[<|open|>think<|sep|>REASONING<|close|>think<|sep|>]
 *              <|open|>response<|sep|>TEXT<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>
 *              (the think channel is present, possibly empty, exactly when thinking is on)
 *   thinking on: the transcript starts with a role="system" type="thinking-effort" message whose
 *              body is K3_EFFORT_SENTENCE with the effort (low | high | max; "medium" is refused).
 *   generation prompt: <|open|>message role="assistant"<|sep|><|open|>think<|sep|> (thinking on)
 *              or …<|open|>response<|sep|> (thinking off).
 * Text segments are "message" and ` role="user"` etc.; their boundaries coincide with the
 * pre-tokenizer's, so segmenting differently would not change the ids.
 */
import { TokenizerError } from "./errors.js";
import type { Tokenizer } from "./tokenizer.js";

export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | string;
  content: string;
  /** Assistant reasoning (K3 think channel). */
  reasoning?: string;
}

export interface ChatOptions {
  format: "k3" | "kimi-linear";
  /** K3: thinking mode (default true). */
  thinking?: boolean;
  /**
   * K3 with thinking: the effort named in the thinking-effort system message (default `max`).
   * `null` leaves the message out (not what the released encoder does; for fixtures made without it).
   */
  effort?: "low" | "high" | "max" | null;
  /** Append the assistant generation prompt (default true). */
  addGenerationPrompt?: boolean;
}

/** The fixed thinking-effort body; `{effort}` is replaced by the effort. */
export const K3_EFFORT_SENTENCE =
  "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), " +
  "supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort={effort}`.";

const K3_EFFORTS = new Set(["low", "high", "max"]);

/** Renders messages to ids in the given chat format. */
export function encodeChat(tok: Tokenizer, messages: readonly ChatMessage[], options: ChatOptions): number[] {
  if (!Array.isArray(messages)) throw new TokenizerError("encodeChat: messages must be an array");
  messages.forEach((m, i) => {
    if (!m || typeof m.role !== "string") throw new TokenizerError(`encodeChat: messages[${i}].role must be a string`);
    if (typeof m.content !== "string") throw new TokenizerError(`encodeChat: messages[${i}].content must be a string`);
    if (m.reasoning !== undefined && typeof m.reasoning !== "string")
      throw new TokenizerError(`encodeChat: messages[${i}].reasoning must be a string when present`);
  });
  if (options?.format === "k3") return encodeK3(tok, messages, options);
  if (options?.format === "kimi-linear") return encodeKimiLinear(tok, messages, options);
  throw new TokenizerError(`encodeChat: format must be 'k3' or 'kimi-linear', got ${JSON.stringify(options?.format)}`);
}

class IdWriter {
  readonly ids: number[] = [];
  constructor(private readonly tok: Tokenizer) {}
  special(name: string): void {
    this.ids.push(this.tok.specialTokenId(name));
  }
  text(s: string): void {
    if (s.length === 0) return;
    for (const id of this.tok.encodeOrdinary(s)) this.ids.push(id);
  }
}

function encodeK3(tok: Tokenizer, messages: readonly ChatMessage[], options: ChatOptions): number[] {
  const thinking = options.thinking ?? true;
  const effort = options.effort === undefined ? "max" : options.effort;
  if (thinking && effort !== null && !K3_EFFORTS.has(effort))
    throw new TokenizerError(`encodeChat: effort must be 'low', 'high' or 'max' (K3's encoder refuses ${JSON.stringify(effort)})`);
  const w = new IdWriter(tok);
  const open = (tag: string, attrs = "") => {
    w.special("<|open|>");
    w.text(tag);
    w.text(attrs);
    w.special("<|sep|>");
  };
  const close = (tag: string) => {
    w.special("<|close|>");
    w.text(tag);
    w.special("<|sep|>");
  };
  if (thinking && effort !== null) {
    open("message", ' role="system" type="thinking-effort"');
    w.text(K3_EFFORT_SENTENCE.replace("{effort}", effort));
    close("message");
    w.special("<|end_of_msg|>");
  }
  messages.forEach((m, i) => {
    const role = m.role === "developer" ? "system" : m.role;
    if (role !== "system" && role !== "user" && role !== "assistant")
      throw new TokenizerError(`encodeChat: messages[${i}].role ${JSON.stringify(m.role)} is not supported for k3 (system, developer, user, assistant)`);
    open("message", ` role="${role}"`);
    if (role === "assistant") {
      if (thinking) {
        open("think");
        w.text(m.reasoning ?? "");
        close("think");
      }
      open("response");
      w.text(m.content);
      close("response");
    } else {
      if (m.reasoning !== undefined) throw new TokenizerError(`encodeChat: messages[${i}] (${role}) cannot carry reasoning`);
      w.text(m.content);
    }
    close("message");
    w.special("<|end_of_msg|>");
  });
  if (options.addGenerationPrompt ?? true) {
    open("message", ' role="assistant"');
    open(thinking ? "think" : "response");
  }
  return w.ids;
}

function encodeKimiLinear(tok: Tokenizer, messages: readonly ChatMessage[], options: ChatOptions): number[] {
  const w = new IdWriter(tok);
  const header: Record<string, [string, string]> = {
    system: ["<|im_system|>", "system"],
    developer: ["<|im_system|>", "system"],
    user: ["<|im_user|>", "user"],
    assistant: ["<|im_assistant|>", "assistant"],
  };
  messages.forEach((m, i) => {
    const h = header[m.role];
    if (!h) throw new TokenizerError(`encodeChat: messages[${i}].role ${JSON.stringify(m.role)} is not supported for kimi-linear (system, user, assistant)`);
    if (m.reasoning !== undefined) throw new TokenizerError(`encodeChat: messages[${i}]: kimi-linear has no reasoning channel`);
    w.special(h[0]);
    w.text(h[1]);
    w.special("<|im_middle|>");
    w.text(m.content);
    w.special("<|im_end|>");
  });
  if (options.addGenerationPrompt ?? true) {
    w.special("<|im_assistant|>");
    w.text("assistant");
    w.special("<|im_middle|>");
  }
  return w.ids;
}

export interface K3Output {
  /** Text of the think channel (null when thinking was off or it never started). */
  reasoning: string | null;
  /** Text of the response channel ("" when it has not started). */
  content: string;
  /** The message was closed (`<|close|>message` seen) or an end id arrived. */
  complete: boolean;
  /** Which end id stopped it, if any. */
  stop: "<|end_of_msg|>" | "[EOS]" | null;
  /** Ids inside other channels (tool calls…), verbatim, not interpreted here. */
  other: number[];
}

/**
 * Splits K3 model output (the ids generated after the generation prompt) into reasoning and
 * response. Works on ids, so literal "<|close|>" text in the output cannot fake a boundary.
 */
export function parseK3Output(tok: Tokenizer, ids: ArrayLike<number>, options: { thinking?: boolean } = {}): K3Output {
  const OPEN = tok.specialTokenId("<|open|>");
  const CLOSE = tok.specialTokenId("<|close|>");
  const SEP = tok.specialTokenId("<|sep|>");
  const EOM = tok.specialTokenId("<|end_of_msg|>");
  const EOS = tok.specialTokens.get("[EOS]") ?? -1;
  const think: number[] = [];
  const response: number[] = [];
  const other: number[] = [];
  let channel: "think" | "response" | "other" | "none" = options.thinking ?? true ? "think" : "response";
  let sawThink = channel === "think";
  let complete = false;
  let stop: K3Output["stop"] = null;
  let i = 0;
  /** Reads `<tag ...><|sep|>` after an open/close id; returns the tag name or null if unfinished. */
  const readTag = (): string | null => {
    const start = i;
    while (i < ids.length && ids[i] !== SEP) i++;
    if (i >= ids.length) return null;
    const name = tok.decode(Array.from({ length: i - start }, (_, k) => ids[start + k]));
    i++; // the sep
    return name.split(" ")[0];
  };
  while (i < ids.length) {
    const id = ids[i++];
    if (id === EOM || id === EOS) {
      complete = true;
      stop = id === EOM ? "<|end_of_msg|>" : "[EOS]";
      break;
    }
    if (id === OPEN) {
      const tag = readTag();
      if (tag === null) break;
      channel = tag === "think" ? "think" : tag === "response" ? "response" : "other";
      if (tag === "think") sawThink = true;
      continue;
    }
    if (id === CLOSE) {
      const tag = readTag();
      if (tag === null) break;
      if (tag === "message") complete = true;
      // Closing a nested tag inside tools keeps collecting; closing a channel ends it.
      channel = tag === "think" || tag === "response" || tag === "message" || tag === "tools" ? "none" : channel;
      continue;
    }
    if (channel === "think") think.push(id);
    else if (channel === "response") response.push(id);
    else if (channel === "other") other.push(id);
  }
  return {
    reasoning: sawThink ? tok.decode(think) : null,
    content: tok.decode(response),
    complete,
    stop,
    other,
  };
}
