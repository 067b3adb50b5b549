/** Parses a command's flags from the option table: strict (an unknown flag is a usage error naming it), parsed, defaulted. */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { UsageError } from "../errors.js";
import { optionsOf, type Args, type Command } from "./command.js";

export function parseCommand(name: string, command: Command, argv: string[]): Args {
  const specs = optionsOf(command);
  const config: NonNullable<ParseArgsConfig["options"]> = {};
  for (const [flag, s] of specs) config[flag] = { type: s.type, ...(s.multiple ? { multiple: true } : {}), ...(s.short ? { short: s.short } : {}) };
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: config, allowPositionals: !!command.positionals, strict: true, tokens: true });
  } catch (err) {
    throw new UsageError(`k3 ${name}: ${(err as Error).message}\n(see k3 ${name} --help)`);
  }
  const values: Args["values"] = {};
  if (parsed.values.help) return { values: { help: true }, positionals: parsed.positionals, order: [] };
  for (const [flag, s] of specs) {
    const raw = parsed.values[flag];
    if (raw === undefined) {
      if (s.default !== undefined) values[flag] = s.default;
    } else if (s.type === "boolean" || !s.parse) values[flag] = raw;
    else values[flag] = Array.isArray(raw) ? raw.map((r) => s.parse!(String(r), `--${flag}`)) : s.parse(String(raw), `--${flag}`);
  }
  const order = (parsed.tokens ?? []).flatMap((t) => (t.kind === "option" ? [t.name] : []));
  return { values, positionals: parsed.positionals, order };
}

/** True when the flag was given (not just defaulted). */
export function given(args: Args, flag: string): boolean {
  return args.order.includes(flag);
}
