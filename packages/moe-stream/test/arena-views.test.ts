// ArenaViews over a fake store: the windowed mode (ExpertStore) makes its few views up front and
// serves every range as a subarray of the right bytes; the per-region mode makes a view on first use.
import { describe, expect, it } from "vitest";
import { ArenaViews } from "../src/io/arena-views.js";
import type { NativeExpertStore } from "../src/native.js";

// An "arena" of `bytes` whose byte i is i mod 251; view() counts its calls.
function fakeStore(bytes: number) {
  const calls: Array<[number, number]> = [];
  const store = {
    view(offset: number, length: number): ArrayBuffer {
      if (offset < 0 || length <= 0 || offset + length > bytes) throw new Error(`view [${offset}, +${length}) outside the ${bytes}-byte arena`);
      calls.push([offset, length]);
      const b = new Uint8Array(length);
      for (let i = 0; i < length; i++) b[i] = (offset + i) % 251;
      return b.buffer;
    },
  } as unknown as NativeExpertStore;
  return { store, calls };
}

const expectArena = (v: Uint8Array, at: number, length: number) => {
  expect(v.length).toBe(length);
  for (let i = 0; i < length; i += Math.max(1, length >> 4)) expect(v[i], `byte ${at + i}`).toBe((at + i) % 251);
  expect(v[length - 1]).toBe((at + length - 1) % 251);
};

describe("ArenaViews", () => {
  it("windowed: every view is made at construction, none while ranges are served", () => {
    const arena = 10_000;
    const slot = 700;
    const { store, calls } = fakeStore(arena);
    // windows of 2048 bytes every 1024 (a test-sized WINDOW_BYTES)
    const views = new ArenaViews(store, "test", 4096, arena, 2048);
    const made = calls.length;
    expect(calls[0]).toEqual([0, 2048]);
    expect(calls.at(-1)![0] + calls.at(-1)![1]).toBe(arena); // the last window reaches the arena's end
    for (let s = 0; s * slot + slot <= arena; s++)
      for (const [off, len] of [[0, slot], [13, 500], [slot - 1, 1]] as const) expectArena(views.bytes(s * slot, slot, off, len), s * slot + off, len);
    expect(calls.length, "no view made after construction").toBe(made);
  });

  it("windowed: a range longer than half a window gets its own view; bounds are still checked", () => {
    const { store, calls } = fakeStore(8192);
    const views = new ArenaViews(store, "test", 4096, 8192, 2048);
    const made = calls.length;
    expectArena(views.bytes(1000, 3000, 0, 3000), 1000, 3000);
    expect(calls.length).toBe(made + 1);
    expect(() => views.bytes(0, 100, 50, 51)).toThrow(/test: range \[50, \+51\) is outside its 100-byte region/);
  });

  it("per region (no arenaBytes): one view per region, made on first use", () => {
    const { store, calls } = fakeStore(10_000);
    const views = new ArenaViews(store, "test", 4096);
    expect(calls.length).toBe(0);
    expectArena(views.bytes(700, 700, 10, 100), 710, 100);
    expectArena(views.bytes(700, 700, 0, 700), 700, 700);
    expect(calls).toEqual([[700, 700]]);
  });
});
