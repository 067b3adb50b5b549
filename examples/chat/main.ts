/**
 * Chat with @k3/engine. Uses $K3_MODEL_DIR when set (a real Kimi K3 / Kimi-Linear checkpoint), else
 * the embedded tiny K3 (trained on The Rust Programming Language book, not on chat: its replies read
 * on as book-like text, not answers).
 *
 * Shows: the chat format, state carried across turns (a turn that follows a reply ended on an end
 * id prefills only its own tokens, not the history; a reply cut by maxTokens leaves its message open,
 * so the next turn re-prefills the transcript), saving the conversation and resuming it in a new
 * session with identical output. The random tiny model rarely emits an end id, so the demo adds
 * the token it says third as an extra stop id to show the carried-state path.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChatSession, embeddedModelDir, Engine } from "@k3/engine";

const quick = process.argv.includes("--quick");
const dir = process.env.K3_MODEL_DIR ?? embeddedModelDir();
if (!process.env.K3_MODEL_DIR) console.log("(embedded tiny K3: 7.9 M parameters trained on the Rust book, not on chat; replies are book-like text)\n");

const engine = await Engine.load(dir, { preset: "auto", threads: 1 });
const sampling = { maxTokens: quick ? 8 : 48, temperature: 0.8, topP: 0.95, seed: 7 };

async function say(session: ChatSession, text: string): Promise<number[]> {
  process.stdout.write(`user> ${text}\nmodel> `);
  const gen = session.send(text, sampling);
  let r = await gen.next();
  while (!r.done) {
    process.stdout.write(r.value.text);
    r = await gen.next();
  }
  const rep = r.value.report;
  const how = r.value.stopId !== null ? `ended on end id ${r.value.stopId}` : "cut by maxTokens (the next turn re-prefills the closed transcript)";
  console.log(`\n  [prefilled ${session.lastPrefillTokens} tokens, generated ${rep.generated_tokens} at ${rep.decode_tokens_per_second.toFixed(1)} tok/s; ${how}]\n`);
  return r.value.ids;
}

const chat = new ChatSession(engine, { system: "You are terse.", effort: "low" });
if (!process.env.K3_MODEL_DIR) {
  // Probe what the random model says first, and treat its third token as an end id.
  const probe = new ChatSession(engine, { system: "You are terse.", effort: "low" });
  const g = probe.send("Name a prime number.", sampling);
  let r = await g.next();
  while (!r.done) r = await g.next();
  (sampling as { stopIds?: number[] }).stopIds = [r.value.ids[2]];
}
await say(chat, "Name a prime number.");
await say(chat, "And the next one?");

const saveDir = mkdtempSync(join(tmpdir(), "k3-chat-"));
const file = join(saveDir, "conversation.k3st");
chat.save(file);
const resumed = new ChatSession(engine, { system: "You are terse.", effort: "low" });
resumed.load(file);
console.log(`saved and resumed ${resumed.messages.length} messages from ${file}`);
const a = await say(chat, "One more?");
const b = await say(resumed, "One more?");
if (a.join() !== b.join()) throw new Error("the resumed conversation diverged from the original");
console.log("the resumed session produced the same reply, token for token");
rmSync(saveDir, { recursive: true, force: true });
engine.close();
