import { nativeApi } from "@k3/dense";
import { nativeApi as mxfp4NativeApi } from "@k3/mxfp4";
import { loadAddon } from "@k3/native";

/** One finished (or cancelled) read, as posted by the native reader threads. */
export interface NativeReadDone {
  id: number;
  slot: number;
  /** 0 ok, else an errno value. */
  status: number;
  cancelled: boolean;
  /** Where the requested bytes start inside the slot (non-zero for an aligned-superset O_DIRECT read). */
  dataOffset: number;
  deviceBytes: number;
  direct: boolean;
  startNs: number;
  endNs: number;
  message: string;
  /**
   * Set by readChecked when a tensor's crc32 does not match (status EBADMSG): its index in the
   * tensors passed, both crc32s, and how many further tensors of the load differ.
   */
  checksum?: { tensor: number; expected: number; got: number; others: number };
}

export interface NativePoolStats {
  reads: number;
  deviceBytes: number;
  requestedBytes: number;
  directReads: number;
  bufferedReads: number;
  busyNs: number;
  inflight: number;
  queuedDemand: number;
  queuedPrefetch: number;
  /** The engine serving reads. */
  engine: "io_uring" | "io_uring+sqpoll" | "pread";
  /** Why io_uring (or SQPOLL) is not in use when it was asked for; "" otherwise. */
  engineNote: string;
  nowNs: number;
}

export interface NativeExpertStore {
  read(id: number, file: number, offset: number, length: number, slot: number, prefetch: boolean, base?: number): void;
  /**
   * The reads of one load ([id, file, offset, length, slot, base?] each), every tensor's crc32
   * ([name, file offset, length, crc32] each, inside the reads) checked on the reader threads as the
   * bytes land; the last read of the load to finish reports a mismatch (status EBADMSG, `checksum`).
   * `label` names the load in the message ("layer 3").
   */
  readChecked(label: string, tensors: Array<[string, number, number, number]>, reads: Array<[number, number, number, number, number, number?]>, prefetch: boolean): void;
  cancelPrefetch(): number;
  stats(): NativePoolStats;
  injectFault(afterReads: number, kind: "eio" | "short" | "direct-einval" | "split"): void;
  fileInfo(file: number): { size: number; direct: boolean; memAlign: number; offsetAlign: number };
  ref(): void;
  unref(): void;
  close(): void;
  /** A view of [byteOffset, +byteLength) of the arena (<= 2^32 bytes; it keeps the arena alive). */
  view(byteOffset: number, byteLength: number): ArrayBuffer;
}

/**
 * What the two batched-expert kernels take after the shapes: the GLU activation code and its two
 * SiTU bounds, the rows read (x, xRow) and written (y, yRow), and scratch.
 */
type ExpertRowsArgs = [act: number, beta1: number, beta2: number, x: Float32Array, xRow: Int32Array, y: Float32Array, yRow: Int32Array, work: Float32Array];

export interface MoeStreamBinding {
  /** Hands the addon @k3/dense's C table (its pool and kernels); done once at load, below. */
  initCompute(api: unknown): void;
  /**
   * The dense experts of a layer in two pool dispatches (native/src/moe_compute.h): for expert e
   * (mats[3e..3e+2] = w1, w3, w2 as bf16 bits or f32, rows[e] batch rows), batch row i reads
   * x[xRow[i]] and writes y[yRow[i]]. act 0 = SiLU-GLU, 1 = SiTU-GLU (beta1, beta2). work holds
   * at least rows x (inDim + 2 inter + outDim) floats.
   */
  moeExperts(mats: ArrayBufferView[], rows: Int32Array, inDim: number, inter: number, outDim: number, bf16: boolean, ...glu: ExpertRowsArgs): void;
  /** Hands the addon @k3/mxfp4's C table (its MXFP4 kernels, for moeExpertsMxfp4); done once at load, below. */
  initMxfp4(api: unknown): void;
  /**
   * A layer's MXFP4 experts in two pool dispatches through @k3/mxfp4's kernels (native/src/moe_mxfp4.h):
   * mats[6e..6e+5] = w1, w3, w2 of expert e, each as packed bytes then scale bytes. Rows as moeExperts;
   * inDim and inter are multiples of 32. nan[e] is set when expert e's gate, up or down products hold a
   * NaN (a 0xFF scale, or NaN input): the caller rescans its scales. Returns how many experts are flagged.
   */
  moeExpertsMxfp4(mats: Uint8Array[], rows: Int32Array, inDim: number, inter: number, outDim: number, ...glu: [...ExpertRowsArgs, nan: Uint8Array]): number;
  /** out[t] = sum_j fround(w[t k + j] * slots[t k + j]) in j order from +0 (rows of dim), then + add[t] when given. */
  moeMix(slots: Float32Array, weights: Float32Array, tokens: number, k: number, dim: number, out: Float32Array, add: Float32Array | null): void;
  /** out[i] = fround(out[i] + a[i]) for i < n. */
  moeAdd(out: Float32Array, a: Float32Array, n: number): void;
  NativeExpertStore: new (
    files: string[],
    slotBytes: number,
    slots: number,
    threads: number,
    direct: boolean,
    maxPrefetchInflight: number,
    prefault: boolean,
    onDone: (done: NativeReadDone) => void,
    engine?: "auto" | "io_uring" | "pread",
    sqpoll?: boolean,
  ) => NativeExpertStore;
  /** Test hook: every later io_uring setup fails with this errno (0 = off), as under seccomp. */
  simulateUringUnavailable(errno: number): void;
  supersetBytes(length: number, align: number): number;
  /**
   * zlib's crc32 of `bytes` continuing `crc` (default 0), by the best kernel this CPU has
   * (VPCLMULQDQ on AVX-512, else PCLMULQDQ, else the table), or by the one named (capped at the
   * best; `true` = the table reference). Every kernel gives the same value.
   */
  crc32(bytes: ArrayBufferView, crc?: number, kernel?: boolean | "table" | "pclmul" | "vpclmul"): number;
  /** The kernel crc32 uses on this CPU. */
  crc32Kernel(): "table" | "pclmul" | "vpclmul";
  /** crc32(A ‖ B) from crc32(A), crc32(B) and B's length. */
  crc32Combine(crcA: number, crcB: number, lengthB: number): number;
  crc32UsesPclmul(): boolean;
  /** `bytes` of native memory aligned to `align` (a power of two >= 512), for O_DIRECT writes; freed with the buffer. */
  alignedBuffer(bytes: number, align: number): ArrayBuffer;
  /** The O_DIRECT alignment of `path` (statx STATX_DIOALIGN, at least 4096). */
  dioAlignment(path: string): { memAlign: number; offsetAlign: number };
  /** k3 synth's block: n elements of kind (0 normal bf16, 1 normal f32, 2 nibbles, 3 e8m0) from sfc32 state, twice over; built on a libuv thread. */
  synthBlock(kind: number, state: Uint32Array, n: number, mean: number, std: number, s: number): Promise<ArrayBuffer>;
  readCeiling(paths: string[], file: Uint32Array, offset: Float64Array, length: Float64Array, qd: number, direct: boolean): { bytes: number; seconds: number };
  dropFileCache(path: string): number;
  /** Seconds to map, fault in (MADV_POPULATE_WRITE from `threads` threads, 0 = one per core) and unmap `bytes` of fresh memory. */
  backingCeiling(bytes: number, threads: number, huge: boolean): number;
  loadResident(
    paths: string[],
    file: Uint32Array,
    start: Float64Array,
    end: Float64Array,
    options: { pieceBytes: number; threads: number; engine: "auto" | "io_uring" | "pread"; direct: boolean; prefault: "none" | "huge" | "populate"; populateThreads?: number; discard?: boolean; fault?: "eio" | "short" | "direct-einval"; faultAfter?: number },
    onProgress?: (doneBytes: number, totalBytes: number) => void,
  ): {
    blocks: ArrayBuffer[];
    bases: number[];
    stats: {
      reads: number;
      deviceBytes: number;
      requestedBytes: number;
      directReads: number;
      bufferedReads: number;
      mappedBytes: number;
      seconds: number;
      engine: "io_uring" | "io_uring+sqpoll" | "pread";
      engineNote: string;
      prefault: "none" | "huge" | "populate";
      populateThreads: number;
      populateSeconds: number;
      readBusySeconds: number;
    };
  };
  /** Gives a resident block's whole pages back to the kernel now; the buffer stays valid and reads as zeros. */
  releasePages(buffer: ArrayBuffer): void;
  poolBench(paths: string[], file: Uint32Array, offset: Float64Array, length: Float64Array, qd: number, engine: "io_uring" | "pread", direct: boolean): { bytes: number; seconds: number; cpuSeconds: number; engine: "io_uring" | "pread" };
}

export const addon = loadAddon<MoeStreamBinding>("@k3/moe-stream", import.meta.url);
export const native = addon.binding;
// One pool and one SIMD level per process: the MoE compute runs on @k3/dense's.
native.initCompute(nativeApi());
native.initMxfp4(mxfp4NativeApi());
