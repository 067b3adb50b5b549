/** `k3 chat`: the interactive REPL; the conversation state stays in memory across turns. */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import type { Engine } from "../engine.js";
import { errorText, EXIT_OK } from "../errors.js";
import { DEFAULTS } from "../options.js";
import type { Args, Command } from "./command.js";
import { EMBEDDED_CHAT_NOTE, EMBEDDED_NOTE, modelDir } from "./model-dir.js";
import { engineOptions, prefillPrinter, samplingOptions, signalsRun } from "./shared.js";
import { MODEL_FLAGS, SAMPLING_FLAGS, type OptionUse } from "./table.js";

export const command: Command = {
  usage: "usage: k3 chat [--system TEXT] [--no-think] [--effort low|high|max] [options]",
  about: `Interactive chat. The conversation state (KDA/conv state and MLA cache) stays in memory across
turns: a new turn prefills only its own tokens. Commands: /reset, /save FILE, /load FILE, /exit.
--load FILE starts from a saved conversation (refused if it was saved for another model/config).
Ctrl-C during a reply stops it (the partial reply stays in the conversation as the assistant's
turn, closed); Ctrl-C at the prompt exits. Up/Down recall earlier input (readline, on a terminal);
with a state file (--load FILE or /save FILE) the input history is kept in FILE.history.`,
  sections: [
    { options: ["system", "no-think", "effort", "load"] },
    { title: "model and memory:", options: MODEL_FLAGS },
    // A reply gets more room than `k3 run`'s one-shot default.
    { title: "sampling:", options: SAMPLING_FLAGS.map((f): OptionUse => (f === "max-tokens" ? [f, { default: DEFAULTS.maxTokens.chat }] : f)) },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const { Engine } = await import("../engine.js");
  const { dir, embedded } = modelDir(args.values);
  if (embedded) process.stderr.write(EMBEDDED_NOTE + "\n" + EMBEDDED_CHAT_NOTE + "\n");
  const engine = await Engine.load(dir, engineOptions(args, (l) => process.stderr.write(l + "\n")));
  try {
    return await chatLoop(engine, args.values);
  } finally {
    engine.close();
  }
}

/** Lines of REPL history kept (in memory and in the file). */
const HISTORY_MAX = 1000;

/** The history file kept beside a conversation state file. */
function historyPathOf(stateFile: string): string {
  return `${resolve(stateFile)}.history`;
}

/** History lines, oldest first (a missing or unreadable file is an empty history). */
function readHistory(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split("\n").filter(Boolean).slice(-HISTORY_MAX);
  } catch {
    return [];
  }
}

async function chatLoop(engine: Engine, values: Args["values"]): Promise<number> {
  const { ChatSession } = await import("../chat.js");
  const session = new ChatSession(engine, { system: values.system, thinking: !values["no-think"], effort: values.effort });
  if (values.load) session.load(String(values.load));
  const sampling = samplingOptions(values);
  // Up-arrow history (readline on a TTY), kept in STATE.history beside the state file once there is
  // one (--load FILE or /save FILE); without one it lives for this session only.
  let historyFile = values.load ? historyPathOf(String(values.load)) : null;
  const history = historyFile ? readHistory(historyFile) : [];
  const tty = !!process.stdin.isTTY && !!process.stdout.isTTY;
  // The async line iterator buffers input, so piped lines typed ahead of a reply are not lost.
  const rl = createInterface({ input: process.stdin, output: tty ? process.stdout : undefined, terminal: tty, history: [...history].reverse(), historySize: HISTORY_MAX, prompt: "> " });
  const remember = (line: string) => {
    history.push(line);
    if (history.length > HISTORY_MAX) history.splice(0, history.length - HISTORY_MAX);
    if (historyFile) writeFileSync(historyFile, history.join("\n") + "\n");
  };
  // Ctrl-C: during a reply it stops the reply; at the prompt it exits. On a TTY readline reports
  // it as its own SIGINT event; piped (or `kill -INT`) it is the process signal.
  let reply: AbortController | null = null;
  const interrupt = () => {
    if (reply) return void reply.abort();
    process.stdout.write("\n(Ctrl-C at the prompt: exit)\n");
    rl.close();
  };
  rl.on("SIGINT", interrupt);
  process.on("SIGINT", interrupt);
  const prompt = () => (tty ? rl.prompt() : undefined);
  process.stderr.write("type a message; /reset, /save FILE, /load FILE, /exit; Ctrl-C stops a reply, Ctrl-C at the prompt exits\n");
  prompt();
  try {
    for await (const line of rl) {
      const cmd = line.trim();
      if (cmd) remember(line);
      if (cmd === "/exit") break;
      try {
        if (cmd === "/reset") {
          session.reset();
          process.stdout.write("(conversation reset)\n");
        } else if (cmd.startsWith("/save ")) {
          const file = cmd.slice(6).trim();
          session.save(file);
          historyFile = historyPathOf(file);
          writeFileSync(historyFile, history.join("\n") + "\n");
          process.stdout.write(`(saved to ${file})\n(input history in ${historyFile})\n`);
        } else if (cmd.startsWith("/load ")) {
          session.load(cmd.slice(6).trim());
          process.stdout.write(`(loaded ${session.messages.length} messages)\n`);
        } else if (cmd.startsWith("/")) {
          process.stdout.write("commands: /reset, /save FILE, /load FILE, /exit\n");
        } else if (cmd) {
          reply = new AbortController();
          const gen = session.send(line, { ...sampling, signal: reply.signal, onPrefillProgress: prefillPrinter(process.stderr) });
          let r = await gen.next();
          while (!r.done) {
            process.stdout.write(r.value.text);
            await signalsRun();
            r = await gen.next();
          }
          const rep = r.value.report;
          if (r.value.stopReason === "abort") {
            // The partial reply stays in the conversation as the assistant's (closed) turn; the
            // model state holds it unfinished, so the next turn re-reads the whole conversation.
            process.stdout.write(`\n[stopped by Ctrl-C after ${rep.generated_tokens} tokens: the partial reply is kept as the assistant's turn, closed; the next turn re-reads the conversation]\n`);
          } else {
            process.stdout.write(`\n[${session.lastPrefillTokens} new prompt tokens, ${rep.generated_tokens} generated, ${rep.decode_tokens_per_second.toFixed(1)} tok/s]\n`);
          }
        }
      } catch (e) {
        process.stdout.write(`error: ${errorText(e)}\n`);
      } finally {
        reply = null;
      }
      prompt();
    }
  } finally {
    process.off("SIGINT", interrupt);
    rl.close();
  }
  return EXIT_OK;
}
