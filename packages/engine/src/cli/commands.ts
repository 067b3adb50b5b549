/**
 * The `k3` commands: name, one-line summary (the global help) and the module that implements it,
 * imported only when the command runs, so `k3 --help`, `k3 <command> --help` and `k3 download`
 * load no native addon.
 */
import type { Command } from "./command.js";

export interface CommandEntry {
  name: string;
  aliases?: string[];
  summary: string;
  load: () => Promise<Command>;
}

export const COMMANDS: CommandEntry[] = [
  { name: "run", summary: "generate from a prompt and print the run report (default model: the embedded tiny K3, trained)", load: async () => (await import("./run.js")).command },
  { name: "eval", aliases: ["perplexity"], summary: "perplexity of a text file (mean NLL per token, chunked prefill) and the run report", load: async () => (await import("./eval.js")).command },
  { name: "chat", summary: "interactive chat REPL (/reset, /save FILE, /load FILE, /exit)", load: async () => (await import("./chat.js")).command },
  { name: "serve", summary: "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models)", load: async () => (await import("./serve.js")).command },
  { name: "pack", summary: "pack the trunk (non-expert weights) into one aligned file for streaming", load: async () => (await import("./pack.js")).command },
  { name: "doctor", summary: "check this machine and a checkpoint: toolchain, SIMD, RAM → preset, disk, shards", load: async () => (await import("./doctor.js")).command },
  { name: "plan", summary: "the memory plan of a model at a preset, and --project: published-K3 s/token per preset", load: async () => (await import("./plan.js")).command },
  { name: "bench", summary: "prefill and decode speed on a model", load: async () => (await import("./bench.js")).command },
  { name: "download", summary: "fetch a checkpoint from the hub: pinned revision, free-space check, resume, sha256-verified", load: async () => (await import("./download.js")).command },
  { name: "verify", summary: "hash every checkpoint file and compare with the sha256 the download recorded", load: async () => (await import("./verify.js")).command },
  { name: "compare-logits", summary: "compare two --dump-logits files (max/rel-L2 difference, first argmax change)", load: async () => (await import("./compare-logits.js")).command },
  { name: "cache-sim", summary: "replay a --dump-cache-trace through other expert-cache sizes and policies (no model)", load: async () => (await import("./cache-sim.js")).command },
  { name: "synth", summary: "write a synthetic checkpoint at the published K3 (or Kimi-Linear-48B) widths", load: async () => (await import("./synth.js")).command },
];

export function findCommand(name: string): CommandEntry | undefined {
  return COMMANDS.find((c) => c.name === name || c.aliases?.includes(name));
}
