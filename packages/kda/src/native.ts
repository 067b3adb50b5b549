import { nativeApi } from "@k3/dense";
import { loadAddon } from "@k3/native";

/** The C entry points of native/src/addon.cc (argument checks happen there). */
export interface KdaBinding {
  init(api: unknown): void;
  shortConv(x: Float32Array, w: Float32Array, state: Float32Array, out: Float32Array, T: number, C: number, K: number): void;
  gate(zRaw: Float32Array, dtBias: Float32Array, aLog: Float32Array, g: Float32Array, T: number, H: number, dk: number, form: number, lowerBound: number): void;
  recurrent(q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array | Uint16Array, o: Float32Array, T: number, H: number, dk: number, dv: number): void;
  chunked(q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array | Uint16Array, o: Float32Array, T: number, H: number, dk: number, dv: number, chunk: number): void;
}

export const addon = loadAddon<KdaBinding>("@k3/kda", import.meta.url);
export const native = addon.binding;
// One pool and one SIMD level per process: run on @k3/dense's.
native.init(nativeApi());
