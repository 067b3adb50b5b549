/** `k3 download`: a checkpoint from a Hugging Face-compatible hub, pinned, resumable, hashed. Loads no native addon. */
import { EXIT_OK, UsageError } from "../errors.js";
import type { Args, Command } from "./command.js";

export const command: Command = {
  usage: `usage: k3 download OWNER/NAME --dir DIR [--revision REV] [--include GLOB]... [--concurrency 4]
                  [--verify size|full] [--endpoint URL] [--token TOKEN]`,
  about: `Fetches a checkpoint from a Hugging Face-compatible hub (default $HF_ENDPOINT or huggingface.co;
token: --token or $HF_TOKEN). The revision (default main) is pinned to one commit first and kept in
DIR/.k3-download.json, so a rerun resumes the same commit. Free space for what is left (+ 1 GiB) is
checked before writing. Each file goes to FILE.part with HTTP range resume, is hashed (SHA-256) as
it streams and is renamed into place only when its size and, for LFS files, its sha256 match the
hub's listing; a mismatch keeps the bytes as FILE.part.bad and fails (exit 5). Finally every shard
index.json names must be present. --include fetches only matching files (e.g. the first shards and
the small files, for --layers N); --verify full re-hashes files already on disk. Rerun to resume.`,
  sections: [{ options: ["dir", "revision", "include", "concurrency", "verify", "endpoint", "token"] }],
  positionals: true,
  run,
};

async function run({ values, positionals }: Args): Promise<number> {
  if (positionals.length !== 1) throw new UsageError(`k3 download: give one repository (owner/name), got ${positionals.length}\n(see k3 download --help)`);
  if (typeof values.dir !== "string") throw new UsageError("k3 download: --dir DIR is required");
  const { downloadCheckpoint } = await import("../download.js");
  const { formatBytes, progressPrinter } = await import("@k3/native");
  const bar = progressPrinter(process.stderr);
  const r = await downloadCheckpoint({
    repo: positionals[0],
    dir: values.dir,
    revision: values.revision,
    include: values.include,
    concurrency: values.concurrency,
    verify: values.verify,
    endpoint: values.endpoint,
    token: values.token,
    log: (l) => process.stderr.write(l + "\n"),
    onProgress: (p) => bar({ phase: "download", item: p.file, ...p }),
  });
  process.stderr.write(`done: ${r.files.length} files at ${r.revision}, ${formatBytes(r.fetchedBytes)} fetched, ${formatBytes(r.resumedBytes)} already there, ${r.seconds.toFixed(1)} s\n`);
  return EXIT_OK;
}
