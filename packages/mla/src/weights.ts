/**
 * Weights come through @k3/dense's weight views (one home for the F32/BF16 views with shape checks
 * and the `Linear` projection); this file only makes their errors MlaErrors.
 */
import { Linear, vectorF32 as denseVectorF32, type WeightErrorFactory, type WeightTensor } from "@k3/dense";
import { MlaError } from "./errors.js";

export type { Linear, WeightTensor };

const mlaWeightError: WeightErrorFactory = (message) => new MlaError("weight", message);

/** A [rows, cols] projection; a bad weight throws an MlaError naming it. */
export function linear(name: string, t: WeightTensor | undefined, rows: number, cols: number): Linear {
  return new Linear(name, t, rows, cols, mlaWeightError);
}

/** A small vector, widened to f32 after its shape is checked; a bad weight throws an MlaError. */
export function vectorF32(name: string, t: WeightTensor | undefined, expected: readonly number[]): Float32Array {
  return denseVectorF32(name, t, expected, mlaWeightError);
}
