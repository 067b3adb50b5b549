/**
 * Which model a `k3` command runs when none is named: --model, else $K3_MODEL_DIR, else the
 * embedded model (embedded.ts: its directory and default prompt). The one place the CLI chooses
 * and describes the embedded model.
 */
import { resolve } from "node:path";
import { embeddedModelDir } from "../embedded.js";

export function modelDir(values: { model?: string }): { dir: string; embedded: boolean } {
  if (typeof values.model === "string") return { dir: resolve(values.model), embedded: false };
  if (process.env.K3_MODEL_DIR) return { dir: resolve(process.env.K3_MODEL_DIR), embedded: false };
  return { dir: embeddedModelDir(), embedded: true };
}

/** Printed whenever a command falls back to the embedded model. */
export const EMBEDDED_NOTE =
  "note: no --model given, so this runs the embedded tiny K3: K3's graph and released layout at hidden 128\n" +
  "      (8 layers, 7.9 M parameters), trained for 34 minutes on The Rust Programming Language book. It writes\n" +
  "      book-like text, not answers, and was not trained on chat: prompts are completed raw unless --chat.\n" +
  "      For a real model: k3 run --model /path/to/Kimi-K3 --prompt \"...\"";

/** What chat and serve add for the embedded model: its replies continue the transcript as book text. */
export const EMBEDDED_CHAT_NOTE = "      Chat and serve use the chat template anyway: replies continue the transcript as book-like text.";

/** What bench says about the embedded model. */
export const EMBEDDED_BENCH_NOTE = "(embedded tiny model: 7.9 M parameters at hidden 128; measures the pipeline, not K3's speed)";

/** The embedded model's matrices are too small to split across threads profitably: one thread unless told. */
export const EMBEDDED_THREADS = 1;
