/**
 * The cancel flag the server's main thread shares with its model worker: [0] the id of the job whose
 * client left (read with one atomic load between layers and pieces), then, 8 bytes in, when it left
 * (epoch ms), so the worker can log how long the stop took.
 */
export function cancelFlag(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(16));
}

/** Marks job `id` as cancelled now: the time first, so a worker that sees the id sees the time. */
export function markCancelled(flag: Int32Array, id: number): void {
  new Float64Array(flag.buffer, 8, 1)[0] = performance.timeOrigin + performance.now();
  Atomics.store(flag, 0, id);
}

/** Seconds since the cancelled job's client left (null before any cancel). */
export function secondsSinceCancel(flag: Int32Array): number | null {
  const left = new Float64Array(flag.buffer, 8, 1)[0];
  return left > 0 ? (performance.timeOrigin + performance.now() - left) / 1000 : null;
}
