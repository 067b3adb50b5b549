import { nativeApi } from "@k3/dense";
import { loadAddon } from "@k3/native";

export interface Mxfp4Binding {
  init(denseApi: unknown): void;
  /** true when Y holds a NaN (then the caller rescans the scales for 0xFF) */
  matmul(packed: Uint8Array, scales: Uint8Array, rows: number, cols: number, X: Float32Array, Y: Float32Array, batch: number): boolean;
  matmulSplit(packed: Uint8Array, scales: Uint8Array, rows: number, cols: number, XS: Float32Array, Y: Float32Array, batch: number): boolean;
  matmulInt8(packed: Uint8Array, scales: Uint8Array, rows: number, cols: number, X: Float32Array, Y: Float32Array, batch: number): boolean;
  hasVnni(): boolean;
  splitActivations(X: Float32Array, out: Float32Array, cols: number, batch: number): void;
  dequantize(packed: Uint8Array, scales: Uint8Array, rows: number, cols: number, out: Float32Array): void;
  quantize(values: Float32Array, rows: number, cols: number, packed: Uint8Array, scales: Uint8Array): number;
  api(): unknown;
}

export const addon = loadAddon<Mxfp4Binding>("@k3/mxfp4", import.meta.url);
export const native = addon.binding;
// One pool and one SIMD level per process: the kernels run on @k3/dense's.
native.init(nativeApi());
