// The one vitest config of the repo: every package's `test` script runs
// `vitest run --config ../../vitest.config.ts` from its own folder (the root is that folder).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // Native addons keep process-wide state (SIMD level, thread pool): files run in child
    // processes, not worker threads.
    pool: "forks",
    // `pnpm test` proves the shipped prebuild loads; `pnpm test:source` sets K3_SOURCE_BUILD=1.
    env: process.env.K3_SOURCE_BUILD ? {} : { PREBUILDS_ONLY: "1" },
    testTimeout: 60_000,
    // Each run gets a fresh TMPDIR and fails if a test leaves anything in it.
    globalSetup: [new URL("./scripts/vitest/clean-tmpdir.ts", import.meta.url).pathname],
  },
});
