/**
 * JSON mode for a generation (the server's `response_format`): the constraint to give
 * Engine.generate, and which channel each generated K3 token belongs to.
 *
 * The constrained region is the reply's content only. A K3 chat with thinking first writes its
 * think channel, unconstrained except that it may not open other channels or end the message;
 * once the model closes it (`<|close|>`), or when only enough tokens are left to close it and
 * write the shortest JSON value, the rest of the switch (`think<|sep|><|open|>response<|sep|>`)
 * is forced and the response channel is held to the grammar. Without thinking (and for
 * Kimi-Linear chats and text completions) the whole output is the JSON value. Generation stops as
 * soon as the value is complete.
 */
import type { Tokenizer } from "@k3/tiktoken-bpe";
import { ANY_OBJECT, initialState, minCompletion, type SchemaNode } from "./json-grammar.js";
import { JsonConstraint, jsonVocabFor } from "./json-mask.js";
import { compileSchema } from "./json-schema.js";
import type { TokenConstraint } from "./sampler.js";

/** OpenAI's response_format, as the server validated it. */
export type ResponseFormat = { type: "text" } | { type: "json_object" } | { type: "json_schema"; name: string; schema: unknown };

/** The grammar node for a response format (null for text); a bad schema throws SchemaError. */
export function schemaFor(format: ResponseFormat | undefined): SchemaNode | null {
  if (!format || format.type === "text") return null;
  if (format.type === "json_object") return ANY_OBJECT;
  return compileSchema(format.schema, "response_format.json_schema.schema");
}

/** The channel a K3 reply token's text belongs to; null for the structure (specials, tag names). */
export type K3Channel = "think" | "response" | "other" | null;

/** Follows K3 reply ids one at a time, as parseK3Output reads them (see @k3/tiktoken-bpe chat.ts). */
export class K3Channels {
  private channel: "think" | "response" | "other" | "none";
  private tag: number[] | null = null;
  private tagOpens = false;
  readonly OPEN: number;
  readonly CLOSE: number;
  readonly SEP: number;
  readonly EOM: number;
  readonly EOS: number;

  constructor(private readonly tok: Tokenizer, thinking: boolean) {
    this.channel = thinking ? "think" : "response";
    this.OPEN = tok.specialTokenId("<|open|>");
    this.CLOSE = tok.specialTokenId("<|close|>");
    this.SEP = tok.specialTokenId("<|sep|>");
    this.EOM = tok.specialTokenId("<|end_of_msg|>");
    this.EOS = tok.specialTokens.get("[EOS]") ?? -1;
  }

  get current(): "think" | "response" | "other" | "none" {
    return this.channel;
  }

  push(id: number): K3Channel {
    if (this.tag) {
      if (id !== this.SEP) {
        this.tag.push(id);
        return null;
      }
      const name = this.tok.decode(this.tag).split(" ")[0];
      this.tag = null;
      if (this.tagOpens) this.channel = name === "think" ? "think" : name === "response" ? "response" : "other";
      else if (name === "think" || name === "response" || name === "message" || name === "tools") this.channel = "none";
      return null;
    }
    if (id === this.OPEN || id === this.CLOSE) {
      this.tag = [];
      this.tagOpens = id === this.OPEN;
      return null;
    }
    if (id === this.EOM || id === this.EOS) {
      this.channel = "none";
      return null;
    }
    return this.channel === "none" ? null : this.channel;
  }
}

/**
 * JSON mode after a K3 think channel: see the module comment. `remaining` counts this token, as
 * in TokenConstraint.
 */
export class ThinkThenJson implements TokenConstraint {
  private phase: "think" | "switch" | "json" = "think";
  private readonly switchIds: number[];
  private readonly reserve: number;
  private readonly specials: number[];

  constructor(private readonly tok: Tokenizer, readonly json: JsonConstraint, schema: SchemaNode) {
    const id = (n: string) => tok.specialTokenId(n);
    this.switchIds = [...tok.encodeOrdinary("think"), id("<|sep|>"), id("<|open|>"), ...tok.encodeOrdinary("response"), id("<|sep|>")];
    // <|close|> + the switch + the shortest value, each byte a token at worst.
    this.reserve = 1 + this.switchIds.length + minCompletion(initialState(schema));
    const close = id("<|close|>");
    this.specials = json.vocab.tokens.map((t, i) => (t === null && i !== close ? i : -1)).filter((i) => i >= 0);
  }

  mask(row: Float32Array, remaining: number): void {
    if (this.phase === "json") return this.json.mask(row, remaining);
    const close = this.tok.specialTokenId("<|close|>");
    if (this.phase === "switch" || remaining <= this.reserve) {
      const keep = this.phase === "switch" ? this.switchIds[0] : close;
      const v = row[keep];
      row.fill(-Infinity);
      row[keep] = Number.isFinite(v) ? v : 0;
      return;
    }
    // Thinking: anything but another channel, the end of the message, or an unknown id.
    for (const i of this.specials) if (i < row.length) row[i] = -Infinity;
    for (let i = this.json.vocab.size; i < row.length; i++) row[i] = -Infinity;
  }

  accept(id: number): boolean {
    if (this.phase === "json") return this.json.accept(id);
    if (this.phase === "switch") {
      this.switchIds.shift();
      if (this.switchIds.length === 0) this.phase = "json";
      return false;
    }
    if (id === this.tok.specialTokenId("<|close|>")) this.phase = "switch";
    return false;
  }

  get closedEarly(): boolean {
    return this.json.closedEarly;
  }
}

/** The constraint for a generation in JSON mode; `thinkFirst`: a K3 chat whose reply opens with a think channel. */
export function jsonConstraint(tok: Tokenizer, rowSize: number, schema: SchemaNode, thinkFirst: boolean): JsonConstraint | ThinkThenJson {
  const json = new JsonConstraint(jsonVocabFor(tok, rowSize), schema);
  return thinkFirst ? new ThinkThenJson(tok, json, schema) : json;
}
