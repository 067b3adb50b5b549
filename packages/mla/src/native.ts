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
}

export const addon = loadAddon<MlaBinding>("@k3/mla", import.meta.url);
export const native = addon.binding;
native.init(nativeApi());
