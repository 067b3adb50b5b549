/**
 * Byte-pair merge of one piece, as tiktoken's `byte_pair_encode`: repeatedly merge the adjacent
 * pair whose concatenated bytes have the lowest rank (ties: leftmost), until no concatenation is a
 * token. Pieces under 100 bytes use tiktoken's linear scan; longer ones a heap ordered by
 * (rank, start) with lazy invalidation, which yields the same merges in the same order without
 * the quadratic cost on long pieces (openai/tiktoken#195).
 */
import type { RankTable } from "./rank-table.js";

export const HEAP_THRESHOLD = 100;
const NONE = 0x7fffffff;

/** Appends the ranks of bytes[start, end) to out (or only counts them when out is null). */
export function bytePairEncode(table: RankTable, bytes: Uint8Array, start: number, end: number, out: number[] | null): number {
  const whole = table.get(bytes, start, end);
  if (whole >= 0) {
    if (out) out.push(whole);
    return 1;
  }
  return end - start < HEAP_THRESHOLD
    ? linearMerge(table, bytes, start, end, out)
    : heapMerge(table, bytes, start, end, out);
}

/** tiktoken's `_byte_pair_merge`: parts hold (start, rank of the pair starting there). */
function linearMerge(table: RankTable, bytes: Uint8Array, start: number, end: number, out: number[] | null): number {
  const n = end - start;
  const pos: number[] = new Array(n + 1);
  const rank: number[] = new Array(n + 1);
  for (let i = 0; i <= n; i++) pos[i] = start + i;
  for (let i = 0; i < n - 1; i++) rank[i] = rankOr(table, bytes, pos[i], pos[i + 2]);
  rank[n - 1] = NONE;
  rank[n] = NONE;
  let count = n + 1; // number of boundaries
  for (;;) {
    let best = NONE;
    let at = -1;
    for (let i = 0; i < count - 1; i++) {
      if (rank[i] < best) {
        best = rank[i];
        at = i;
      }
    }
    if (at < 0) break;
    // Remove boundary at+1, then refresh the two pairs that changed.
    pos.splice(at + 1, 1);
    rank.splice(at + 1, 1);
    count--;
    rank[at] = at + 2 < count ? rankOr(table, bytes, pos[at], pos[at + 2]) : NONE;
    if (at > 0) rank[at - 1] = rankOr(table, bytes, pos[at - 1], pos[at + 1]);
  }
  for (let i = 0; i < count - 1; i++) {
    if (out) out.push(table.get(bytes, pos[i], pos[i + 1]));
  }
  return count - 1;
}

function rankOr(table: RankTable, bytes: Uint8Array, a: number, b: number): number {
  const r = table.get(bytes, a, b);
  return r < 0 ? NONE : r;
}

/** Heap merge over a linked list of parts; identical output to linearMerge. */
function heapMerge(table: RankTable, bytes: Uint8Array, start: number, end: number, out: number[] | null): number {
  const n = end - start;
  const next = new Int32Array(n);
  const prev = new Int32Array(n);
  const pairRank = new Int32Array(n); // rank of part i joined with its successor, NONE if none
  const alive = new Uint8Array(n).fill(1);
  for (let i = 0; i < n; i++) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  const partEnd = (i: number) => (next[i] < 0 ? n : next[i]);
  // Ordered by (rank, start): ties pop leftmost first.
  const heap = new PairHeap();
  for (let i = 0; i + 1 < n; i++) {
    const r = table.get(bytes, start + i, start + i + 2);
    pairRank[i] = r < 0 ? NONE : r;
    if (r >= 0) heap.push(r, i);
  }
  pairRank[n - 1] = NONE;
  while (heap.size > 0) {
    const r = heap.topRank();
    const i = heap.pop();
    if (!alive[i] || pairRank[i] !== r) continue; // stale entry
    const j = next[i];
    // Merge i and j.
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    // Refresh pair (i, next) and (prev, i).
    if (next[i] >= 0) {
      const nr = table.get(bytes, start + i, start + partEnd(next[i]));
      pairRank[i] = nr < 0 ? NONE : nr;
      if (nr >= 0) heap.push(nr, i);
    } else pairRank[i] = NONE;
    const p = prev[i];
    if (p >= 0) {
      const pr = table.get(bytes, start + p, start + partEnd(i));
      pairRank[p] = pr < 0 ? NONE : pr;
      if (pr >= 0) heap.push(pr, p);
    }
  }
  let count = 0;
  for (let i = 0; i >= 0; i = next[i]) {
    if (out) out.push(table.get(bytes, start + i, start + partEnd(i)));
    count++;
  }
  return count;
}

/** A binary min-heap of (rank, position) pairs in two parallel arrays, ordered lexicographically. */
class PairHeap {
  private ranks: number[] = [];
  private pos: number[] = [];
  get size(): number {
    return this.ranks.length;
  }
  topRank(): number {
    return this.ranks[0];
  }
  private less(r1: number, p1: number, r2: number, p2: number): boolean {
    return r1 < r2 || (r1 === r2 && p1 < p2);
  }
  push(r: number, p: number): void {
    const R = this.ranks;
    const P = this.pos;
    let i = R.length;
    R.push(r);
    P.push(p);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (!this.less(r, p, R[up], P[up])) break;
      R[i] = R[up];
      P[i] = P[up];
      i = up;
    }
    R[i] = r;
    P[i] = p;
  }
  /** Removes the minimum; returns its position. */
  pop(): number {
    const R = this.ranks;
    const P = this.pos;
    const top = P[0];
    const r = R.pop() as number;
    const p = P.pop() as number;
    const n = R.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        let c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && this.less(R[c + 1], P[c + 1], R[c], P[c])) c++;
        if (!this.less(R[c], P[c], r, p)) break;
        R[i] = R[c];
        P[i] = P[c];
        i = c;
      }
      R[i] = r;
      P[i] = p;
    }
    return top;
  }
}

/** Test hook: the heap merge on any piece, without the whole-piece shortcut. */
export function heapMergeForTest(table: RankTable, bytes: Uint8Array, start: number, end: number, out: number[]): number {
  return heapMerge(table, bytes, start, end, out);
}

/** Test hook: the linear merge on any piece, without the whole-piece shortcut. */
export function linearMergeForTest(table: RankTable, bytes: Uint8Array, start: number, end: number, out: number[]): number {
  return linearMerge(table, bytes, start, end, out);
}
