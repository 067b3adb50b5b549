/**
 * The decode GEMV probe (K3_GEMV_PROBE=1; issue 13 item 3): every bf16 GEMV of the decode phase is
 * timed inside @k3/dense (gemvTrace), then the same calls are replayed back to back on the same
 * weights right after decode (outside its timed span). Per shape, engine seconds over replay seconds
 * is what running inside the engine adds to the kernel (pool wake-ups between calls, reader and
 * other threads on the 2 cores, cache state), independent of the memory ceiling of the moment.
 * Calls a batched kernel makes from inside its pool tasks (moe-stream's expert tiles) are counted,
 * not timed. Off by default: the trace adds two clock reads per call and the replay as much GEMV time again.
 */
import { gemvTrace } from "@k3/dense";

/** Most calls recorded per run (a K3 decode token makes ~30 GEMV calls, a 48B one ~60). */
export const GEMV_PROBE_CAPACITY = 1 << 16;

export interface GemvShapeFigures {
  rows: number;
  cols: number;
  calls: number;
  engine_seconds: number;
  replay_seconds: number;
  /** Weight bytes read by these calls (rows x cols x 2 per call). */
  bytes: number;
}

export interface GemvProbeReport {
  calls: number;
  /** Calls past the capacity (not recorded, not replayed). */
  dropped: number;
  /** Calls from inside pool tasks (a batched kernel's own tiles): counted, not timed. */
  in_task_calls: number;
  engine_seconds: number;
  replay_seconds: number;
  bytes: number;
  /** Per shape, largest engine-minus-replay first. */
  shapes: GemvShapeFigures[];
}

export function gemvProbeEnabled(env: Record<string, string | undefined> = process.env): boolean {
  const v = env.K3_GEMV_PROBE;
  return v !== undefined && v !== "" && v !== "0";
}

export function startGemvProbe(): void {
  gemvTrace.start(GEMV_PROBE_CAPACITY);
}

/** Stops the trace and replays it (the weights must still be loaded). */
export function finishGemvProbe(): GemvProbeReport {
  const t = gemvTrace.stop();
  const replay = gemvTrace.replay();
  return summarizeGemvProbe(t.rows, t.cols, t.seconds, replay, t.seen, t.inTasks);
}

/** Groups the calls by shape. */
export function summarizeGemvProbe(rows: ArrayLike<number>, cols: ArrayLike<number>, engine: ArrayLike<number>, replay: ArrayLike<number>, seen: number, inTasks = 0): GemvProbeReport {
  const by = new Map<string, GemvShapeFigures>();
  const out: GemvProbeReport = { calls: rows.length, dropped: Math.max(0, seen - rows.length), in_task_calls: inTasks, engine_seconds: 0, replay_seconds: 0, bytes: 0, shapes: [] };
  for (let i = 0; i < rows.length; i++) {
    const key = `${rows[i]}x${cols[i]}`;
    let s = by.get(key);
    if (!s) by.set(key, (s = { rows: rows[i], cols: cols[i], calls: 0, engine_seconds: 0, replay_seconds: 0, bytes: 0 }));
    const bytes = rows[i] * cols[i] * 2;
    s.calls++;
    s.engine_seconds += engine[i];
    s.replay_seconds += replay[i];
    s.bytes += bytes;
    out.engine_seconds += engine[i];
    out.replay_seconds += replay[i];
    out.bytes += bytes;
  }
  out.shapes = [...by.values()].sort((a, b) => b.engine_seconds - b.replay_seconds - (a.engine_seconds - a.replay_seconds));
  return out;
}

/** One line per run and the top shapes, ms per token; `memGbps` adds each one's memory floor. */
export function formatGemvProbe(p: GemvProbeReport, tokens: number, memGbps: number | null, top = 6): string[] {
  const ms = (s: number) => ((1000 * s) / Math.max(1, tokens)).toFixed(1);
  const floor = (bytes: number) => (memGbps ? ` floor ${ms(bytes / (memGbps * 1e9))}` : "");
  const r = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : "-");
  const lines = [
    `bf16 GEMVs per decoded token: ${(p.calls / Math.max(1, tokens)).toFixed(0)} calls, engine ${ms(p.engine_seconds)} ms, replayed back to back ${ms(p.replay_seconds)} ms (engine/replay ${r(p.engine_seconds, p.replay_seconds)})${floor(p.bytes)}${p.dropped ? `; ${p.dropped} calls past the capacity not recorded` : ""}${p.in_task_calls ? `; ${(p.in_task_calls / Math.max(1, tokens)).toFixed(0)} calls/token from inside pool tasks not timed` : ""}`,
  ];
  for (const s of p.shapes.slice(0, top))
    lines.push(`  ${s.rows}x${s.cols}: ${(s.calls / Math.max(1, tokens)).toFixed(1)} calls/token, engine ${ms(s.engine_seconds)} ms, replay ${ms(s.replay_seconds)} ms (${r(s.engine_seconds, s.replay_seconds)})${floor(s.bytes)}`);
  return lines;
}
