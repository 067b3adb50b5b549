/**
 * The two ceilings a run's floor is measured against (streaming.md §2.5), both measured in the
 * same process as the run they judge, before the model loads (so their buffers never add to the
 * run's peak RSS):
 *
 *  - memory: @k3/dense's memoryReadCeiling (a plain streaming sum) on 2 threads over a 512 MiB
 *    buffer, 16x any L3 this code runs on;
 *  - disk: @k3/moe-stream's measureReadCeiling over the checkpoint's own routed experts (the
 *    engine's access pattern: one expert-sized O_DIRECT read each, 16 in flight), spread over the
 *    layers and ids, at most ~1.1 GB; a checkpoint without experts reads 16 MiB pieces of its shards.
 */
import { statSync } from "node:fs";
import { memoryReadCeiling } from "@k3/dense";
import { measureReadCeiling, openCheckpointIndex } from "@k3/moe-stream";
import { isMoeLayer, type ModelConfig } from "./config.js";
import type { Ceilings } from "./report.js";

/** Bytes of the memory-ceiling buffer. */
export const MEM_CEILING_BYTES = 512 * 2 ** 20;
/** Most bytes the disk ceiling reads. */
export const DISK_CEILING_BYTES = 1.1e9;

export interface CeilingOptions {
  shardDirs?: readonly string[];
  /** A partly downloaded checkpoint (--layers N): absent shards are allowed. */
  allowMissingShards?: boolean;
  /** Threads of the memory ceiling (default 2). */
  threads?: number;
}

/** The reads of the disk ceiling: routed experts spread over layers and ids, else pieces of the shards. */
export function ceilingReads(dir: string, cfg: ModelConfig, o: CeilingOptions = {}): Array<{ file: string; offset: number; length: number }> {
  const index = openCheckpointIndex(dir, { allowMissingShards: o.allowMissingShards, shardDirs: o.shardDirs });
  const layers = [...Array(cfg.numLayers).keys()].filter((l) => isMoeLayer(cfg, l));
  const experts = layers.flatMap((l) => index.experts(l));
  const reads: Array<{ file: string; offset: number; length: number }> = [];
  if (experts.length > 0) {
    const per = experts[0].byteLength;
    const n = Math.max(1, Math.min(experts.length, Math.floor(DISK_CEILING_BYTES / per)));
    // Every (len/n)-th expert: all layers and a spread of ids, in file order within each shard.
    const step = experts.length / n;
    for (let i = 0; i < n; i++) {
      const e = experts[Math.floor(i * step)];
      reads.push({ file: e.file, offset: e.offset, length: e.byteLength });
    }
    return reads;
  }
  const piece = 16 * 2 ** 20;
  const sizes = index.files.map((f) => ({ file: f, size: statSync(f).size }));
  const total = sizes.reduce((a, s) => a + s.size, 0);
  const stride = Math.max(piece, Math.floor(total / Math.max(1, Math.floor(DISK_CEILING_BYTES / piece))));
  for (const s of sizes) for (let off = 0; off + 4096 <= s.size; off += stride) reads.push({ file: s.file, offset: off, length: Math.min(piece, s.size - off) });
  return reads;
}

/** Measures both ceilings (a few seconds). */
export function measureCeilings(dir: string, cfg: ModelConfig, o: CeilingOptions = {}): Ceilings {
  const mem = memoryReadCeiling({ bytes: MEM_CEILING_BYTES, threads: o.threads ?? 2, reps: 3 });
  const disk = measureReadCeiling(ceilingReads(dir, cfg, o), { queueDepth: 16, direct: true });
  return { memGbps: mem.gbPerSec, diskGbps: disk.gbPerSec };
}
