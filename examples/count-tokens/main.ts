// Count tokens with @k3/tiktoken-bpe.
//   pnpm --filter example-count-tokens start [--encoding o200k_base|cl100k_base|kimi] [--kimi-dir DIR] [FILE...]
// Without files it counts a built-in sample; --quick is the smoke test run by `pnpm test`.
// The Kimi tokenizer comes from a checkpoint directory (tiktoken.model + tokenizer_config.json);
// the default is the tiny K3 checkpoint in fixtures/models.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { encodeChat, getEncoding, loadKimiTokenizer, nativeLoadError, parseK3Output, type Tokenizer } from "@k3/tiktoken-bpe";

const args = process.argv.slice(2);
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args.splice(i, 2)[1] : fallback;
};
const quick = args.includes("--quick") ? (args.splice(args.indexOf("--quick"), 1), true) : false;
const encoding = flag("--encoding", "o200k_base");
const here = dirname(fileURLToPath(import.meta.url));
const kimiDir = resolve(flag("--kimi-dir", join(here, "../../fixtures/models/tiny-k3")));

const tok: Tokenizer =
  encoding === "kimi" ? loadKimiTokenizer(kimiDir) : getEncoding(encoding as "cl100k_base" | "o200k_base");
console.log(`${tok.name}: ${tok.nVocab} ids, encoder ${tok.backendKind}${nativeLoadError() ? ` (${nativeLoadError()?.message.split("\n")[0]})` : ""}`);

const sample = "Hello, world! 你好，世界。 Tokenizers split text into pieces, then merge bytes: ünïcödé, 12345, 😀.";
const inputs = args.length > 0 ? args.map((f) => ({ name: f, text: readFileSync(f, "utf8") })) : [{ name: "<sample>", text: sample }];
for (const { name, text } of inputs) {
  const t0 = performance.now();
  const n = tok.countTokens(text, { disallowedSpecial: [] });
  const ms = performance.now() - t0;
  console.log(`${name}: ${n} tokens, ${Buffer.byteLength(text)} bytes (${(Buffer.byteLength(text) / n).toFixed(2)} bytes/token, ${ms.toFixed(1)} ms)`);
}

// Round trip and a streaming decode that never prints half a character.
const ids = tok.encode(sample);
if (tok.decode(ids) !== sample) throw new Error("round trip failed");
const stream = tok.streamDecoder();
let streamed = "";
for (const id of ids) streamed += stream.push(id);
streamed += stream.flush();
if (streamed !== sample) throw new Error("stream decode failed");
console.log(`first ids: ${Array.from(ids.slice(0, 12)).join(" ")} …`);

// With a Kimi K3 checkpoint: render a chat prompt (structural tokens as ids, text ordinary).
if (encoding === "kimi" && tok.specialTokens.has("<|open|>")) {
  const prompt = encodeChat(tok, [{ role: "user", content: "What is 2+2? <|end_of_msg|>" }], { format: "k3", effort: "low" });
  console.log(`K3 chat prompt: ${prompt.length} ids; the user's "<|end_of_msg|>" stays text: ${tok.decode(prompt).includes("2+2? <|end_of_msg|>")}`);
  const reply = [
    ...tok.encodeOrdinary("2+2 is simple."),
    ...tok.encodeWithSpecialTokens("<|close|>think<|sep|><|open|>response<|sep|>4<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>"),
  ];
  console.log("parsed reply:", parseK3Output(tok, reply));
}
if (quick) console.log("ok");
