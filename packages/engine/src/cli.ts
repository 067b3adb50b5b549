#!/usr/bin/env node
/**
 * The `k3` command. The commands live in cli/, one file each, imported only when they run
 * (cli/commands.ts); their flags come from one table (cli/table.ts) that makes both the parser
 * and the help. Exit codes: errors.ts EXIT_KINDS.
 */
import { readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE, errorText, exitCodeOf, UsageError } from "./errors.js";
import { parseCommand } from "./cli/args.js";
import { COMMANDS, findCommand } from "./cli/commands.js";
import { commandHelp } from "./cli/help.js";

const here = dirname(fileURLToPath(import.meta.url));

function version(): string {
  return JSON.parse(readFileSync(join(here, "..", "package.json"), "utf8")).version;
}

const GLOBAL_HELP = `k3 — Kimi K3 / Kimi-Linear on one CPU

usage: k3 <command> [options]        (k3 <command> --help for details)

commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(14)} ${c.summary}`).join("\n")}

global: --help, --version, --list-presets
${EXIT_CODES_HELP}
`;

function print(text: string): number {
  process.stdout.write(text);
  return EXIT_OK;
}

async function listPresets(): Promise<number> {
  const { PRESETS } = await import("./presets.js");
  return print(
    "preset       trunk GB  cache GB  KV GB  notes\n" +
      Object.entries(PRESETS)
        .map(([n, p]) => `${n.padEnd(12)} ${String(p.trunkGb).padStart(8)}  ${String(p.cacheGb).padStart(8)}  ${String(p.kvGb).padStart(5)}  ${p.note}`)
        .join("\n") +
      "\nauto         from MemAvailable: the whole trunk when it fits, else pinning capped at 0.55 x MemTotal\n",
  );
}

/** Runs the CLI; returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  try {
    switch (name) {
      case undefined:
      case "help":
      case "--help":
      case "-h":
        return print(GLOBAL_HELP);
      case "--version":
      case "-v": {
        const { bestSimdLevel, simdLevel, threadCount } = await import("@k3/dense");
        return print(`k3 ${version()} (SIMD ${simdLevel()}, best ${bestSimdLevel()}, ${threadCount()} threads)\n`);
      }
      case "--list-presets":
        return await listPresets();
    }
    const entry = findCommand(name);
    if (!entry) throw new UsageError(`k3: unknown command ${JSON.stringify(name)}\n\n${GLOBAL_HELP}`);
    const command = await entry.load();
    const args = parseCommand(entry.name, command, rest);
    if (args.values.help) return print(commandHelp(command));
    return await command.run(args);
  } catch (err) {
    const code = exitCodeOf(err);
    const e = err as Error & { exitCode?: number };
    process.stderr.write(`${code === EXIT_USAGE ? "" : "error: "}${errorText(e)}\n`);
    return typeof e.exitCode === "number" ? e.exitCode : code;
  }
}

function invokedDirectly(): boolean {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}
if (invokedDirectly()) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
