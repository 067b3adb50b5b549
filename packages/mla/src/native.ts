import { nativeApi } from "@k3/dense";
import { loadAddon } from "@k3/native";

/** The C entry points of native/src/addon.cc (argument and bounds checks happen there). */
export interface MlaBinding {
  init(api: unknown): void;
  attend(
    q: Float32Array, T: number, H: number, dq: number, dv: number,
    keys: Float32Array | Uint16Array, kOffset: number, kStride: number, kHead: number,
    values: Float32Array | Uint16Array, vOffset: number, vStride: number, vHead: number,
    qPos0: number, scale: number, out: Float32Array,
  ): void;
  absorb(qNope: Float32Array, T: number, H: number, inStride: number, inHead: number, kvb: Float32Array | Uint16Array, n: number, v: number, L: number, out: Float32Array, outStride: number, outHead: number): void;
  project(latent: Float32Array, T: number, H: number, inStride: number, inHead: number, kvb: Float32Array | Uint16Array, n: number, v: number, L: number, out: Float32Array, outStride: number, outHead: number): void;
}

export const addon = loadAddon<MlaBinding>("@k3/mla", import.meta.url);
export const native = addon.binding;
native.init(nativeApi());
