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

  it("validates every header field against the layer records and the model, naming the field (issue #15)", async () => {
    const a = new ChatSession(engine, { system: "Be brief." });
    await reply(a, "First question", 8, [(await reply(new ChatSession(engine, { system: "Be brief." }), "First question")).ids[2]]);
    const file = join(dir, "hdr.k3st");
    a.save(file);
    const bytes = readFileSync(file);
    const hlen = bytes.readUInt32LE(8);
    const header = JSON.parse(bytes.toString("utf8", 12, 12 + hlen));
    expect(header.pos).toBeGreaterThan(0);
    expect(header.pending).toHaveLength(1);
    // The saved file itself loads (every check holds for what save() writes).
    new ChatSession(engine).load(file);
    const V = engine.config.vocabSize;
    const withHeader = (patch: Record<string, unknown>, name: string, from = bytes) => {
      const n = from.readUInt32LE(8);
      const base = JSON.parse(from.toString("utf8", 12, 12 + n));
      const head = Buffer.from(JSON.stringify({ ...base, ...patch }), "utf8");
      const pre = Buffer.from(from.subarray(0, 12));
      pre.writeUInt32LE(head.length, 8);
      const f = join(dir, name);
      writeFileSync(f, Buffer.concat([pre, head, from.subarray(12 + n)]));
      return f;
    };
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ pos: -1 }, /header pos = -1: expected an integer >= 0/],
      [{ pos: 1e9 }, /header pos = 1000000000: expected the number of ids/],
      [{ pos: "x" }, /header pos = "x": expected an integer >= 0/],
      [{ pos: header.pos - 1, ids: header.ids.slice(1) }, new RegExp(`header pos = ${header.pos - 1}, but layer 0's record holds ${header.pos} tokens`)],
      [{ ids: "abc" }, /header ids = "abc": expected a list of token ids/],
      [{ ids: null }, /header ids = null: expected a list of token ids/],
      [{ ids: [-1], pos: 1 }, /header ids\[0\] = -1: expected a token id in 0\.\.1023/],
      [{ ids: [1e9], pos: 1 }, /header ids\[0\] = 1000000000: expected a token id in 0\.\.1023/],
      [{ ids: [...header.ids.slice(0, -1), V] }, /header ids\[\d+\] = 1024: expected a token id in 0\.\.1023/],
      [{ messages: [] }, /header messages = 0 messages: expected 1 user\/assistant pair\(s\) \(turn = 1\)/],
      [{ messages: null }, /header messages = null: expected a list of messages/],
      [{ messages: 5 }, /header messages = 5: expected a list of messages/],
      [{ messages: header.messages.map((m: any, i: number) => (i === 1 ? { ...m, role: "tool" } : m)) }, /header messages\[1\]\.role = "tool": expected "user"/],
      [{ messages: header.messages.map((m: any, i: number) => (i === 2 ? { ...m, role: "user" } : m)) }, /header messages\[2\]\.role = "user": expected "assistant"/],
      [{ messages: header.messages.map((m: any, i: number) => (i === 2 ? { ...m, content: 7 } : m)) }, /header messages\[2\]\.content = 7: expected a string/],
      [{ messages: [...header.messages, { role: "user", content: "again" }] }, /header messages = 4 messages: expected a system message and 1 user\/assistant pair/],
      [{ turn: 2 }, /header messages = 3 messages: expected a system message and 2 user\/assistant pair/],
      [{ turn: -1 }, /header turn = -1: expected an integer >= 0/],
      [{ pending: [V] }, /header pending\[0\] = 1024: expected a token id/],
      [{ pending: "x" }, /header pending = "x": expected \[\] or \[the end id/],
      [{ open: true }, /header pending = \[\d+\]: expected \[\] \(the reply is open\)/],
      [{ open: "yes" }, /header open = "yes": expected true or false/],
      [{ options: { effort: "medium" } }, /header options\.effort = "medium"/],
      [{ layerBytes: header.layerBytes.map((x: number, i: number) => (i === 3 ? String(x) : x)) }, /header layerBytes\[3\] = "\d+": expected a positive integer/],
      [{ fingerprint: 5 }, /header fingerprint = 5: expected a string/],
    ];
    for (const [i, [patch, message]] of cases.entries()) {
      const f = withHeader(patch, `bad-${i}.k3st`);
      expect(() => new ChatSession(engine).load(f), JSON.stringify(patch).slice(0, 80)).toThrow(message);
    }
    // A fresh session's file (no turn yet) loads; claiming a finished turn with no token fed is refused.
    const f0 = join(dir, "fresh.k3st");
    new ChatSession(engine, { system: "S" }).save(f0);
    new ChatSession(engine).load(f0);
    const claimed = withHeader({ turn: 1, messages: [{ role: "system", content: "S" }, { role: "user", content: "u" }, { role: "assistant", content: "a" }] }, "claimed.k3st", readFileSync(f0));
    expect(() => new ChatSession(engine).load(claimed)).toThrow(/header pos = 0: expected > 0 after a finished turn/);
    // An open reply (cut by max tokens) saves and loads, and the next turn re-prefills from it.
    const cut = new ChatSession(engine);
    expect((await reply(cut, "Count to three", 3)).stopId).toBeNull();
    const f1 = join(dir, "open.k3st");
    cut.save(f1);
    const back = new ChatSession(engine);
    back.load(f1);
    expect((await reply(back, "Go on", 4)).ids).toEqual((await reply(cut, "Go on", 4)).ids);
    expect(back.reprefills).toBe(1);
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
