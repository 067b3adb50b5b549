/** `k3 run`: generate from a prompt (or check against a reference) and print the plan and the run report. */
import { resolve } from "node:path";
import type { Engine, EngineOptions } from "../engine.js";
import type { loadReference } from "../teacher-forcing.js";
import { EXIT_DROPPED_EXPERT, EXIT_OK, EXIT_RUNTIME, UsageError } from "../errors.js";
import type { Command, Args } from "./command.js";
import { EMBEDDED_DEFAULT_PROMPT } from "../embedded.js";
import { EMBEDDED_NOTE, EMBEDDED_THREADS, modelDir } from "./model-dir.js";
import { engineOptions, parseIds, prefillPrinter, readUtf8, samplingOptions, signalsRun, writeJson } from "./shared.js";
import { MODEL_FLAGS, SAMPLING_FLAGS } from "./table.js";


export const command: Command = {
  usage: "usage: k3 run [--prompt TEXT | --prompt-file PATH | --ids 1,2,3] [options]",
  about: `Generates a continuation and prints the memory plan (before loading) and the run report (after).
A text prompt is wrapped as one user turn in the model's chat format (K3 XTML or Kimi-Linear im_*);
--raw encodes it verbatim after [BOS]. --ids are used verbatim.`,
  sections: [
    { title: `prompt (exactly one; the embedded model has a default, "${EMBEDDED_DEFAULT_PROMPT}", completed raw):`, options: ["prompt", "prompt-file", "ids", "raw", "chat", "no-think", "effort", "system", ["json", { help: 'write the run report as JSON ("-" = stdout)' }], "quiet", "floor"] },
    { title: "checking against a reference (instead of generating):", options: ["tf-check", "tf-min"] },
    { title: "diagnostics:", options: ["dump-logits", "dump-cache-trace"] },
    { title: "model and memory:", options: MODEL_FLAGS },
    { title: "sampling:", options: SAMPLING_FLAGS },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const values = args.values;
  const { Engine } = await import("../engine.js");
  const { loadReference: readReference } = await import("../teacher-forcing.js");
  const err = (l: string) => values.quiet || process.stderr.write(l + "\n");
  const given = ["prompt", "prompt-file", "ids"].filter((k) => values[k] !== undefined);
  if (given.length > 1) throw new UsageError(`k3 run: give exactly one of --prompt, --prompt-file, --ids (got ${given.map((g) => "--" + g).join(", ")})`);
  const { dir, embedded } = modelDir(values);
  const reference = values["tf-check"] !== undefined ? readReference(String(values["tf-check"])) : null;
  if (given.length === 0 && !embedded && !reference?.prompt) throw new UsageError("k3 run: give exactly one of --prompt, --prompt-file, --ids");
  const sampling = samplingOptions(values);
  if (embedded) err(EMBEDDED_NOTE);
  const eo = engineOptions(args, err);
  if (values.floor) eo.floor = true;
  if (embedded && eo.threads === undefined) eo.threads = EMBEDDED_THREADS;
  const engine = await Engine.load(dir, eo);
  try {
    return await runLoaded(engine, values, { dir, embedded, given, reference, sampling, eo, err });
  } finally {
    engine.close(); // the stores' reader threads stop here, not in Node's teardown
  }
}

interface RunContext {
  dir: string;
  embedded: boolean;
  given: string[];
  reference: ReturnType<typeof loadReference> | null;
  sampling: ReturnType<typeof samplingOptions>;
  eo: EngineOptions;
  err: (l: string) => unknown;
}

async function runLoaded(engine: Engine, values: Args["values"], o: RunContext): Promise<number> {
  const { checkPromptLength } = await import("../engine.js");
  const { formatReport } = await import("../report.js");
  const { ExpertTraceRecorder } = await import("../cache-trace.js");
  const { LogitsDumper } = await import("../logits-dump.js");
  const { dir, embedded, given, reference, sampling, eo, err } = o;
  let prompt: number[];
  if (values.ids !== undefined) prompt = parseIds(String(values.ids), engine.config.vocabSize);
  else {
    // Without a prompt flag only the embedded model (or a --tf-check reference's prompt) gets here.
    const text = values["prompt-file"] !== undefined ? readUtf8("--prompt-file", String(values["prompt-file"])) : ((values.prompt as string | undefined) ?? EMBEDDED_DEFAULT_PROMPT);
    if (values.raw && values.chat) throw new UsageError("k3 run: --raw and --chat exclude each other");
    // The embedded model learnt raw text only: completing the prompt is what it can do.
    if (values.raw || (embedded && !values.chat)) {
      prompt = engine.encodeText(text);
      if (!reference) process.stdout.write(text); // a completion reads on from its prompt
    } else {
      const messages = [...(values.system ? [{ role: "system", content: String(values.system) }] : []), { role: "user", content: text }];
      prompt = engine.encodeChat(messages, { thinking: !values["no-think"], effort: values.effort ?? (embedded ? null : undefined) });
    }
  }
  if (reference && given.length === 0 && reference.prompt) prompt = reference.prompt;
  // The same limit Engine.generate applies (the server's requests go through it); checked here too for --tf-check.
  checkPromptLength(prompt.length);
  if (reference) return tfCheck(engine, prompt, reference.continuation, { chunkSize: eo.chunkSize, json: values.json, min: values["tf-min"], err });
  if (eo.chunkSize === undefined) {
    const { chunkHint } = await import("../presets.js");
    const hint = chunkHint(engine.plan, engine.census, engine.config.moe.numExperts, prompt.length, engine.chunkSize);
    if (hint) err(hint);
  }
  err(`prompt: ${prompt.length} tokens; generating up to ${sampling.maxTokens} (${sampling.temperature === 0 ? "greedy" : `temperature ${sampling.temperature}, top-k ${sampling.topK}, top-p ${sampling.topP}, seed ${sampling.seed}`})`);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once("SIGINT", onSigint);
  const trace = values["dump-cache-trace"] !== undefined ? (engine.model.expertTrace = new ExpertTraceRecorder()) : null;
  const dump = values["dump-logits"] !== undefined ? new LogitsDumper(resolve(String(values["dump-logits"])), { model: dir, fingerprint: engine.fingerprint, promptIds: prompt }) : null;
  const gen = engine.generate(prompt, {
    ...sampling,
    signal: ac.signal,
    onLogits: dump ? (l, step) => dump.add(l, step) : undefined,
    onPrefillProgress: values.quiet ? undefined : prefillPrinter(process.stderr),
  });
  let r = await gen.next();
  while (!r.done) {
    process.stdout.write(r.value.text);
    await signalsRun();
    r = await gen.next();
  }
  process.off("SIGINT", onSigint);
  process.stdout.write("\n");
  // With --floor: every ceiling measured again now, the floor judged against the higher of the two.
  const report = engine.floorAfterRun(r.value.report);
  err(formatReport(report));
  if (dump) {
    if (r.value.stopReason === "abort") dump.abort();
    else err(`logits: ${dump.finish([...r.value.ids, ...(r.value.stopId !== null ? [r.value.stopId] : [])])}`);
  }
  if (trace) {
    const traceDir = resolve(String(values["dump-cache-trace"]));
    trace.write(traceDir, {
      model: dir,
      fingerprint: engine.fingerprint,
      expert_bytes: engine.census.expertBytes,
      num_experts: engine.config.moe.numExperts,
      top_k: engine.config.moe.topK,
      slots_per_layer: engine.plan.cacheSlotsPerLayer,
      cache_policy: engine.model.experts?.cachePolicy,
      resident_hit_rate: report.resident_hit_rate,
      tokens: report.prompt_tokens + report.generated_tokens,
    });
    err(`expert trace: ${trace.requests.length} requests -> ${traceDir} (replay: k3 cache-sim --trace ${traceDir})`);
  }
  writeJson(values.json, report);
  if (report.expert_drops > 0) {
    err(`error: ${report.expert_drops} routed expert(s) were dropped; the output is not the model's`);
    return EXIT_DROPPED_EXPERT;
  }
  return r.value.stopReason === "abort" ? EXIT_RUNTIME : EXIT_OK;
}

/** `k3 run --tf-check`: teacher-forced agreement with a reference; exit 0 when it reaches `min`. */
async function tfCheck(engine: Engine, prompt: number[], continuation: number[], o: { chunkSize?: number; json?: string; min: number; err: (l: string) => unknown }): Promise<number> {
  const { formatTeacherForcing, teacherForced } = await import("../teacher-forcing.js");
  o.err(`teacher forcing: ${prompt.length} prompt tokens + ${continuation.length} reference tokens, one prefill pass`);
  const r = await teacherForced(engine.model, prompt, continuation, { chunkSize: o.chunkSize });
  process.stdout.write(formatTeacherForcing(r) + "\n");
  writeJson(o.json, { prompt_ids: prompt, reference_ids: continuation, ...r });
  return r.agreement >= o.min ? EXIT_OK : EXIT_RUNTIME;
}
