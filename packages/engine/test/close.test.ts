// Engine.close() gives the memory back at once (issue 13): the resident weights' pages and the
// stores' arenas go to the kernel in close(), not when the GC collects their views. A forward in
// flight finishes on intact weights first; a forward after close() is refused.
import { describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 64 * GB, availableBytes: 64 * GB };
const prompt = [1, 2, 3, 4, 5, 6, 7, 8];

describe("Engine.close", () => {
  it("refuses a generation after close(), naming why", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    e.close();
    e.close(); // twice is harmless
    await expect(e.complete(prompt, { maxTokens: 2, temperature: 0 })).rejects.toThrow(/the model is closed/);
  });

  it("stops a generation at its next token when closed between tokens, instead of computing on released weights", async () => {
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    const it = e.generate(prompt, { maxTokens: 6, stopIds: [], temperature: 0 });
    const first = await it.next(); // the prefill has run
    expect(first.done).toBe(false);
    e.close();
    await expect(it.next()).rejects.toThrow(/the model is closed/);
  });

  it("finishes a forward already running when close() is called, on intact weights", async () => {
    const ref = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    const want = (await ref.complete(prompt, { maxTokens: 1, stopIds: [], temperature: 0 })).ids;
    ref.close();
    const e = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop" });
    const run = e.complete(prompt, { maxTokens: 1, stopIds: [], temperature: 0 });
    e.close(); // the prefill forward has started (complete() ran up to its first await)
    expect((await run).ids).toEqual(want);
  });
});
