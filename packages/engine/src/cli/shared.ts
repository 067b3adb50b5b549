/** Helpers several commands share: engine and sampling options from the parsed flags, --json output, reading a prompt. */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { progressPrinter, redrawLine, type ProgressStream } from "@k3/native";
import type { EngineOptions, PrefillProgress } from "../engine.js";
import { throttledProgress } from "../progress-throttle.js";
import { UsageError } from "../errors.js";
import { ENGINE_RULES } from "../options.js";
import { GB } from "../presets.js";
import type { Args } from "./command.js";
import { numberBy } from "./table.js";

/** --shard-dirs D1,D2 as absolute paths (undefined when absent). */
export function shardDirsOf(values: Args["values"]): string[] | undefined {
  return values["shard-dirs"] === undefined ? undefined : String(values["shard-dirs"]).split(",").filter(Boolean).map((d) => resolve(d));
}

/** EngineOptions from the model and memory flags (already checked by the table's parsers). */
export function engineOptions(args: Args, log: (l: string) => void): EngineOptions {
  const v = args.values;
  const opts: EngineOptions = { log };
  if (v.preset !== undefined) opts.preset = v.preset;
  // Budget flags apply left to right after the preset (a later flag overrides).
  const budgets: EngineOptions["budgets"] = {};
  for (const flag of args.order) {
    if (flag === "trunk-gb") budgets.trunkBytes = v["trunk-gb"] * GB;
    if (flag === "cache-gb") budgets.cacheBytes = v["cache-gb"] * GB;
    if (flag === "kv-gb") budgets.kvBytes = v["kv-gb"] * GB;
  }
  if (Object.keys(budgets).length) opts.budgets = budgets;
  const threads = v.threads ?? (process.env.K3_THREADS !== undefined ? numberBy(ENGINE_RULES.threads)(process.env.K3_THREADS, "--threads") : undefined);
  if (threads !== undefined) opts.threads = threads;
  if (v.simd !== undefined) opts.simd = v.simd;
  if (v.chunk !== undefined) opts.chunkSize = v.chunk;
  if (v["kda-core"] !== undefined) opts.kdaCore = v["kda-core"];
  if (v.trunk !== undefined) opts.trunkDir = resolve(String(v.trunk));
  if (v["piece-mb"] !== undefined) opts.pieceMb = v["piece-mb"];
  if (v["no-prefetch"]) opts.prefetch = false;
  if (v["load-method"] !== undefined) opts.loadMethod = v["load-method"];
  if (v.warm !== undefined) opts.warm = v.warm;
  if (v["cache-policy"] !== undefined) opts.cachePolicy = v["cache-policy"];
  if (v["expert-profile"] !== undefined) opts.expertProfile = resolve(String(v["expert-profile"]));
  if (v["load-ceiling"]) opts.loadCeiling = true;
  if (!v.quiet) opts.onLoadProgress = progressPrinter(process.stderr);
  opts.shardDirs = shardDirsOf(v);
  if (v.layers !== undefined) opts.layers = v.layers;
  if (v.spec !== undefined) opts.spec = v.spec;
  if (v["on-expert-error"] !== undefined) opts.onExpertError = v["on-expert-error"];
  return opts;
}

/** The sampling flags as GenerateOptions (their ranges were checked by the table's parsers: options.ts SAMPLING_RULES). */
export function samplingOptions(values: Args["values"]) {
  return {
    maxTokens: values["max-tokens"] as number,
    temperature: values.temperature as number,
    topK: values["top-k"] as number,
    topP: values["top-p"] as number,
    seed: values.seed as number,
    stop: (values.stop as string[] | undefined) ?? [],
    stopIds: (values["stop-id"] as number[] | undefined) ?? [],
    presencePenalty: values["presence-penalty"] as number,
    frequencyPenalty: values["frequency-penalty"] as number,
  };
}

/** --json FILE: the value as indented JSON into FILE, or to stdout for "-"; nothing when absent. */
export function writeJson(target: string | undefined, value: unknown): void {
  if (target === undefined) return;
  const text = JSON.stringify(value, null, 2) + "\n";
  if (target === "-") process.stdout.write(text);
  else writeFileSync(target, text);
}

/** A UTF-8 text file named by `flag`; a missing or non-UTF-8 file is a usage error naming the flag. */
export function readUtf8(flag: string, file: string): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(file));
  } catch (e) {
    throw new UsageError(`${flag} ${file}: ${(e as NodeJS.ErrnoException).code ?? "not valid UTF-8"}`);
  }
}

/** --ids 1,2,3 against a vocabulary of `vocabSize`. */
export function parseIds(list: string, vocabSize: number): number[] {
  return list.split(",").map((s) => {
    const t = s.trim();
    const x = Number(t);
    if (t === "" || !Number.isInteger(x) || x < 0 || x >= vocabSize) throw new UsageError(`--ids: ${JSON.stringify(t)} is not a token id in 0..${vocabSize - 1}`);
    return x;
  });
}

/**
 * Lets the event loop run signal handlers (Ctrl-C) between two tokens: a forward pass on this
 * thread resolves without ever yielding to it, so a SIGINT would otherwise wait for the whole reply.
 */
export function signalsRun(): Promise<void> {
  return new Promise((res) => setImmediate(res));
}

/**
 * Draws a prefill's progress as a bar on a TTY, nothing elsewhere (the run report has the figures): from
 * `afterSeconds` (1) in, at most every `intervalSeconds` (0.25), ending the line when the prefill ends.
 * A prefill over within the first second draws nothing. Times are the events' own, so it is testable.
 */
export function prefillPrinter(stream: ProgressStream, opts: { tty?: boolean; afterSeconds?: number; intervalSeconds?: number } = {}): (p: PrefillProgress) => void {
  if (!(opts.tty ?? !!stream.isTTY)) return () => {};
  return throttledProgress({ afterSeconds: opts.afterSeconds ?? 1, everySeconds: opts.intervalSeconds ?? 0.25 }, (p) => {
    const done = p.fraction >= 1;
    const width = 30;
    const bar = "#".repeat(Math.round(Math.min(1, p.fraction) * width)).padEnd(width, ".");
    const rate = p.seconds > 0 ? (p.tokens * p.fraction) / p.seconds : 0;
    const eta = done ? "0s" : p.etaSeconds === null ? "--" : `${Math.round(p.etaSeconds)}s`;
    redrawLine(stream, `prefill [${bar}] ${(p.fraction * 100).toFixed(1)}% ${p.tokensDone}/${p.tokens} tokens, layer ${p.layersDone}/${p.layers}, ${rate.toFixed(rate < 10 ? 2 : 1)} tok/s, ETA ${eta}`, done);
  });
}
