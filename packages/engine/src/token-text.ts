/** How a token shows in OpenAI `logprobs` fields. */

const strictUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** What a token's bytes show as in `token` fields: the text, or `bytes:\\xNN...` when they are not UTF-8 on their own. */
export function tokenString(bytes: Uint8Array): string {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return "bytes:" + Array.from(bytes, (b) => "\\x" + b.toString(16).padStart(2, "0")).join("");
  }
}
