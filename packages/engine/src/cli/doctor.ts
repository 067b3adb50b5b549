/** `k3 doctor`: this machine and a checkpoint, checked before a long run. */
import { resolve } from "node:path";
import { EXIT_OK, EXIT_RUNTIME } from "../errors.js";
import type { Args, Command } from "./command.js";
import { shardDirsOf } from "./shared.js";

export const command: Command = {
  usage: "usage: k3 doctor [--model DIR] [--probe-mb N]",
  about: `Checks Node, the native addons and SIMD level, threads, RAM (MemAvailable → suggested preset), a
disk read probe with the engine's access pattern (expert-sized positioned reads at scattered
offsets of the checkpoint's shards), and the checkpoint itself (config, tokenizer, every shard's
size against its header). Exits 1 only for blocking problems.`,
  sections: [{ options: [["model", { help: "checkpoint directory", shows: "$K3_MODEL_DIR" }], "shard-dirs", "probe-mb"] }],
  run,
};

async function run({ values }: Args): Promise<number> {
  const { runDoctor } = await import("../doctor.js");
  const dir = typeof values.model === "string" ? resolve(values.model) : process.env.K3_MODEL_DIR ? resolve(process.env.K3_MODEL_DIR) : null;
  const ok = await runDoctor({ dir, shardDirs: shardDirsOf(values), probeBytes: values["probe-mb"] * 1e6, out: (l) => process.stdout.write(l + "\n") });
  return ok ? EXIT_OK : EXIT_RUNTIME;
}
