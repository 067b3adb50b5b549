/**
 * k3-safetensors: inspect or verify a .safetensors file or a checkpoint directory.
 *
 *   k3-safetensors inspect <file|dir> [--json] [--backend native|ts]
 *   k3-safetensors verify  <file|dir> [--backend native|ts]
 *   k3-safetensors get     <file|dir> <tensor>
 *
 * Exit codes: 0 ok, 1 invalid checkpoint (the SafetensorsError is printed), 2 usage.
 */
import { statSync } from "node:fs";
import { SafetensorsError, defaultBackend, openCheckpoint, openSafetensors, type Checkpoint } from "./index.js";
import { formatSummary, summarize } from "./summary.js";

const USAGE = `usage: k3-safetensors inspect <file|dir> [--json] [--backend native|ts]
       k3-safetensors verify  <file|dir> [--backend native|ts]
       k3-safetensors get     <file|dir> <tensor-name>`;

async function open(path: string, backend?: "native" | "ts"): Promise<Checkpoint> {
  return statSync(path).isDirectory() ? openCheckpoint(path, { backend }) : openSafetensors(path, { backend });
}

export async function main(argv: string[]): Promise<number> {
  const args = argv.filter((a) => !a.startsWith("--"));
  const flag = (name: string) => argv.includes(`--${name}`);
  const bi = argv.indexOf("--backend");
  const backend = bi >= 0 ? (argv[bi + 1] as "native" | "ts") : undefined;
  if (backend) args.splice(args.indexOf(backend), 1);
  const [command, path, name] = args;
  if (!command || !path || !["inspect", "verify", "get"].includes(command) || (command === "get" && !name)) {
    console.error(USAGE);
    return 2;
  }
  try {
    const t0 = performance.now();
    const ck = await open(path, backend);
    const ms = performance.now() - t0;
    if (command === "verify") {
      console.log(`ok: ${path}: ${ck.size} tensors in ${ck.files.length} file(s), indexed in ${ms.toFixed(1)} ms (${ck.backend} parser)`);
      for (const w of ck.warnings) console.log(`warning: ${w}`);
    } else if (command === "get") {
      console.log(JSON.stringify(ck.get(name), null, 2));
    } else {
      const summary = summarize(ck);
      if (flag("json")) console.log(JSON.stringify(summary, null, 2));
      else console.log(`${formatSummary(summary, path)}\n\nindexed in ${ms.toFixed(1)} ms with the ${ck.backend} parser`);
    }
    ck.closeSync();
    return 0;
  } catch (err) {
    if (err instanceof SafetensorsError) {
      console.error(`invalid: ${err.message}`);
      return 1;
    }
    if (err instanceof Error && "code" in err && (err as NodeJS.ErrnoException).code === "ENOENT") {
      console.error(`not found: ${path}`);
      return 1;
    }
    throw err;
  }
}

export { defaultBackend };
