/** `k3 pack`: the trunk (every non-expert tensor) as one aligned file plus a manifest, for streaming. */
import { resolve } from "node:path";
import { EXIT_OK, UsageError } from "../errors.js";
import { GB } from "../presets.js";
import type { Args, Command } from "./command.js";
import { shardDirsOf } from "./shared.js";

export const command: Command = {
  usage: "usage: k3 pack --model DIR --out DIR [--shard-dirs D1,D2]",
  about: `Packs every non-expert tensor (the trunk) into one 4 KiB-aligned file plus a manifest, so the
streaming presets read each layer with one aligned read. Resumable; shows a progress bar in a TTY
and JSON lines otherwise. (@k3/moe-stream packTrunk.)`,
  sections: [{ options: [["model", { help: "checkpoint directory (required)" }], ["out", { help: "output directory (required)" }], "shard-dirs"] }],
  run,
};

async function run({ values }: Args): Promise<number> {
  if (typeof values.model !== "string" || typeof values.out !== "string") throw new UsageError("k3 pack: --model DIR and --out DIR are required");
  const { packTrunk } = await import("@k3/moe-stream");
  const { progressPrinter } = await import("@k3/native");
  const t0 = performance.now();
  const result = await packTrunk(resolve(values.model), resolve(values.out), { onProgress: progressPrinter(process.stderr), shardDirs: shardDirsOf(values) });
  const seconds = (performance.now() - t0) / 1000;
  process.stderr.write(
    `packed ${result.manifest.groups?.length ?? "?"} groups, ${(result.writtenBytes / GB).toFixed(3)} GB written (${result.resumedGroups} resumed) in ${seconds.toFixed(1)} s (${(result.writtenBytes / GB / seconds).toFixed(2)} GB/s; read ${result.io.read}, write ${result.io.write}) → ${result.file}\n`,
  );
  return EXIT_OK;
}
