// Bench corpora: en and zh from ../shared/data/corpus, code built from TypeScript/JavaScript
// sources in node_modules (deterministic file order, ~1 MB), mixed = paragraphs interleaved.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, "../../..");
export const dataDir = process.env.K3_TEST_DATA ?? resolve(repoRoot, "../shared/data");

function codeCorpus(bytes: number): string {
  const roots = ["typescript/lib", "vitest/dist", "tsup/dist", "gpt-tokenizer/src"].map((p) => join(here, "../node_modules", p));
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else if (/\.(ts|js|mjs)$/.test(name) && st.size < 200_000 && !name.endsWith(".min.js")) files.push(p);
    }
  };
  for (const r of roots) if (existsSync(r)) walk(r);
  let out = "";
  for (const f of files) {
    if (Buffer.byteLength(out) >= bytes) break;
    out += readFileSync(f, "utf8") + "\n";
  }
  return out;
}

function interleave(texts: string[]): string {
  const parts = texts.map((t) => t.split(/\n\n/));
  const out: string[] = [];
  for (let i = 0; parts.some((p) => i < p.length); i++) for (const p of parts) if (i < p.length) out.push(p[i]);
  return out.join("\n\n");
}

export function loadCorpora(): Array<{ name: string; text: string }> {
  const en = readFileSync(join(dataDir, "corpus/en.txt"), "utf8");
  const zh = readFileSync(join(dataDir, "corpus/zh.txt"), "utf8");
  const code = codeCorpus(1_050_000);
  return [
    { name: "en", text: en },
    { name: "zh", text: zh },
    { name: "code", text: code },
    { name: "mixed", text: interleave([en, zh, code]) },
  ];
}
