/**
 * k3-safetensors: inspect or verify a .safetensors file or a checkpoint directory.
 *
 *   k3-safetensors inspect <file|dir> [--json] [--backend native|ts]
 *   k3-safetensors verify  <file|dir> [--backend native|ts]
 *   k3-safetensors get     <file|dir> <tensor>
 *
 * Exit codes: 0 ok (and --help), 1 invalid checkpoint (the SafetensorsError is printed), 2 usage
 * (unknown flags and commands are refused, naming them).
 */
import { statSync } from "node:fs";
import { parseArgs } from "node:util";
import { SafetensorsError, defaultBackend, openCheckpoint, openSafetensors, type Checkpoint } from "./index.js";
import { formatSummary, summarize } from "./summary.js";

const USAGE = `usage: k3-safetensors inspect <file|dir> [--json] [--backend native|ts]
       k3-safetensors verify  <file|dir> [--backend native|ts]
       k3-safetensors get     <file|dir> <tensor-name> [--backend native|ts]
       k3-safetensors --help`;

async function open(path: string, backend?: "native" | "ts"): Promise<Checkpoint> {
  return statSync(path).isDirectory() ? openCheckpoint(path, { backend }) : openSafetensors(path, { backend });
}

const COMMANDS = ["inspect", "verify", "get"];

/** The parsed command line, or the exit code and message of a usage error / --help. */
function parse(argv: string[]): { command: string; path: string; name?: string; json: boolean; backend?: "native" | "ts" } | { exit: 0 | 2; message: string } {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: { json: { type: "boolean" }, backend: { type: "string" }, help: { type: "boolean", short: "h" } },
    });
  } catch (err) {
    return { exit: 2, message: `k3-safetensors: ${(err as Error).message}\n${USAGE}` };
  }
  const { values, positionals } = parsed;
  if (values.help) return { exit: 0, message: USAGE };
  const [command, path, name, ...extra] = positionals;
  if (!command || !COMMANDS.includes(command)) return { exit: 2, message: `k3-safetensors: ${command ? `unknown command '${command}'` : "no command"} (expected ${COMMANDS.join(", ")})\n${USAGE}` };
  if (!path) return { exit: 2, message: `k3-safetensors ${command}: missing <file|dir>\n${USAGE}` };
  if (command === "get" && !name) return { exit: 2, message: `k3-safetensors get: missing <tensor-name>\n${USAGE}` };
  if (extra.length > 0 || (command !== "get" && name !== undefined)) return { exit: 2, message: `k3-safetensors ${command}: unexpected argument '${command === "get" ? extra[0] : name}'\n${USAGE}` };
  if (values.json && command !== "inspect") return { exit: 2, message: `k3-safetensors ${command}: --json applies to inspect only\n${USAGE}` };
  const backend = values.backend;
  if (backend !== undefined && backend !== "native" && backend !== "ts") return { exit: 2, message: `k3-safetensors: --backend '${backend}': expected native or ts\n${USAGE}` };
  return { command, path, name, json: values.json ?? false, backend };
}

export async function main(argv: string[]): Promise<number> {
  const p = parse(argv);
  if ("exit" in p) {
    if (p.exit === 0) console.log(p.message);
    else console.error(p.message);
    return p.exit;
  }
  const { command, path, backend } = p;
  const name = p.name ?? "";
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
      if (p.json) console.log(JSON.stringify(summary, null, 2));
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
