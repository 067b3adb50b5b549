/** `k3 synth`: a random-weight checkpoint at the published K3 (or Kimi-Linear-48B) widths, in the released layout. */
import { EXIT_OK, UsageError } from "../errors.js";
import { GB } from "../presets.js";
import type { Args, Command } from "./command.js";
import { integer } from "./table.js";

const count = integer(0, Number.MAX_SAFE_INTEGER, "a non-negative integer");

export const command: Command = {
  usage: `usage: k3 synth --out DIR [--layers N] [--experts E] [--vocab V] [--dense-layers D] [--seed S]
                [--kimi-linear] [--tokenizer FILE] [--force]`,
  about: `Writes a checkpoint with random weights at the published widths: Kimi K3 (hidden 7168, 96 KDA heads
x 128, MLA q_lora 1536 / kv_lora 512, dense layer 0 of 33,792, 896 MXFP4 experts top-16, vocab
163,840) or with --kimi-linear Kimi-Linear-48B-A3B (hidden 2304, 32 heads, 256 bf16 experts top-8).
Only the layer count and, when given, the expert count, vocabulary and number of leading dense-MLP
layers (first_k_dense_replace, published 1) differ from the published config. Tensor names, dtypes, shapes, expert order, shards and index are laid out as released.
Same options and seed => byte-identical files. Progress: a bar on a TTY, a line every 5 s otherwise.`,
  sections: [
    {
      options: [
        ["out", { help: "output directory (created; refused if it holds a checkpoint, unless --force)" }],
        ["layers", { help: "num_hidden_layers (default 4; K3 1..93, 48B 1..27). Layer 0 is KDA + the dense\nMLP, the rest MoE; the MLA layers are the released ones (ONE-based 4, 8, ...)\nthat are <= N, or the last layer when N < 4 (N=4: layer 3 MLA; N=2: layer 1)", parse: count }],
        "experts",
        "vocab",
        "dense-layers",
        ["seed", { help: "seed of every value", default: undefined, shows: "0", parse: count }],
        "kimi-linear",
        "tokenizer",
        "force",
      ],
    },
  ],
  epilogue: `Sizes (K3, full vocab): embed + lm_head 4.70 GB; layer 0 2.34 GB; an MoE layer 1.27 GB (KDA) or
0.84 GB (MLA) + 17.55 MB per expert. E.g. --layers 4 --experts 64: 13.75 GB; --layers 2 --experts 896: 23.61 GB; --kimi-linear
--layers 4 --experts 32: 3.33 GB.`,
  positionals: true,
  run,
};

async function run({ values, positionals }: Args): Promise<number> {
  if (positionals.length) throw new UsageError(`k3 synth: unexpected argument ${JSON.stringify(positionals[0])} (see k3 synth --help)`);
  if (typeof values.out !== "string" || values.out === "") throw new UsageError("k3 synth: --out DIR is required (see k3 synth --help)");
  const { synthesize, synthProgressPrinter } = await import("../synth.js");
  const r = await synthesize({
    out: values.out,
    family: values["kimi-linear"] ? "kimi-linear" : "k3",
    layers: values.layers,
    experts: values.experts,
    vocab: values.vocab,
    denseLayers: values["dense-layers"],
    seed: values.seed,
    tokenizer: values.tokenizer,
    force: !!values.force,
    onProgress: synthProgressPrinter(process.stderr),
  });
  process.stderr.write(
    `wrote ${r.dir}: ${r.tensors} tensors in ${r.shards.length} shards, ${(r.fileBytes / GB).toFixed(3)} GB in ${r.seconds.toFixed(1)} s ` +
      `(${(r.fileBytes / 1e9 / r.seconds).toFixed(2)} GB/s, ${r.io.mode}${r.io.note ? `: ${r.io.note}` : ""}); layers ${r.layerMap}\n`,
  );
  return EXIT_OK;
}
