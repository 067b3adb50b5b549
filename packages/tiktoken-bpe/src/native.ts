/**
 * The optional native core (native/src/*.c). When it cannot load (no prebuild for this platform,
 * K3_TIKTOKEN_BACKEND=typescript), the tokenizer runs the TypeScript fallback with identical
 * output; `nativeLoadError()` tells why.
 */
import { loadAddon, type LoadedAddon } from "@k3/native";

export interface TiktokenBinding {
  /** Builds the rank hash table and special list; returns an opaque handle. */
  create(
    pool: Uint8Array,
    offsets: Uint32Array,
    ranks: Uint32Array,
    family: number,
    specialPool: Uint8Array,
    specialOffsets: Uint32Array,
    specialIds: Uint32Array,
  ): object;
  /** Frees the encoder behind handle now (not at garbage collection); later calls with it throw. */
  destroy(handle: object): void;
  encode(handle: object, bytes: Uint8Array, len: number, allowed: Uint8Array | null, out: Uint32Array): number;
  count(handle: object, bytes: Uint8Array, len: number, allowed: Uint8Array | null): number;
  findSpecial(handle: object, bytes: Uint8Array, len: number, mask: Uint8Array): number;
  /**
   * Bytes of ids into out (whose last 16 bytes are slack the copy may overwrite): r >= 0 and
   * r + 16 <= out.length: r bytes written; r + 16 > out.length: out too small, r bytes needed;
   * r < 0: ids[-r - 1] is unknown.
   */
  decodeInto(handle: object, ids: Uint32Array, out: Uint8Array): number;
  /** The same, then the UTF-8 text of the bytes as a string (or the number when not written). */
  decodeString(handle: object, ids: Uint32Array, out: Uint8Array): string | number;
  /** Fills pool/offsets/ranks from rank-file bytes: [count, poolUsed], or -(line) of a bad line. */
  parseRankFile(data: Uint8Array, pool: Uint8Array, offsets: Uint32Array, ranks: Uint32Array): [number, number] | number;
  /** Test hook: BPE of one piece forced through the linear (0) or heap (1) merge. */
  mergePiece(handle: object, bytes: Uint8Array, heap: number, out: Uint32Array): number;
}

let loaded: LoadedAddon<TiktokenBinding> | undefined;
let loadError: Error | undefined;

/** The addon, or undefined when it cannot load (see nativeLoadError). */
export function nativeBinding(): TiktokenBinding | undefined {
  if (loaded) return loaded.binding;
  if (loadError) return undefined;
  if (process.env.K3_TIKTOKEN_BACKEND === "typescript") {
    loadError = new Error("K3_TIKTOKEN_BACKEND=typescript");
    return undefined;
  }
  try {
    loaded = loadAddon<TiktokenBinding>("@k3/tiktoken-bpe", import.meta.url);
    return loaded.binding;
  } catch (err) {
    loadError = err as Error;
    return undefined;
  }
}

/** Why the native core is not in use, or undefined when it is. */
export function nativeLoadError(): Error | undefined {
  nativeBinding();
  return loadError;
}

/** Where the loaded addon came from (`prebuilt` or `source`), for reports. */
export function nativeOrigin(): string | undefined {
  nativeBinding();
  return loaded?.origin;
}
