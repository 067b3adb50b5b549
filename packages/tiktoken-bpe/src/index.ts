/**
 * @k3/tiktoken-bpe: tiktoken-exact BPE without WASM. cl100k_base, o200k_base, Kimi (K2/K3/
 * Kimi-Linear) and any rank file + pat_str + specials; a native core with a TypeScript fallback;
 * K3 (XTML) and Kimi-Linear chat encoding.
 */
export { Tokenizer, type TokenizerOptions, type EncodeOptions, type SpecialSet, type StreamDecoder } from "./tokenizer.js";
export { getEncoding, loadKimiTokenizer, KIMI_RANKS_SHA256, KIMI_K2_SPECIALS, KIMI_K3_SPECIALS, type EncodingName, type GetEncodingOptions, type KimiLoadOptions } from "./presets.js";
export { CL100K_PATTERN, O200K_PATTERN, KIMI_PATTERN } from "./patterns.js";
export { parseRanks, readRankFile } from "./ranks.js";
export { trainBpe, rankFileText, kimiTokenizerConfig, byteRankOrder, type TrainBpeOptions, type TrainedBpe } from "./train.js";
export type { Vocabulary } from "./rank-table.js";
export { kimiHfParts, pythonIsSpace, KIMI_MAX_ENCODE_CHARS, KIMI_MAX_RUN_CHARS } from "./kimi-hf.js";
export { encodeChat, parseK3Output, K3_EFFORT_SENTENCE, type ChatMessage, type ChatOptions, type K3Output } from "./chat.js";
export { TokenizerError, VocabularyError, DisallowedSpecialError, UnknownTokenError } from "./errors.js";
export { nativeLoadError, nativeOrigin } from "./native.js";
