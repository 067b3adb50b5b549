import { defineConfig } from "vitest/config";

// `pnpm test` proves the shipped prebuild loads; `pnpm test:source` sets K3_SOURCE_BUILD=1.
export default defineConfig({
  test: {
    pool: "forks",
    env: process.env.K3_SOURCE_BUILD ? {} : { PREBUILDS_ONLY: "1" },
    testTimeout: 60_000,
  },
});
