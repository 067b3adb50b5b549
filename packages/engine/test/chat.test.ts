import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setThreadCount } from "@k3/dense";
import { afterAll, describe, expect, it } from "vitest";
import { ChatSession } from "../src/chat.js";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { TINY_48B, TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const dir = mkdtempSync(join(tmpdir(), "k3-chat-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function reply(session: ChatSession, text: string, maxTokens = 8, stopIds: number[] = []) {
  const gen = session.send(text, { maxTokens, stopIds });
  let r = await gen.next();
  while (!r.done) r = await gen.next();
  return r.value;
}

describe("chat sessions", async () => {
  setThreadCount(1);
  const engine = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", kdaCore: "recurrent" });

  it("carries state across turns: turn 2 prefills only its delta and equals a full re-prefill", async () => {
    // Learn what the (random) model says, then make its 4th token an end id so turn 1 ends normally.
    const probe = await reply(new ChatSession(engine, { system: "Be brief.", effort: "high" }), "Hello there");
    const s = new ChatSession(engine, { system: "Be brief.", effort: "high" });
    const r1 = await reply(s, "Hello there", 8, [probe.ids[3]]);
    expect(r1.stopId).toBe(probe.ids[3]);
    const afterTurn1 = s.lastPrefillTokens;
    const r2 = await reply(s, "And again?");
    expect(s.reprefills).toBe(0);
    expect(s.lastPrefillTokens).toBeLessThan(afterTurn1);
    // The same transcript fed from scratch gives the same reply.
    const fed: number[] = (s as any).state.ids;
    // Turn 2's own tokens in the state: all of them when it stopped on an end id, all but the last otherwise.
    const fedReply = r2.stopId === null ? r2.ids.length - 1 : r2.ids.length;
    const fresh = await engine.complete(fed.slice(0, fed.length - fedReply), { maxTokens: 8 });
    expect(fresh.ids).toEqual(r2.ids);
    expect(s.messages.map((m) => m.role)).toEqual(["system", "user", "assistant", "user", "assistant"]);
  });

  it("saves and loads: the continuation is identical; other models and damaged files are refused", async () => {
    const a = new ChatSession(engine);
    await reply(a, "First question");
    const file = join(dir, "conv.k3st");
    a.save(file);
    const b = new ChatSession(engine);
    b.load(file);
    expect(b.messages).toEqual(a.messages);
    const ra = await reply(a, "Second");
    const rb = await reply(b, "Second");
    expect(rb.ids).toEqual(ra.ids);

    const other = await Engine.load(TINY_48B, { mem: bigBox, preset: "laptop" });
    expect(() => new ChatSession(other).load(file)).toThrow(/fingerprint .* refusing to mix states/);
    const bytes = readFileSync(file);
    writeFileSync(join(dir, "short.k3st"), bytes.subarray(0, bytes.length - 10));
    expect(() => new ChatSession(engine).load(join(dir, "short.k3st"))).toThrow(/truncated or padded/);
    writeFileSync(join(dir, "junk.k3st"), "hello");
    expect(() => new ChatSession(engine).load(join(dir, "junk.k3st"))).toThrow(/bad magic/);
  });

  it("a reply cut by max tokens makes the next turn re-prefill the canonical transcript", async () => {
    const s = new ChatSession(engine, { effort: "low" });
    const r1 = await reply(s, "Count to three", 3);
    expect(r1.stopId).toBeNull();
    const r2 = await reply(s, "Go on", 6);
    expect(s.reprefills).toBe(1);
    const canonical = engine.encodeChat(s.messages.slice(0, 3), { effort: "low" });
    expect(s.lastPrefillTokens).toBe(canonical.length);
    // The same canonical messages in a fresh session give the same reply.
    const fresh = await engine.complete(canonical, { maxTokens: 6 });
    expect(fresh.ids).toEqual(r2.ids);
  });

  it("refuses effort medium and resets to the system message", async () => {
    expect(() => new ChatSession(engine, { effort: "medium" as never })).toThrow(/medium/);
    const s = new ChatSession(engine, { system: "S" });
    await reply(s, "x", 2);
    s.reset();
    expect(s.messages).toEqual([{ role: "system", content: "S" }]);
  });
});
