// Under `pnpm test` (PREBUILDS_ONLY=1) the shipped binary must load: the TS fallback would
// otherwise pass every suite silently in its place.
import { expect, it } from "vitest";
import { nativeBinding, nativeLoadError } from "../src/native.js";

it("loads the native addon (prebuilt under pnpm test) instead of falling back to TS", () => {
  expect(nativeLoadError).toBeNull();
  expect(nativeBinding).not.toBeNull();
});

it("mapRange refuses a range one JS buffer cannot hold (above 2^32 bytes) instead of crashing", async () => {
  const { closeSync, ftruncateSync, mkdtempSync, openSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "k3-map-"));
  try {
    const file = join(dir, "big.bin");
    const fd = openSync(file, "w");
    ftruncateSync(fd, 5 * 2 ** 30); // sparse: no disk space
    closeSync(fd);
    expect(() => nativeBinding!.mapRange(file, 0, 2 ** 32 + 4096)).toThrow(/mapRange: length 4294971392 of .*big\.bin is above the 4294967296 bytes/);
    expect(new Uint8Array(nativeBinding!.mapRange(file, 2 ** 32, 4096)).every((x) => x === 0)).toBe(true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
