// `pnpm test` sets PREBUILDS_ONLY=1: this proves the shipped binary is what the suites ran.
import { expect, it } from "vitest";
import { addon } from "../src/native.js";

it("loads the prebuilt addon under pnpm test, the local build under test:source", () => {
  expect(addon.origin).toBe(process.env.K3_SOURCE_BUILD ? "source" : "prebuilt");
  expect(addon.file).toMatch(/\.node$/);
});
