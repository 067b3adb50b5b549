/** `k3 eval` (alias `k3 perplexity`): the perplexity of a text, one chunked prefill keeping every position's logits. */
import { EXIT_DROPPED_EXPERT, EXIT_OK, UsageError } from "../errors.js";
import { MAX_PROMPT_TOKENS } from "../options.js";
import type { Args, Command } from "./command.js";
import { EMBEDDED_NOTE, EMBEDDED_THREADS, modelDir } from "./model-dir.js";
import { engineOptions, parseIds, readUtf8, writeJson } from "./shared.js";
import { integer, MODEL_FLAGS } from "./table.js";

export const command: Command = {
  usage: "usage: k3 eval --text FILE [--max-tokens N] [--json FILE] [options]",
  about: `Perplexity of a text: [BOS] + the text (specials not interpreted), one chunked prefill keeping
every position's logits; each position scores the next token (log-softmax in float64). Prints the
number of tokens scored, the mean negative log-likelihood in nats, exp(mean) = perplexity, and the
run report (the sequence counts as prompt tokens).`,
  sections: [
    {
      options: [
        "text",
        ["ids", { help: "ids instead of a text (used verbatim)" }],
        ["max-tokens", { help: `score only the first N tokens after [BOS] (at most ${MAX_PROMPT_TOKENS - 1} in one pass)`, default: undefined, shows: "all", parse: integer(1, MAX_PROMPT_TOKENS - 1) }],
        ["json", { help: 'write {tokens, scored, mean_nll, perplexity, report} ("-" = stdout)' }],
        "quiet",
      ],
    },
    { title: "model and memory:", options: MODEL_FLAGS },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const values = args.values;
  const err = (l: string) => values.quiet || process.stderr.write(l + "\n");
  if ((values.text === undefined) === (values.ids === undefined)) throw new UsageError("k3 eval: give exactly one of --text FILE, --ids 1,2,3");
  const maxTokens: number = values["max-tokens"] ?? MAX_PROMPT_TOKENS - 1;
  const text = values.text !== undefined ? readUtf8("--text", String(values.text)) : "";
  const { Engine, checkPromptLength } = await import("../engine.js");
  const { formatReport } = await import("../report.js");
  const { formatNll } = await import("../perplexity.js");
  const { dir, embedded } = modelDir(values);
  if (embedded) err(EMBEDDED_NOTE);
  const eo = engineOptions(args, err);
  if (embedded && eo.threads === undefined) eo.threads = EMBEDDED_THREADS;
  const engine = await Engine.load(dir, eo);
  try {
    let ids = values.ids !== undefined ? parseIds(String(values.ids), engine.config.vocabSize) : engine.encodeText(text);
    if (ids.length > maxTokens + 1) {
      if (values["max-tokens"] === undefined) throw new UsageError(`k3 eval: the text is ${ids.length - 1} tokens; at most ${MAX_PROMPT_TOKENS - 1} in one pass (pass --max-tokens N to score the first N)`);
      ids = ids.slice(0, maxTokens + 1);
    }
    checkPromptLength(ids.length);
    const r = await engine.evaluate(ids);
    err(formatReport(r.report));
    process.stdout.write(formatNll(r, r.report.wall_seconds) + "\n");
    writeJson(values.json, { model: dir, tokens: r.tokens, scored: r.nll.length, mean_nll: r.meanNll, perplexity: r.perplexity, report: r.report });
    return r.report.expert_drops > 0 ? EXIT_DROPPED_EXPERT : EXIT_OK;
  } finally {
    engine.close();
  }
}
