/**
 * @k3/moe-stream: Kimi K3's mixture of experts, streamed from NVMe under a memory budget.
 *
 * - `Router` / `selectExperts`: the sigmoid router with selection-only bias (fp32).
 * - `ExpertStore`: one read per expert from the original shards, O_DIRECT, io_uring (pread threads as fallback),
 *   a per-layer cache, cancellable low-priority prefetch, honest stats.
 * - `openCheckpointIndex`: where every tensor and expert lives (header-only).
 *
 * Weights are @k3/dense's `Linear` views and the MLPs @k3/dense's `GluMlp` (activation and SiTU
 * bounds from the config); MXFP4 matrices are @k3/mxfp4's `Mxfp4Matrix`.
 */
export * from "./errors.js";
export { openCheckpointIndex, checkpointIndex, type CheckpointIndex, type ExpertLocation, type TensorInfo, type Dtype } from "./store/checkpoint.js";
export { Router, selectExperts, type RouterConfig, type Routing } from "./moe/router.js";
export {
  ExpertStore,
  type ExpertStoreOptions,
  type ExpertHandle,
  type ExpertRequest,
  type ExpertSource,
  type ExpertStoreStats,
  type WarmOptions,
  type WarmProgress,
  type WarmResult,
  type WarmTask,
} from "./store/expert-store.js";
export {
  denseExpertCompute,
  mxfp4ExpertCompute,
  k3Mxfp4Kernels,
  type ExpertCompute,
  type ExpertBatchItem,
  type ExpertBatchFailure,
  type Mxfp4Kernels,
} from "./moe/expert-compute.js";
export {
  MoeLayer,
  type MoeLayerOptions,
  type MoeForwardOptions,
  type MoeForwardStats,
  type ExpertProvider,
  type SharedExperts,
  type LatentProjection,
  type DroppedExpert,
} from "./moe/moe-layer.js";
export { ProgressMeter, progressPrinter, redrawLine, type Progress, type ProgressStream } from "@k3/native";
export {
  packTrunk,
  planTrunk,
  verifyTrunkFile,
  readTrunkManifest,
  checkTrunkSource,
  TRUNK_FILE,
  TRUNK_MANIFEST,
  type PackTrunkOptions,
  type PackTrunkResult,
  type TrunkManifest,
  type TrunkGroup,
  type TrunkTensor,
} from "./trunk/trunk-pack.js";
export { RangeReader, type RangeReaderOptions, type RangeReaderStats } from "./io/range-reader.js";
export { TrunkStreamer, type TrunkStreamerOptions, type TrunkLayer, type TrunkStreamerStats } from "./trunk/trunk-stream.js";
export { resolveIoEngine, type IoEngine, type IoEngineInUse } from "./io/io-engine.js";
export { procIo, peakRssBytes, dropPageCache, measureReadCeiling, measureReadEngine } from "./io/io-stats.js";
export { DirectFileWriter, StagingBuffers, dioAlignment, synthBlock, DIRECT_BUFFER_BYTES, type DirectWriterOptions } from "./io/direct-write.js";
export {
  simulateCache,
  simulateCacheSizes,
  parseCacheTrace,
  encodeCacheTrace,
  CACHE_POLICIES,
  type CachePolicy,
  type CacheTraceRequest,
  type CacheSimResult,
} from "./store/cache-sim.js";
export { EXPERT_CACHE_POLICIES, COUNT_HALVING_REQUESTS, type ExpertCachePolicy } from "./store/cache-policy.js";
export {
  loadResidentRanges,
  loadCeiling,
  loadFreshCeiling,
  backingCeiling,
  planBlocks,
  type ResidentRange,
  type ResidentLoad,
  type ResidentLoadOptions,
  type ResidentLoadStats,
  type Prefault,
} from "./store/resident-load.js";
