import { loadAddon } from "@k3/native";

export type SimdLevel = "scalar" | "avx2" | "avx512";

export interface DenseBinding {
  simdLevel(): SimdLevel;
  bestSimdLevel(): SimdLevel;
  setSimdLevel(level: SimdLevel): void;
  threadCount(): number;
  setThreadCount(threads: number): void;
  gemvBf16(w: ArrayBufferView, x: Float32Array, y: Float32Array, rows: number, cols: number, ld: number): void;
  api(): unknown;
}

export const addon = loadAddon<DenseBinding>("@k3/dense", import.meta.url);
export const native = addon.binding;
