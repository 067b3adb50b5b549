/**
 * @k3/engine: Kimi K3 and Kimi-Linear on one CPU. Config, model, generation, sampler, chat,
 * memory presets, the run report, the `k3` CLI and an OpenAI-compatible server.
 */
export * from "./errors.js";
export * from "./config.js";
export * from "./census.js";
export * from "./presets.js";
export * from "./sampler.js";
export * from "./options.js";
export * from "./report.js";
export * from "./weights.js";
export { Model, type ModelState, type LayerState, type ForwardOptions, type ForwardProgress, type LoadOptions } from "./model.js";
export * from "./layers/index.js";
export { cpuSnapshot, threadCpuBetween, formatThreadCpu, THREAD_GROUPS, type ThreadCpuReport, type CpuSnapshot } from "./thread-cpu.js";
export { gemvProbeEnabled, summarizeGemvProbe, formatGemvProbe, type GemvProbeReport, type GemvShapeFigures } from "./gemv-probe.js";
export { Engine, checkPromptLength, stopIdsFor, type EngineOptions, type GenerateOptions, type GenerationResult, type PrefillProgress, type TokenEvent, type ChatFormat } from "./engine.js";
export { PromptCache, DEFAULT_PROMPT_CACHE_BYTES, stateBytes, snapshotGrain, snapshotPoint, type PromptCacheOptions, type PromptSnapshot, type PromptCacheStats } from "./prompt-cache.js";
export { ChatSession, type ChatOptions } from "./chat.js";
export { startServer, validateRequest, HttpError, MAX_CHOICES, chatLogprobs, textLogprobs, type CompletionBackend, type CompletionJob, type CompletionResult, type ChoiceResult, type LogprobEntry, type TextExtra, type TextChannel, type ServeOptions, type RunningServer } from "./server.js";
export { initialState, step, stepBytes, isComplete, minCompletion, minValueLength, ANY, ANY_OBJECT, MAX_WS, type JsonState, type SchemaNode, type ObjectProp } from "./json-grammar.js";
export { compileSchema, SchemaError } from "./json-schema.js";
export { JsonConstraint, JsonVocab, jsonVocabFor, allowedTokens, staysInString } from "./json-mask.js";
export { jsonConstraint, schemaFor, K3Channels, ThinkThenJson, type ResponseFormat, type K3Channel } from "./json-mode.js";
export { tokenString } from "./token-text.js";
export { WorkerBackend, type WorkerInit } from "./backend.js";
export { embeddedModelDir } from "./embedded.js";
export { sequenceNll, tokenNll, formatNll, type NllResult } from "./perplexity.js";
export { teacherForced, loadReference, formatTeacherForcing, type TeacherForcingResult, type TeacherForcingMismatch, type TeacherForcingOptions } from "./teacher-forcing.js";
export { downloadCheckpoint, listRevision, DownloadError, type DownloadOptions, type DownloadResult, type HubFile } from "./download.js";
export { LogitsDumper, readLogits, compareLogits, formatComparison, LOGITS_FORMAT, type LogitsFile, type LogitsComparison } from "./logits-dump.js";
export { ngramDraft, SpeculativeDecoder, type Drafter, type NgramDraftOptions, type SpeculationStats } from "./speculative.js";
export { ExpertTraceRecorder, cacheSimReport, formatCacheSim, TRACE_FILE, HIST_FILE, type TraceMeta, type CacheSimReport, type CacheSimRow } from "./cache-trace.js";
export { runDoctor, type DoctorOptions } from "./doctor.js";
export { publishedK3Config, publishedKimiLinearConfig, releasedFullAttnLayers, complementLayers } from "./published.js";
export { synthesize, synthConfig, synthPlan, generateOnly, synthFullAttnLayers, syntheticRankFile, synthProgressPrinter, ciCheckpointOptions, synthCiCheckpoint, e8m0For, tensorByteSize, BLOCK_ELEMENTS, type SynthOptions, type SynthResult, type SynthProgress, type SynthShard, type SynthTensor, type SynthFill, type SynthFamily, type CiFixture } from "./synth.js";
export {
  measureCeilings, measureCeilingsAfter, ceilingPlans, afterPlans, splitPieces, uniformCeilings, ceilingGbps, memCeilingGbps, cgroupHeadroomBytes,
  MEM_CEILING_BYTES, MEM_CEILING_MAX_BYTES, memCeilingBytes, lastLevelCacheBytes, SOURCE_CEILING_BYTES, HEAD_CEILING_BYTES, EMBED_CEILING_ROWS, DISK_SOURCES, KIND_SOURCE,
  type DiskSource, type ReadPattern, type SourcePlan, type FloorSetup, type SourceCeiling,
} from "./floor.js";
