/**
 * What a `k3` command is: its help (usage line, prose, option sections) and what it does. Each
 * command lives in its own file in this folder and is imported only when it runs (commands.ts),
 * so a command's module imports the engine, the server or a native package inside `run`, never at
 * its top: `k3 <command> --help` loads no native addon (test/cli-lazy.test.ts).
 */
import { OPTIONS, type OptionName, type OptionSpec, type OptionUse } from "./table.js";

/** The parsed command line: each flag's value after its parser (defaults filled in), in order. */
export interface Args {
  values: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- each flag's parser decides its type
  positionals: string[];
  /** The flags in the order given (budget flags apply left to right). */
  order: string[];
}

export interface OptionSection {
  /** A heading ("sampling:"); none for the command's own flags. */
  title?: string;
  /** Prose printed under the heading, before the flags. */
  note?: string;
  options: OptionUse[];
}

export interface Command {
  /** "usage: k3 run [...]" (one or more lines). */
  usage: string;
  /** What the command does, printed after the usage line. */
  about: string;
  sections: OptionSection[];
  /** Printed after the flags. */
  epilogue?: string;
  /** Positional arguments allowed (download, compare-logits, synth, verify). */
  positionals?: boolean;
  /** Runs the command; resolves to the exit code. */
  run(args: Args): Promise<number>;
}

/** Every flag a command takes with its effective spec (the table's, with the command's overrides). */
export function optionsOf(command: Command): Map<OptionName, OptionSpec> {
  const out = new Map<OptionName, OptionSpec>([["help", OPTIONS.help]]);
  for (const s of command.sections) {
    for (const use of s.options) {
      const [name, override] = typeof use === "string" ? [use, {}] : use;
      out.set(name, { ...(OPTIONS[name] as OptionSpec), ...override });
    }
  }
  return out;
}
