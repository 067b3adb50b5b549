// The adversarial inputs of docs/formats.md §2.3 (long pieces live in long.test.ts).
const ws = ["\u0085", "\ufeff", "\u3000", "\u00a0", "\u1680", "\u2000", "\u2005", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u001c", "\u001d", "\u001e", "\u001f"];
const out: string[] = [];

// 1. whitespace in every position
for (const w of ws) {
  out.push(w, `${w}a`, `a${w}`, `${w}!`, `${w}\n`, `a${w}b`, `${w}${w}a`, ` ${w}a`, `${w} a`, `x${w}${w}`, `${w}'s`, `${w}1`, `${w}中`);
}
out.push("\u3000\u3000a", "\u3000\u3000\u3000中文", " \x85a\ns", "a \ufeff", "\ufeffhello", "hello\ufeff");
// 2. space runs
out.push("a", " a", "a ", "  a", "   a", "\r\n", "\r\r\n", "\n\r", "  \r\n  x", " \n\n\n", "x\n  \n", "x  ", "x \t ", "\t\ta", " \t\n \t");
for (let n = 1; n <= 64; n += n < 8 ? 1 : 7) {
  out.push(" ".repeat(n), " ".repeat(n) + "a", "\t".repeat(n) + "b", "x" + " ".repeat(n), " ".repeat(n) + "\n", "\n".repeat(n) + " y");
}
// 3. digits
for (let n = 1; n <= 10; n++) out.push("1234567890".slice(0, n), "a" + "9".repeat(n), "9".repeat(n) + "b");
out.push("١٢٣", "٤٥٦٧", "４５６", "²³", "x²", "3.14159", "1,000,000", "v1.2.3", "0x1F", "½⅓", "Ⅻ", "〇一二");
// 4. letters and case
out.push("camelCase", "PascalCase", "HTTPRequest", "aB1cD2", "getHTTPResponseCode", "XMLHttpRequest", "ABC", "abcDEF", "ABCdef");
out.push("'s", "'S", "'ll", "'LL", "'Re", "'rE", "dog's", "dog'S", "dog'ſ", "x'K", "'K", "I'm", "we'VE", "you'd", "they're'", "' s", "''s", "'", "''", "a'b'c");
out.push("İı", "İstanbul", "ǅemal", "ǅ", "ʰello", "aʰb", "Hʰ", "ᵃᵇ");
out.push("ภาษาไทยไม่มีช่องว่าง", "हिन्दी भाषा", "한국어 텍스트", "東京タワーは高い", "שָׁלוֹם", "\u200fשלום\u200e abc", "مرحبـــا بالعالم", "\u202aabc\u202c", "\u202e123");
// 5. Han boundaries
out.push("中文English混合", "北京市 Pascal", "日本語123English", "emoji😀letterRun日本語", "。、「」", "々〆〇", "漢々字", "中。文", "ab中cd", "A中B");
out.push("\u{20000}\u{20001}", "\u{30000}x", "\u{31350}", "\u{2ebf0}", "\uf900\uf901", "⺀⼀", "中\u0301", "x\u{2ebf0}y");
// 6. combining marks
out.push("e\u0301", "Z\u0351\u0352\u0353a\u0361\u0362lgo", "\u0301", "\u0301abc", " \u0301", " \u0301a", "a \u0301", "!\u0301", "\u0301\u0301\u0301", "1\u0301", "\u0301'll");
// 7. emoji
out.push("👩‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "1️⃣", "👍🏽", "☺︎", "❤️", "🏴\u{e0067}\u{e0062}\u{e0065}\u{e006e}\u{e0067}\u{e007f}", "a😀b", " 😀", "😀😀😀");
// 8. broken UTF-16
out.push("\ud83d", "\ude00", "ab\ud83dcd", "\ud83dabc", "abc\ud83d", "\ude00\ud83d", "x\udbff\udfffy", "\ud800\ud800");
// 9. every code point U+0000..U+00FF, singly and as one string
let all = "";
for (let c = 0; c < 256; c++) {
  out.push(String.fromCharCode(c));
  all += String.fromCharCode(c);
}
out.push(all, "\u00ad", "a\u00adb", "\u0000\u0000", "\u007f");
// Unicode-version rows: letters new in Unicode 16 (classified as \p{L}) and 17 (not yet letters).
out.push("\u{11380}\u{11381}", "a\u{1e5d0}", "\u{10d50}x", "\u{10940}\u{10941}", "\u{16ea0}a", "\u{18d80}");
// 11. special-token lookalikes (as ordinary text)
out.push("<|im_end|>", "<|im_end|", "<|im_end|>>", "<<|im_end|>", "<|im_<|im_end|>end|>", "<|IM_END|>", "<｜im_end｜>", "a[BOS]", "[EOS]x", "<|reserved_token_163700|>", "<|endoftext|>");
// code-ish text
out.push("def f(x):\n    return x + 1\n", "if (a && b) { c(); }\r\n", "// comment\n/* block */", "https://example.com/a/b?c=d", "a//b", "!!\n/\n", "foo/\n", " ///\r\n");

export const ADVERSARIAL: readonly string[] = out;
