// Files above 4 GiB: positions as JS numbers, reads and maps past 2^32 (a sparse file: no disk cost).
import { closeSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { openSafetensors, openSafetensorsSync } from "../src/index.js";
import { BACKENDS, tempDir } from "./helpers.js";

describe.each(BACKENDS)("a 5 GiB sparse file (%s)", (backend) => {
  it("indexes, reads and maps a tensor that sits past 4 GiB", async () => {
    const big = 5 * 2 ** 30;
    const header = Buffer.from(`{"hole":{"dtype":"U8","shape":[${big}],"data_offsets":[0,${big}]},"tail":{"dtype":"F32","shape":[2],"data_offsets":[${big},${big + 8}]}}`);
    const file = join(tempDir("big"), "big.safetensors");
    const fd = openSync(file, "w");
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(header.length));
    writeSync(fd, prefix, 0, 8, 0);
    writeSync(fd, header, 0, header.length, 8);
    const tail = Buffer.from(new Float32Array([3.25, -1.5]).buffer);
    const tailAt = 8 + header.length + big;
    ftruncateSync(fd, tailAt + 8);
    writeSync(fd, tail, 0, 8, tailAt);
    closeSync(fd);

    const ck = await openSafetensors(file, { backend });
    const info = ck.get("tail");
    expect(info.offset).toBe(tailAt);
    expect(info.offset).toBeGreaterThan(2 ** 32);
    expect(Buffer.from(ck.readSync("tail"))).toEqual(tail);
    expect(Buffer.from(await ck.read("tail"))).toEqual(tail);
    const into = new Uint8Array(16);
    await ck.readInto("tail", into, 8);
    expect(Buffer.from(into.subarray(8))).toEqual(tail);
    expect(Buffer.from(ck.readRunSync({ file, offset: tailAt, byteLength: 8 }))).toEqual(tail);
    if (BACKENDS.length === 2) expect(Array.from(new Float32Array(ck.map("tail").buffer))).toEqual([3.25, -1.5]);
    expect(() => ck.readRunSync({ file, offset: tailAt, byteLength: 9 })).toThrow(/not inside/);
    ck.closeSync();
    expect(openSafetensorsSync(file, { backend }).get("hole").byteLength).toBe(big);
  });
});
