/** `k3 verify`: every checkpoint file's SHA-256 against what the download recorded (or a manifest). */
import { EXIT_OK, EXIT_RUNTIME, UsageError } from "../errors.js";
import type { Args, Command } from "./command.js";
import { writeJson } from "./shared.js";

export const command: Command = {
  usage: "usage: k3 verify --model DIR [--manifest FILE] [--state FILE] [--restart] [--threads N] [--json FILE]",
  about: `Hashes every file of the checkpoint (SHA-256) and compares it with the hash k3 download recorded in
DIR/.k3-download.json (every file it fetched), or a --manifest (SHA256SUMS lines '<hex>  <name>',
or JSON name -> hex), or DIR/SHA256SUMS. Files are hashed on worker threads (--threads, default all
cores) in 16 MiB reads with the next read in flight. A progress bar shows bytes, GB/s and ETA.
Resumable: each finished file is recorded in DIR/.k3-verify.json (--state FILE elsewhere) with its
size, mtime and inode, and a rerun skips files still matching; --restart hashes everything again.
Ctrl-C stops (the files already finished are kept). Exit 0 when every file matches; 5 naming each
bad (with the tensors of a bad shard), missing or unreadable file; 2 when there is nothing to
compare with.`,
  sections: [
    {
      options: [
        ["model", { help: "checkpoint directory (required)", shows: "$K3_MODEL_DIR" }],
        "manifest",
        "state",
        "restart",
        ["threads", { help: "hashing threads", shows: "all cores" }],
        ["json", { help: 'write every file\'s result as JSON ("-" = stdout)' }],
      ],
    },
  ],
  positionals: true,
  run,
};

async function run({ values, positionals }: Args): Promise<number> {
  if (positionals.length) throw new UsageError(`k3 verify: unexpected argument ${JSON.stringify(positionals[0])} (see k3 verify --help)`);
  const model = (values.model as string | undefined) ?? process.env.K3_MODEL_DIR;
  if (!model) throw new UsageError("k3 verify: --model DIR is required (see k3 verify --help)");
  const { verifyCheckpoint, formatVerify, VerifyError } = await import("../verify.js");
  const { progressPrinter } = await import("@k3/native");
  const bar = progressPrinter(process.stderr);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once("SIGINT", onSigint);
  let r;
  try {
    r = await verifyCheckpoint({
      dir: model,
      manifest: values.manifest,
      stateFile: values.state,
      restart: !!values.restart,
      threads: values.threads,
      signal: ac.signal,
      log: (l) => process.stderr.write(l + "\n"),
      onProgress: (p) => bar({ phase: "verify", item: p.file, ...p }),
    });
  } finally {
    process.off("SIGINT", onSigint);
  }
  const { lines, bad } = formatVerify(r);
  process.stdout.write(lines.join("\n") + "\n");
  writeJson(values.json, r);
  if (bad.length) throw new VerifyError(`k3 verify: ${bad.length} file(s) bad or missing: ${bad.map((f) => f.name).join(", ")}`, bad);
  return r.interrupted ? EXIT_RUNTIME : EXIT_OK;
}
