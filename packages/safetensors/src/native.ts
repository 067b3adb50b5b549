/**
 * The native backend: the C scanner of native/ behind the same Backend interface as the TS
 * parser. Shards are parsed in parallel on the @k3/dense thread pool when @k3/dense loads
 * (serially otherwise). When the addon itself cannot load, `nativeBackend` is null and
 * `nativeLoadError` says why; the TS parser then does the work.
 */
import { loadAddon } from "@k3/native";
import type { Backend, IndexSummary, IndexedShards, Speculation } from "./backend.js";
import { SafetensorsError, type SafetensorsErrorCode } from "./errors.js";
import type { HeaderTable } from "./table.js";

interface NativeError {
  code: string;
  detail: string;
  position: number;
  shard: number;
  tensor?: string;
}

interface NativeTables {
  tables: HeaderTable[];
  handle: unknown;
}

type Result<T> = T | { error: NativeError };

interface NativeSpeculation {
  error?: NativeError;
  shards?: string[];
  entries?: number;
  metadataJson?: string | null;
  handle: unknown;
}

interface NativeIndex {
  shards: string[];
  entries: number;
  metadataJson: string | null;
  handle: unknown;
}

export interface SafetensorsBinding {
  init(api: unknown): void;
  parseBuffer(bytes: Uint8Array): Result<NativeTables>;
  parseIndexFile(path: string): Result<NativeIndex>;
  openShards(paths: string[], index?: unknown): Result<NativeTables>;
  openShardsAsync(paths: string[], index?: unknown): Promise<Result<NativeTables>>;
  find(handle: unknown, name: string): number;
  freeIndex(handle: unknown): void;
  speculativeOpen(indexPath: string, candidates: string[]): NativeSpeculation;
  speculativeOpenAsync(indexPath: string, candidates: string[]): Promise<NativeSpeculation>;
  speculativeFinish(handle: unknown, order: Uint32Array): Result<NativeTables>;
  mapRange(path: string, offset: number, length: number): ArrayBuffer;
}

function toError(e: NativeError, files: readonly string[], fallbackFile: string | undefined): SafetensorsError {
  const file = e.shard >= 0 ? files[e.shard] : fallbackFile;
  return new SafetensorsError(e.code as SafetensorsErrorCode, e.detail, {
    file,
    tensor: e.tensor,
    position: e.position >= 0 ? e.position : undefined,
  });
}

function unwrap<T extends object>(r: Result<T>, files: readonly string[], fallbackFile?: string): T {
  if ("error" in r) throw toError(r.error, files, fallbackFile);
  return r;
}

function indexed(r: NativeTables, binding: SafetensorsBinding): IndexedShards {
  const handle = r.handle;
  return { tables: r.tables, find: (name) => binding.find(handle, name) };
}

function load(): { binding: SafetensorsBinding | null; error: string | null; parallel: boolean } {
  let binding: SafetensorsBinding;
  try {
    binding = loadAddon<SafetensorsBinding>("@k3/safetensors", import.meta.url).binding;
  } catch (err) {
    return { binding: null, error: err instanceof Error ? err.message : String(err), parallel: false };
  }
  return { binding, error: null, parallel: false };
}

const loaded = load();

/** Hands the @k3/dense pool to the addon (shards are then parsed in parallel). */
async function attachPool(binding: SafetensorsBinding): Promise<boolean> {
  try {
    const dense = await import("@k3/dense");
    binding.init(dense.nativeApi());
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves once the pool is attached (true) or known to be unavailable (false). Async opens
 * wait for it; a sync open that runs before it settles parses the shards serially.
 */
export const nativePoolReady: Promise<boolean> = loaded.binding ? attachPool(loaded.binding) : Promise.resolve(false);

export const nativeBinding: SafetensorsBinding | null = loaded.binding;
export const nativeLoadError: string | null = loaded.error;

function speculation(r: NativeSpeculation, binding: SafetensorsBinding, indexFile: string): Speculation {
  return {
    error: r.error ? toError(r.error, [], indexFile) : null,
    index: r.error ? null : { shards: r.shards!, metadataJson: r.metadataJson ?? null, entries: r.entries!, state: null },
    finish(order, paths, file) {
      return indexed(unwrap(binding.speculativeFinish(r.handle, order), paths, file), binding);
    },
    dispose() {
      // The unused tables are freed with the handle when it is collected (finish frees eagerly).
    },
  };
}

export const nativeBackend: Backend | null = loaded.binding
  ? ((binding: SafetensorsBinding): Backend => ({
      kind: "native",
      parseFile(bytes, file) {
        return indexed(unwrap(binding.parseBuffer(bytes), [], file), binding);
      },
      speculate(indexFile, candidates) {
        return speculation(binding.speculativeOpen(indexFile, candidates), binding, indexFile);
      },
      async speculateAsync(indexFile, candidates) {
        await nativePoolReady;
        return speculation(await binding.speculativeOpenAsync(indexFile, candidates), binding, indexFile);
      },
      parseIndex(file): IndexSummary {
        const r = unwrap(binding.parseIndexFile(file), [], file);
        return { shards: r.shards, metadataJson: r.metadataJson, entries: r.entries, state: r.handle };
      },
      indexShardsSync(paths, index, indexFile) {
        try {
          return indexed(unwrap(binding.openShards(paths, index?.state), paths, indexFile), binding);
        } finally {
          if (index) binding.freeIndex(index.state);
        }
      },
      async indexShards(paths, index, indexFile) {
        await nativePoolReady;
        try {
          return indexed(unwrap(await binding.openShardsAsync(paths, index?.state), paths, indexFile), binding);
        } finally {
          if (index) binding.freeIndex(index.state);
        }
      },
    }))(loaded.binding)
  : null;
