/**
 * Weights come through @k3/dense's weight views (one home for the F32/BF16 views with shape checks
 * and the `Linear` projection); this file only makes their errors KdaErrors.
 */
import { anyVectorF32 as denseAnyVectorF32, Linear, rowsOf as denseRowsOf, vectorF32 as denseVectorF32, type WeightErrorFactory, type WeightTensor } from "@k3/dense";
import { KdaError } from "./errors.js";

export type { WeightTensor };

const kdaWeightError: WeightErrorFactory = (message) => new KdaError("weight", message);

/** A [rows, cols] projection; a bad weight throws a KdaError naming it. */
export function linear(name: string, t: WeightTensor | undefined, rows: number, cols: number): Linear {
  return new Linear(name, t, rows, cols, kdaWeightError);
}

/** A small vector or kernel, widened to f32 after its shape is checked; a bad weight throws a KdaError. */
export function vectorF32(name: string, t: WeightTensor | undefined, expected: readonly number[]): Float32Array {
  return denseVectorF32(name, t, expected, kdaWeightError);
}

/** A vector of unknown length (A_log), widened to f32. */
export function anyVectorF32(name: string, t: WeightTensor | undefined): { values: Float32Array; shape?: readonly number[] } {
  return denseAnyVectorF32(name, t, kdaWeightError);
}

/** The row count of a [rows, cols] matrix given its column count (ranks read from the weights). */
export function rowsOf(name: string, t: WeightTensor | undefined, cols: number): number {
  return denseRowsOf(name, t, cols, kdaWeightError);
}
