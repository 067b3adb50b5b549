// Under `pnpm test` (PREBUILDS_ONLY=1) the shipped binary must load: the TS fallback would
// otherwise pass every suite silently in its place.
import { expect, it } from "vitest";
import { nativeBinding, nativeLoadError } from "../src/native.js";

it("loads the native addon (prebuilt under pnpm test) instead of falling back to TS", () => {
  expect(nativeLoadError).toBeNull();
  expect(nativeBinding).not.toBeNull();
});
