/**
 * Progress of long steps (packing, verifying): bytes, rate, ETA. `progressPrinter()` draws a bar on
 * a TTY and writes one JSON object per line otherwise (for logs and supervisors), at most 4 times a second.
 */
import { formatBytes } from "./format.js";

export interface Progress {
  phase: string;
  /** What is being processed now (e.g. "layer 12"). */
  item: string;
  bytesDone: number;
  bytesTotal: number;
  /** Bytes skipped because an earlier run finished them (resume). */
  bytesResumed: number;
  /** Bytes per second over this run. */
  rate: number;
  /** Seconds left at the current rate; null until measurable. */
  etaSeconds: number | null;
  done: boolean;
}

/** Tracks bytes over time and produces Progress records. */
export class ProgressMeter {
  private readonly start = performance.now();
  private done = 0;
  constructor(readonly phase: string, readonly total: number, readonly resumed = 0) {}
  add(bytes: number): void {
    this.done += bytes;
  }
  snapshot(item: string, finished = false): Progress {
    const secs = (performance.now() - this.start) / 1000;
    const rate = secs > 0 ? this.done / secs : 0;
    const left = this.total - this.resumed - this.done;
    return {
      phase: this.phase,
      item,
      bytesDone: this.resumed + this.done,
      bytesTotal: this.total,
      bytesResumed: this.resumed,
      rate,
      etaSeconds: rate > 0 ? Math.max(0, left / rate) : null,
      done: finished,
    };
  }
}

/** Where a progress printer writes: process.stderr, or anything with `write` (no Node types in the API). */
export interface ProgressStream {
  write(text: string): unknown;
  isTTY?: boolean;
  /** Terminal width (a TTY's WriteStream has it). */
  columns?: number;
}

/**
 * Redraws the current terminal line with `text`: back to column 0, the text cut to the terminal
 * width (a wrapped line cannot be redrawn in place), then erase to the end of the line (ESC [K),
 * so a shorter line leaves nothing of a longer one behind. `done` ends the line.
 */
export function redrawLine(stream: ProgressStream, text: string, done = false): void {
  const width = Math.max(20, (stream.columns ?? 100) - 1);
  const fitted = text.length <= width ? text : text.slice(0, width - 1) + "…";
  stream.write(`\r${fitted}\x1b[K${done ? "\n" : ""}`);
}

/** An onProgress callback that renders to `stream` (default stderr): a bar on a TTY, JSON lines otherwise. */
export function progressPrinter(stream: ProgressStream = process.stderr, opts: { tty?: boolean; intervalMs?: number } = {}): (p: Progress) => void {
  const tty = opts.tty ?? !!stream.isTTY;
  const interval = opts.intervalMs ?? 250;
  let last = 0;
  return (p) => {
    const t = performance.now();
    if (!p.done && t - last < interval) return;
    last = t;
    if (!tty) {
      stream.write(JSON.stringify({ ...p, rate: Math.round(p.rate), etaSeconds: p.etaSeconds === null ? null : Math.round(p.etaSeconds) }) + "\n");
      return;
    }
    const width = 30;
    const frac = p.bytesTotal > 0 ? p.bytesDone / p.bytesTotal : 1;
    const bar = "#".repeat(Math.round(frac * width)).padEnd(width, ".");
    const eta = p.etaSeconds === null ? "--" : `${Math.round(p.etaSeconds)}s`;
    redrawLine(stream, `${p.phase} [${bar}] ${(frac * 100).toFixed(1)}% ${formatBytes(p.bytesDone)}/${formatBytes(p.bytesTotal)} ${formatBytes(p.rate)}/s ETA ${eta} ${p.item}`, p.done);
  };
}
