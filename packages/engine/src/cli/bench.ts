/** `k3 bench`: prefill and decode speed on a model, with the run report and its floor. */
import { EXIT_OK } from "../errors.js";
import type { Args, Command } from "./command.js";
import { EMBEDDED_BENCH_NOTE, modelDir } from "./model-dir.js";
import { engineOptions, writeJson } from "./shared.js";
import { MODEL_FLAGS } from "./table.js";

export const command: Command = {
  usage: "usage: k3 bench [--prompt-tokens N] [--gen N] [--no-floor] [--json FILE] [options]",
  about: `Prefill and decode speed on a model (default: the embedded tiny model), with the run report: per
layer kind the time, bytes touched and read, and the floor against the memory-read and disk-read
ceilings measured first in the same run (--no-floor skips them).`,
  sections: [
    { options: ["prompt-tokens", "gen", "no-floor", ["json", { help: 'write the run report as JSON ("-" = stdout)' }]] },
    { title: "model and memory:", options: MODEL_FLAGS },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const values = args.values;
  const { Engine } = await import("../engine.js");
  const { formatReport } = await import("../report.js");
  const { dir, embedded } = modelDir(values);
  if (embedded) process.stderr.write(EMBEDDED_BENCH_NOTE + "\n");
  const engine = await Engine.load(dir, { ...engineOptions(args, (l) => process.stderr.write(l + "\n")), floor: !values["no-floor"] });
  try {
    // A deterministic prompt of ordinary ids (no specials).
    const prompt = Array.from({ length: values["prompt-tokens"] as number }, (_, i) => (i * 7919 + 13) % engine.tokenizer.nRanks);
    const r = await engine.complete(prompt, { maxTokens: values.gen, stopIds: [], temperature: 0 });
    const report = engine.floorAfterRun(r.report);
    process.stdout.write(formatReport(report) + "\n");
    writeJson(values.json, report);
    return EXIT_OK;
  } finally {
    engine.close();
  }
}
