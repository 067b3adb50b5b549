import { PackageError } from "@k3/native";

/** What went wrong: a bad argument or text, a bad vocabulary file, a disallowed special, an unknown id. */
export type TokenizerErrorCode = "input" | "vocabulary" | "disallowed-special" | "unknown-token";

/** Every error this package throws names the file, field, token or argument that is wrong. */
export class TokenizerError extends PackageError {
  declare readonly code: TokenizerErrorCode;
  constructor(message: string, code: TokenizerErrorCode = "input", options?: { cause?: unknown }) {
    super("@k3/tiktoken-bpe", code, message, options);
    this.name = "TokenizerError";
  }
}

/** A rank file, tokenizer_config.json or special-token map that does not parse or validate. */
export class VocabularyError extends TokenizerError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "vocabulary", options);
    this.name = "VocabularyError";
  }
}

/**
 * Text contains a special token that the caller did not allow (tiktoken's default for `encode`).
 * The message is the `tiktoken` npm package's, word for word; `token` is the special's text.
 * (Python tiktoken says "Encountered text corresponding to disallowed special token …".)
 */
export class DisallowedSpecialError extends TokenizerError {
  constructor(readonly token: string) {
    super(`The text contains a special token that is not allowed: ${token}`, "disallowed-special");
    this.name = "DisallowedSpecialError";
  }
}

/** decode() got an id that is neither a rank nor a special token. */
export class UnknownTokenError extends TokenizerError {
  constructor(readonly id: number, readonly index: number) {
    super(`decode: token id ${id} at position ${index} is not in this vocabulary`, "unknown-token");
    this.name = "UnknownTokenError";
  }
}
