// The shipped addon must load under `pnpm test` (PREBUILDS_ONLY=1): otherwise the suites below
// would only exercise the TypeScript fallback. K3_TIKTOKEN_BACKEND=typescript opts out explicitly.
import { describe, expect, it } from "vitest";
import { nativeLoadError, nativeOrigin } from "../src/index.js";

describe("native core", () => {
  it("loads (or the fallback was requested explicitly)", () => {
    if (process.env.K3_TIKTOKEN_BACKEND === "typescript") {
      console.warn("[tiktoken-bpe] K3_TIKTOKEN_BACKEND=typescript: native tests skipped on request");
      expect(nativeLoadError()?.message).toMatch(/K3_TIKTOKEN_BACKEND/);
      return;
    }
    expect(nativeLoadError()).toBeUndefined();
    expect(nativeOrigin()).toBe(process.env.K3_SOURCE_BUILD ? "source" : "prebuilt");
  });
});
