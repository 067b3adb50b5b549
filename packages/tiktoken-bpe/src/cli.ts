#!/usr/bin/env node
/**
 * The `k3-bpe` command. `k3-bpe train --input FILE... --vocab-size N --out DIR` trains byte-level
 * BPE ranks (trainBpe) and writes DIR/tiktoken.model, plus DIR/tokenizer_config.json when the
 * specials are Kimi's, so `loadKimiTokenizer(DIR)` and tiktoken load the result.
 * `k3-bpe encode --dir DIR --input FILE --out FILE.u32` writes a text's ids as little-endian uint32.
 * Exit codes: 0 ok, 1 failure, 2 usage error.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CL100K_PATTERN, KIMI_PATTERN, O200K_PATTERN } from "./patterns.js";
import { loadKimiTokenizer } from "./presets.js";
import { kimiTokenizerConfig, rankFileText, trainBpe, type TrainBpeOptions } from "./train.js";

const USAGE = `usage: k3-bpe train --input FILE [--input FILE ...] --vocab-size N --out DIR
                     [--specials k3|k2|none] [--pattern kimi|o200k|cl100k|PAT_STR]
       k3-bpe encode --dir DIR --input FILE --out FILE.u32
  encode         the file's text (specials not interpreted) with DIR's tiktoken.model +
                 tokenizer_config.json, written as little-endian uint32 ids (for training scripts)
  --vocab-size   ranks to produce, the 256 single bytes included (specials come after them)
  --specials     k3 (default): K3's 256 special ids and tokenizer_config.json; none: ranks only
  --pattern      pre-tokenizer pattern (default kimi)`;

function usage(msg: string): never {
  process.stderr.write(`k3-bpe: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function encodeFile(argv: string[]): void {
  const flags = new Map<string, string>();
  for (let i = 1; i < argv.length; i += 2) {
    if (!["--dir", "--input", "--out"].includes(argv[i])) usage(`unknown flag ${argv[i]}`);
    if (argv[i + 1] === undefined) usage(`${argv[i]} needs a value`);
    flags.set(argv[i], argv[i + 1]);
  }
  for (const f of ["--dir", "--input", "--out"]) if (!flags.has(f)) usage(`${f} is required`);
  const tok = loadKimiTokenizer(flags.get("--dir")!);
  const ids = tok.encode(readFileSync(flags.get("--input")!, "utf8"), { disallowedSpecial: [] });
  const le = Buffer.alloc(ids.length * 4);
  ids.forEach((id, i) => le.writeUInt32LE(id, i * 4));
  writeFileSync(flags.get("--out")!, le);
  process.stdout.write(`k3-bpe: ${ids.length} ids -> ${flags.get("--out")}\n`);
}

function main(argv: string[]): void {
  if (argv[0] === "encode") return encodeFile(argv);
  if (argv[0] !== "train") usage(argv[0] === undefined ? "a command is required" : `unknown command ${argv[0]}`);
  const inputs: string[] = [];
  let vocabSize = NaN;
  let out = "";
  let specials: TrainBpeOptions["specials"] = "k3";
  let pattern = KIMI_PATTERN;
  for (let i = 1; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[++i];
    if (value === undefined) usage(`${flag} needs a value`);
    if (flag === "--input") inputs.push(value);
    else if (flag === "--vocab-size") vocabSize = Number(value);
    else if (flag === "--out") out = value;
    else if (flag === "--specials") {
      if (value !== "k3" && value !== "k2" && value !== "none") usage(`--specials must be k3, k2 or none, got ${value}`);
      specials = value === "none" ? undefined : value;
    } else if (flag === "--pattern")
      pattern = value === "kimi" ? KIMI_PATTERN : value === "o200k" ? O200K_PATTERN : value === "cl100k" ? CL100K_PATTERN : value;
    else usage(`unknown flag ${flag}`);
  }
  if (inputs.length === 0) usage("--input is required");
  if (!Number.isInteger(vocabSize) || vocabSize < 256) usage("--vocab-size must be an integer >= 256");
  if (!out) usage("--out is required");

  const texts = inputs.map((p) => readFileSync(p, "utf8"));
  const t0 = performance.now();
  const trained = trainBpe(texts, { vocabSize, pattern, specials });
  const seconds = (performance.now() - t0) / 1000;
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "tiktoken.model"), rankFileText(trained.tokens));
  if (specials === "k3" || specials === "k2")
    writeFileSync(join(out, "tokenizer_config.json"), JSON.stringify(kimiTokenizerConfig(trained), null, 2) + "\n");
  const bytes = texts.reduce((s, t) => s + Buffer.byteLength(t), 0);
  process.stdout.write(
    `k3-bpe: ${trained.tokens.length} ranks (${trained.merges} merges) + ${trained.specialTokens.size} specials ` +
      `from ${(bytes / 1e6).toFixed(2)} MB in ${seconds.toFixed(2)} s -> ${out}\n`,
  );
}

try {
  main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`k3-bpe: ${(err as Error).message}\n`);
  process.exit(1);
}
