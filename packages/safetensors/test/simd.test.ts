/**
 * The native byte scans (where the plain part of a JSON string ends; where ASCII ends for the
 * UTF-8 check) have SWAR, AVX2 and AVX-512 versions, chosen by the process-wide @k3/dense SIMD
 * level. Every level must give exactly the TS parser's result on strings that end, escape,
 * break, run out or hold (invalid) UTF-8 at every offset around the 8-, 32- and 64-byte steps.
 */
import { afterAll, describe, expect, it } from "vitest";
import { bestSimdLevel, setSimdLevel, simdLevel, type SimdLevel } from "@k3/dense";
import { SafetensorsError, parseSafetensors } from "../src/index.js";
import { nativePoolReady } from "../src/native.js";
import { BACKENDS, fileOf } from "./helpers.js";

const ORDER: SimdLevel[] = ["scalar", "avx2", "avx512"];

function outcome(bytes: Uint8Array, backend: "ts" | "native"): unknown {
  try {
    const ck = parseSafetensors(bytes, { backend, name: "s.safetensors" });
    return [...ck.tensors].map((t) => [t.name, t.dtype, t.shape, t.dataOffsets]);
  } catch (e) {
    if (!(e instanceof SafetensorsError)) throw e;
    return { code: e.code, message: e.message, position: e.position, tensor: e.tensor };
  }
}

/** Headers whose first name has a special byte (or its end) at every offset 0..140. */
function cases(): Uint8Array[] {
  const out: Uint8Array[] = [];
  const entry = `{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`;
  const specials = ["", "\\n", "\\u00e9", "\\\\", "\u0001", "\u00e9", "\u4e2d", "\\x"];
  for (let k = 0; k <= 140; k++) {
    for (const sp of specials) {
      const name = "n".repeat(k) + sp + "m".repeat((k * 7) % 23);
      out.push(fileOf(`{"${name}":${entry}}`, 1));
    }
    out.push(fileOf(`{"${"u".repeat(k)}`)); // the string runs to the end of the header
    // UTF-8: invalid sequences (0xff, overlong, truncated, surrogate) after k ASCII bytes
    for (const bad of [[0xff], [0xc0, 0xaf], [0xe4, 0xb8], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80]]) {
      const text = Buffer.from(`{"${"a".repeat(k)}`, "latin1");
      const tail = Buffer.from(`":${entry}}`, "latin1");
      out.push(fileOf(Buffer.concat([text, Buffer.from(bad), tail]), 1));
    }
    out.push(fileOf(`{"__metadata__":{"${"k".repeat(k)}":"${"v".repeat(140 - k)}"}}`));
  }
  return out;
}

describe("byte scans on every SIMD level", () => {
  const level0 = BACKENDS.includes("native") ? simdLevel() : "scalar";
  afterAll(() => {
    if (BACKENDS.includes("native")) setSimdLevel(level0);
  });

  it.skipIf(!BACKENDS.includes("native"))("gives the TS parser's result on scalar, AVX2 and AVX-512", async () => {
    expect(await nativePoolReady).toBe(true); // the level reaches the addon through the pool's API
    const levels = ORDER.slice(0, ORDER.indexOf(bestSimdLevel()) + 1);
    if (levels.length < 3) console.log(`[simd test] this CPU stops at ${bestSimdLevel()}: ${levels.join(", ")} compared`);
    const all = cases();
    const expected = all.map((b) => outcome(b, "ts"));
    for (const level of levels) {
      setSimdLevel(level);
      all.forEach((b, i) => expect(outcome(b, "native"), `${level} case ${i}`).toEqual(expected[i]));
    }
    // Both accepts and each kind of reject are among the cases.
    const codes = new Set(expected.map((r) => (Array.isArray(r) ? "ok" : (r as { code: string }).code)));
    expect([...codes].sort()).toEqual(["InvalidJson", "InvalidUtf8", "ok"]);
    expect(expected.filter((r) => Array.isArray(r)).length).toBeGreaterThan(600);
  });
});
