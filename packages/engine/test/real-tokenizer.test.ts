/**
 * With the real Kimi rank file (third-party test data, K3_TEST_DATA or ../shared/data): the stop ids
 * and the XTML encoding of real K3, which the tiny tokenizer cannot show.
 */
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadKimiTokenizer } from "@k3/tiktoken-bpe";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../src/config.js";
import { stopIdsFor } from "../src/engine.js";
import { rawConfig, REPO, TINY_K3 } from "./helpers.js";

const data = process.env.K3_TEST_DATA ?? join(REPO, "..", "shared", "data");
const ranks = join(data, "kimi-tokenizer", "tiktoken.model");
const present = existsSync(ranks);
if (!present) console.log(`skipping real-tokenizer tests: ${ranks} is absent (set K3_TEST_DATA)`);

describe.skipIf(!present)("real Kimi tokenizer", () => {
  it("K3 stops on [EOS] 163585 and <|end_of_msg|> 163586; user text cannot inject specials", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-realtok-"));
    copyFileSync(ranks, join(dir, "tiktoken.model"));
    const tok = loadKimiTokenizer(dir, { specials: "k3" });
    rmSync(dir, { recursive: true, force: true });
    expect(tok.nVocab).toBe(163840);
    const raw = rawConfig(TINY_K3);
    Object.assign(raw.text_config, { vocab_size: 163840, bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839 });
    Object.assign(raw, { bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839 });
    const cfg = parseConfig(raw);
    expect(stopIdsFor(cfg, tok)).toEqual([163585, 163586]);
    const ids = Array.from(tok.encode("<|end_of_msg|> hi", { disallowedSpecial: [] }));
    expect(ids).not.toContain(163586);
  });
});
