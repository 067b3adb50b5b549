/**
 * General pat_str support: translates a tiktoken (fancy-regex) pattern into a JS RegExp, for
 * patterns other than the three hand-written families. Rewrites:
 * - `\s` / `\S` (outside classes) and `\s` inside classes → explicit Unicode White_Space, because
 *   JS `\s` lacks U+0085 and includes U+FEFF;
 * - `\p{Han}` → `\p{sc=Han}` (Script, not Script_Extensions);
 * - `(?i:...)` → the same group with each ASCII letter as `[xX]` (Node 20 has no inline modifiers);
 * - `[X&&[^Y]]` → `(?:(?![Y])[X])`;
 * - possessive quantifiers (`++ *+ ?+ }+`) → greedy ones (a rare backtracking difference).
 * Unicode properties then come from the running Node's ICU, not the pinned Unicode 16 tables.
 */
import { TokenizerError } from "./errors.js";

const WHITE_SPACE = "\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";

export function translatePattern(pattern: string): RegExp {
  let out = "";
  let i = 0;
  const fail = (what: string) => new TokenizerError(`pattern: ${what} at offset ${i} is not supported by the general RegExp translation`);
  const caseInsensitiveDepth: number[] = [];
  let depth = 0;
  let afterQuantifier = false; // a `+` right after a quantifier makes it possessive
  while (i < pattern.length) {
    const ch = pattern[i];
    const wasQuantifier = afterQuantifier;
    afterQuantifier = false;
    if (ch === "\\") {
      const next = pattern[i + 1];
      if (next === "s") out += `[${WHITE_SPACE}]`;
      else if (next === "S") out += `[^${WHITE_SPACE}]`;
      else if (next === "p" || next === "P") {
        const close = pattern.indexOf("}", i);
        const name = pattern.slice(i + 3, close);
        out += `\\${next}{${name === "Han" ? "sc=Han" : name}}`;
        i = close + 1;
        continue;
      } else out += ch + next;
      i += 2;
      continue;
    }
    if (ch === "[") {
      const { text, end } = translateClass(pattern, i, fail);
      out += text;
      i = end;
      continue;
    }
    if (ch === "(" && pattern.startsWith("(?i:", i)) {
      depth++;
      caseInsensitiveDepth.push(depth);
      out += "(?:";
      i += 4;
      continue;
    }
    if (ch === "(") depth++;
    if (ch === ")") {
      if (caseInsensitiveDepth[caseInsensitiveDepth.length - 1] === depth) caseInsensitiveDepth.pop();
      depth--;
    }
    if (ch === "+" && wasQuantifier) {
      i++; // possessive → greedy
      continue;
    }
    if (ch === "{" && /^\{\d+(,\d*)?\}/.test(pattern.slice(i))) {
      const q = (pattern.slice(i).match(/^\{\d+(,\d*)?\}/) as RegExpMatchArray)[0];
      out += q;
      i += q.length;
      afterQuantifier = true;
      continue;
    }
    if (ch === "+" || ch === "*" || ch === "?") afterQuantifier = ch !== "?" || !/[(]/.test(pattern[i - 1] ?? "");
    if (caseInsensitiveDepth.length > 0 && /[a-zA-Z]/.test(ch)) out += `[${ch.toLowerCase()}${ch.toUpperCase()}]`;
    else out += ch;
    i++;
  }
  try {
    return new RegExp(out, "gu");
  } catch (err) {
    throw new TokenizerError(`pattern: the translated RegExp does not compile (${(err as Error).message})`, "input", { cause: err });
  }
}

/** One character class starting at `[`; returns its JS text and the index after it. */
function translateClass(p: string, start: number, fail: (w: string) => Error): { text: string; end: number } {
  let i = start + 1;
  let body = "";
  if (p[i] === "^") {
    body += "^";
    i++;
  }
  let intersect: string | undefined;
  while (i < p.length && p[i] !== "]") {
    if (p.startsWith("&&", i)) {
      const inner = translateClass(p, i + 2, fail);
      intersect = inner.text;
      i = inner.end;
      continue;
    }
    if (p[i] === "\\") {
      const next = p[i + 1];
      if (next === "s") body += WHITE_SPACE;
      else if (next === "S") throw fail("\\S inside a character class");
      else if (next === "p" || next === "P") {
        const close = p.indexOf("}", i);
        const name = p.slice(i + 3, close);
        body += `\\${next}{${name === "Han" ? "sc=Han" : name}}`;
        i = close + 1;
        continue;
      } else body += "\\" + next;
      i += 2;
      continue;
    }
    if (p[i] === "[") throw fail("a nested class outside `&&`");
    body += p[i++];
  }
  if (p[i] !== "]") throw fail("an unterminated character class");
  const cls = `[${body}]`;
  if (intersect === undefined) return { text: cls, end: i + 1 };
  // [X&&[^Y]] = X minus Y; [X&&[Y]] = X and Y.
  const neg = intersect.startsWith("[^");
  const other = neg ? `[${intersect.slice(2)}` : intersect;
  return { text: neg ? `(?:(?!${other})${cls})` : `(?:(?=${other})${cls})`, end: i + 1 };
}
