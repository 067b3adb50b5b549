/**
 * The two interchangeable parsers behind Checkpoint: the native addon (parallel C scanner,
 * names in one string table, hash lookups in C) and the pure-TS fallback. Both produce the same
 * HeaderTables and the same errors; tests compare them on every fixture and fuzz case.
 */
import { FileRefusedError, readRegularFileSync } from "@k3/native";
import { SafetensorsError, ioError } from "./errors.js";
import { MAX_INDEX_BYTES, parseIndexJson } from "./index-json.js";
import { readRawHeader, readRawHeaderSync } from "./io.js";
import { parseFileTs, parseHeaderTs } from "./scan.js";
import { tableName, type HeaderTable } from "./table.js";

/** A parsed index.json, as far as the checkpoint needs it before opening shards. */
export interface IndexSummary {
  /** Distinct shard names in order of first appearance. */
  shards: string[];
  metadataJson: string | null;
  /** Entries in weight_map. */
  entries: number;
  /** Backend-private state (names, shard ids). */
  state: unknown;
}

export interface IndexedShards {
  tables: HeaderTable[];
  /** Global tensor index (shard base + index in shard) of a name, or -1. */
  find(name: string): number;
}

/** A parallel pass over index.json and every candidate shard file (see st_speculative_parse). */
export interface Speculation {
  /** The index, or the error that parsing it gave. */
  index: IndexSummary | null;
  error: SafetensorsError | null;
  /** Takes candidate order[k] as index shard k (paths = their display paths) and cross-checks. */
  finish(order: Uint32Array, paths: string[], indexFile: string): IndexedShards;
  dispose(): void;
}

export interface Backend {
  /** Optional: parse index.json and the candidates' headers in one parallel pass. */
  speculate?(indexFile: string, candidates: string[]): Speculation;
  speculateAsync?(indexFile: string, candidates: string[]): Promise<Speculation>;
  readonly kind: "native" | "ts";
  parseFile(bytes: Uint8Array, file?: string): IndexedShards;
  /** Reads and parses an index.json file. */
  parseIndex(file: string): IndexSummary;
  indexShardsSync(paths: string[], index: IndexSummary | null, indexFile?: string): IndexedShards;
  indexShards(paths: string[], index: IndexSummary | null, indexFile?: string): Promise<IndexedShards>;
}

// ---------------------------------------------------------------- pure TS

function namesOf(t: HeaderTable): string[] {
  const out = new Array<string>(t.count);
  for (let i = 0; i < t.count; i++) out[i] = tableName(t, i);
  return out;
}

/** The weight-map and cross-shard rules, shared by the sync and async TS paths. */
function crossCheckTs(paths: string[], tables: HeaderTable[], index: IndexSummary | null, indexFile?: string): IndexedShards {
  const global = new Map<string, number>();
  const names = tables.map(namesOf);
  let base = 0;
  if (index) {
    const { names: mapNames, shardOf } = index.state as { names: string[]; shardOf: Uint32Array };
    const local = names.map((list) => new Map(list.map((n, i) => [n, i])));
    const marks = tables.map((t) => new Uint8Array(t.count));
    for (let k = 0; k < mapNames.length; k++) {
      const s = shardOf[k];
      const i = local[s].get(mapNames[k]);
      if (i === undefined) {
        throw new SafetensorsError("TensorNotInShard", `weight_map puts this tensor in ${JSON.stringify(index.shards[s])} but that shard does not hold it`, { file: indexFile, tensor: mapNames[k] });
      }
      marks[s][i] = 1;
    }
    for (let s = 0; s < tables.length; s++) {
      for (let i = 0; i < tables[s].count; i++) {
        if (!marks[s][i]) throw new SafetensorsError("TensorNotInIndex", `the shard holds a tensor that weight_map does not list`, { file: paths[s], tensor: names[s][i] });
        global.set(names[s][i], base + i);
      }
      base += tables[s].count;
    }
  } else {
    const shardOfGlobal: number[] = [];
    for (let s = 0; s < tables.length; s++) {
      for (let i = 0; i < tables[s].count; i++) {
        const prev = global.get(names[s][i]);
        if (prev !== undefined) {
          let ps = 0;
          while (shardOfGlobal[ps + 1] !== undefined && shardOfGlobal[ps + 1] <= prev) ps++;
          throw new SafetensorsError("DuplicateTensor", `the tensor is also in ${paths[ps]}`, { file: paths[s], tensor: names[s][i] });
        }
        global.set(names[s][i], base + i);
      }
      shardOfGlobal.push(base);
      base += tables[s].count;
    }
  }
  return { tables, find: (name) => global.get(name) ?? -1 };
}

export const tsBackend: Backend = {
  kind: "ts",
  parseFile(bytes, file) {
    const table = parseFileTs(bytes, file);
    const map = new Map<string, number>();
    for (let i = 0; i < table.count; i++) map.set(tableName(table, i), i);
    return { tables: [table], find: (n) => map.get(n) ?? -1 };
  },
  parseIndex(file) {
    let bytes: Uint8Array;
    try {
      // Kind and size before any byte is read, as the native reader does: a symlink to /dev/zero
      // grew memory without bound, a FIFO hung, a 1.2 GB sparse index was read whole first.
      bytes = readRegularFileSync(file, MAX_INDEX_BYTES);
    } catch (err) {
      if (err instanceof FileRefusedError && err.code === "ENOTREG") throw new SafetensorsError("InvalidIndex", `the index is ${err.message}`, { file, cause: err });
      if (err instanceof FileRefusedError && err.code === "EFBIG") throw new SafetensorsError("InvalidIndex", `the index is larger than ${MAX_INDEX_BYTES} bytes`, { file });
      throw ioError(file, "reading the index", err);
    }
    const w = parseIndexJson(bytes, file);
    return { shards: w.shards, metadataJson: w.metadataJson, entries: w.names.length, state: { names: w.names, shardOf: w.shardOf } };
  },
  indexShardsSync(paths, index, indexFile) {
    const tables = paths.map((p) => {
      const raw = readRawHeaderSync(p);
      return parseHeaderTs(raw.header, raw.fileSize, p);
    });
    return crossCheckTs(paths, tables, index, indexFile);
  },
  async indexShards(paths, index, indexFile) {
    const raws = await Promise.all(paths.map((p) => readRawHeader(p).then((r) => r, (e: unknown) => e)));
    const tables: HeaderTable[] = [];
    for (let s = 0; s < paths.length; s++) {
      const r = raws[s];
      if (r instanceof Error) throw r;
      const raw = r as { header: Uint8Array; fileSize: number };
      tables.push(parseHeaderTs(raw.header, raw.fileSize, paths[s]));
    }
    return crossCheckTs(paths, tables, index, indexFile);
  },
};
