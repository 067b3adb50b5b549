/** Every error this package throws names the file, field, token or argument that is wrong. */
export class TokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}

/** A rank file, tokenizer_config.json or special-token map that does not parse or validate. */
export class VocabularyError extends TokenizerError {
  constructor(message: string) {
    super(message);
    this.name = "VocabularyError";
  }
}

/**
 * Text contains a special token that the caller did not allow (tiktoken's default for `encode`).
 * The message matches the `tiktoken` npm package / Python tiktoken wording.
 */
export class DisallowedSpecialError extends TokenizerError {
  constructor(readonly token: string) {
    super(
      `Encountered text corresponding to disallowed special token ${JSON.stringify(token)}.\n` +
        `If you want this text to be encoded as a special token, pass it to \`allowedSpecial\`, e.g. \`allowedSpecial: [${JSON.stringify(token)}, ...]\`.\n` +
        `If you want this text to be encoded as normal text, disable the check for this token by passing \`disallowedSpecial: (enc.specialTokens - new Set([${JSON.stringify(token)}]))\`.\n` +
        `To disable this check for all special tokens, pass \`disallowedSpecial: []\`.`,
    );
    this.name = "DisallowedSpecialError";
  }
}

/** decode() got an id that is neither a rank nor a special token. */
export class UnknownTokenError extends TokenizerError {
  constructor(readonly id: number, readonly index: number) {
    super(`decode: token id ${id} at position ${index} is not in this vocabulary`);
    this.name = "UnknownTokenError";
  }
}
