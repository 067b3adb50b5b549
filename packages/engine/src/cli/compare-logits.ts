/** `k3 compare-logits`: two logits dumps step by step (max and relative L2 difference, first argmax change). */
import { resolve } from "node:path";
import { EXIT_OK, EXIT_RUNTIME, UsageError } from "../errors.js";
import type { Args, Command } from "./command.js";
import { writeJson } from "./shared.js";

export const command: Command = {
  usage: "usage: k3 compare-logits A.safetensors B.safetensors [--rtol 1e-3] [--json FILE]",
  about: `Compares two logits dumps (k3 run --dump-logits, or a reference written in the same layout:
logits.<step> F32 [vocab] and ids I32 [steps]) step by step: max |a-b|, ||a-b|| / ||b||, and the
first step where the argmax differs. Refuses dumps of different prompts or vocabularies.
Exit 0 when the argmax agrees at every common step and the worst relative L2 is <= --rtol, else 1.`,
  sections: [{ options: ["rtol", ["json", { help: 'write the comparison as JSON ("-" = stdout)' }]] }],
  positionals: true,
  run,
};

async function run({ values, positionals }: Args): Promise<number> {
  if (positionals.length !== 2) throw new UsageError(`k3 compare-logits: give two files (got ${positionals.length})\n(see k3 compare-logits --help)`);
  const { compareLogits, formatComparison, readLogits } = await import("../logits-dump.js");
  const [a, b] = positionals.map((f) => readLogits(resolve(f)));
  const c = compareLogits(a, b);
  process.stdout.write(formatComparison(a, b, c) + "\n");
  writeJson(values.json, c);
  return c.firstArgmaxDiff === null && c.worstRelL2 <= values.rtol ? EXIT_OK : EXIT_RUNTIME;
}
