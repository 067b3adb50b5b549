/** A command's help, made from its usage, prose and the option table (so every flag it takes is listed with its default). */
import type { Command } from "./command.js";
import { OPTIONS, type OptionSpec } from "./table.js";

/** Column where the flags' help starts. */
const HELP_COLUMN = 23;

/** Longest help line before "(default X)" moves to a line of its own. */
const HELP_WIDTH = 80;

/** One flag's lines: "  --flag ARG" then its help, continuation lines aligned under it, "(default X)" at the end. */
export function optionLines(flag: string, s: OptionSpec): string {
  const head = `  --${flag}${s.arg ? ` ${s.arg}` : ""}`;
  const shown = s.shows ?? (s.default !== undefined ? String(s.default) : undefined);
  const lines = s.help.split("\n");
  if (shown !== undefined) {
    const suffix = `(default ${shown})`;
    if (lines[lines.length - 1].length + 1 + suffix.length <= HELP_WIDTH) lines[lines.length - 1] += ` ${suffix}`;
    else lines.push(suffix);
  }
  const first = head.length < HELP_COLUMN - 1 ? head.padEnd(HELP_COLUMN) : `${head}  `;
  return [first + lines[0], ...lines.slice(1).map((l) => " ".repeat(HELP_COLUMN) + l)].join("\n");
}

export function commandHelp(command: Command): string {
  const parts = [command.usage.trimEnd(), command.about.trim()];
  for (const s of command.sections) {
    const lines: string[] = [];
    if (s.title) lines.push(s.title);
    if (s.note) lines.push(s.note.trimEnd());
    for (const use of s.options) {
      const [name, override] = typeof use === "string" ? [use, {}] : use;
      lines.push(optionLines(name, { ...(OPTIONS[name] as OptionSpec), ...override }));
    }
    parts.push(lines.join("\n"));
  }
  if (command.epilogue) parts.push(command.epilogue.trim());
  return parts.join("\n\n") + "\n";
}
