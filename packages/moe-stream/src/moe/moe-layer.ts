/**
 * One MoE layer streamed from the expert store:
 *
 *   K3 (latent MoE):  u = W↓ x;  r = Σ_i w_i E_i(u);  y = W↑ RMSNorm(r) + Shared(x)      (SiTU-GLU)
 *   48B (plain MoE):  y = Σ_i w_i E_i(x) + Shared(x)                                     (SiLU-GLU)
 *
 * w_i already carries routed_scaling_factor (see router.ts). Shared experts are unweighted.
 *
 * Chunk-union: for T tokens, each unique expert is read ONCE and run over all the tokens routed
 * to it as one batch. Experts are computed in completion order (expert j while j+1... are still
 * being read), each into its own output rows; the weighted sum then runs per token in router
 * order. So the output does not depend on read order, cache state, or how tokens are chunked:
 * forward(x, T) equals T calls of forward(x_t, 1) bit for bit.
 */
import { GluMlp, rmsNorm, type GluActivation, type Linear, type SituBetas } from "@k3/dense";
import { CancelledError, ChecksumError, ExpertReadError, MoeStreamError } from "../errors.js";
import { denseExperts, situBetasFor, type ExpertCompute } from "./expert-compute.js";
import type { ExpertHandle, ExpertRequest } from "../store/expert-store.js";
import type { Router, Routing } from "./router.js";
import { procIo } from "../io/io-stats.js";
import { native } from "../native.js";
import { Mxfp4Error } from "@k3/mxfp4";
import { Scratch } from "@k3/dense";

/**
 * Work buffers of MoeLayer.forward, shared by every layer (the per-(token, rank) expert outputs
 * alone are 14.7 MB at K3's widths x 64 tokens). A forward that starts while another one is
 * running (the layer is async) takes fresh buffers instead.
 */
const sharedScratch = new Scratch();

/** Row-index buffers of runGroup, grown on demand (runGroup never awaits, so one pair serves every layer). */
class IntBuffers {
  private readonly bufs: Int32Array[] = [];
  get(which: number, n: number): Int32Array {
    let b = this.bufs[which];
    if (!b || b.length < n) this.bufs[which] = b = new Int32Array(Math.max(n, 2 * (b?.length ?? 0)));
    return b.subarray(0, n);
  }
}
const groupRows = new IntBuffers();
let sharedScratchBusy = false;

/** Where experts come from: an ExpertStore, or anything with the same request(). */
export interface ExpertProvider {
  request(layer: number, ids: ArrayLike<number>): ExpertRequest;
  prefetch?(layer: number, ids: ArrayLike<number>): number;
  stats?(): { ioBusyNs: number; bytesRequested: number; deviceBytes: number };
}

export interface SharedExperts {
  gate: Linear;
  up: Linear;
  down: Linear;
}

export interface LatentProjection {
  /** routed_expert_down_proj [latent, hidden]. */
  down: Linear;
  /** routed_expert_up_proj [hidden, latent]. */
  up: Linear;
  /** routed_expert_norm [latent], applied once to the weighted sum. */
  norm: Float32Array;
  eps: number;
}

export interface MoeLayerOptions {
  layer: number;
  hidden: number;
  router: Router;
  experts: ExpertProvider;
  compute: ExpertCompute;
  /** K3's latent projections; absent for the 48B's plain MoE. */
  latent?: LatentProjection;
  shared?: SharedExperts;
  /** Shared-expert activation (K3 situ, 48B silu). */
  activation: GluActivation;
  /** SiTU bounds of the shared experts (config activation_situ_beta / _linear_beta; required for SiTU); give the routed compute the same. */
  situBetas?: SituBetas;
  /**
   * What a routed expert whose bytes cannot be had does to forward(): "fail" (default) rejects
   * with the read's error and produces no output; "drop" leaves that expert out of the mix (its
   * weighted term is zero, the other weights are NOT renormalised), lists it in
   * lastStats.dropped and goes on: the reference engine's behaviour, whose run then exits 4.
   * Only a failed read (I/O error, short read: ExpertReadError), a checksum mismatch
   * (ChecksumError) or bytes the kernel refuses (an MXFP4 0xFF scale: Mxfp4Error) drop an expert;
   * any other error still rejects.
   */
  onExpertError?: "fail" | "drop";
  /**
   * Also read /proc/self/io around every forward (lastStats.procReadBytes): two file reads per
   * forward, ~10 us each, so off unless asked for (a check that reads really reach the device).
   */
  countProcReads?: boolean;
}

/** A routed expert left out of one forward() under onExpertError: "drop". */
export interface DroppedExpert {
  layer: number;
  expert: number;
  /** Token positions (within the forward's T) that had selected it. */
  tokens: number;
  reason: string;
}

/** What one forward() did. Times in ns. */
export interface MoeForwardStats {
  tokens: number;
  /** Expert selections (tokens x k) and unique experts read or found (the union). */
  selections: number;
  uniqueExperts: number;
  residentHits: number;
  prefetchHits: number;
  /** Experts' own bytes asked from disk, and bytes the device transferred. */
  bytesRequested: number;
  deviceBytes: number;
  /** /proc/self/io read_bytes over the forward (whole process: other readers count too); null unless countProcReads. */
  procReadBytes: number | null;
  /** Lookahead reads the forward's `prefetch` issued (ExpertProvider.prefetch's count). */
  prefetchIssued: number;
  wallNs: number;
  /** Wall time with a read in flight. */
  ioNs: number;
  /** Time spent computing (router, projections, experts, shared). */
  cpuNs: number;
  /** The part of cpuNs spent on routed experts (gathering their rows, their matmuls, scattering); the rest is the layer's trunk. */
  expertCpuNs: number;
  /** Time the compute loop sat waiting for a read, and its share of the wall time. */
  ioWaitNs: number;
  ioWaitShare: number;
  /** (t_io + t_cpu - t_wall) / min(t_io, t_cpu); null when either is 0. */
  overlap: number | null;
  routing: Routing;
  /** Experts dropped under onExpertError: "drop" (always empty under "fail"). */
  dropped: DroppedExpert[];
}

const now = () => process.hrtime.bigint();

/** MoeLayer.forward's options. */
export interface MoeForwardOptions {
  /** Experts of a later layer to read at low priority once this layer's misses are queued. */
  prefetch?: { layer: number; ids: ArrayLike<number> };
  /** Where y goes (else a fresh array). */
  out?: Float32Array;
  /** Asked before routing, before the routed experts, between parts of a group of experts and after each group: true rejects the forward with a CancelledError. */
  cancelled?: () => boolean;
  /** With `cancelled`: token rows x expert bytes computed between two questions inside a group (default 2^34: ~490 rows of a K3 expert). */
  cancelEvery?: number;
}

/*
 * Default work (token rows x expert bytes) between two looks at `cancelled` inside a group: the first
 * group of a large chunk is every cached expert at once (K3 at a 1024-token chunk: ~320 experts; a
 * cancel waited up to 5.4 s for it and the shared experts, engine bench/cancel-latency.bench.ts).
 * 2^34 is ~490 rows of a K3 expert (35 MB): 65 GFLOP, ~0.3 s at the ~250 GFLOP/s the exact GEMM runs
 * on two cores here.
 */
const CANCEL_EVERY = 2 ** 34;
/** Tokens of the shared experts between two questions: K3's two (6144 wide) take 17 GFLOP per 64 tokens, ~0.07 s at ~250 GFLOP/s. */
const SHARED_PIECE = 64;

/** The group in consecutive parts of at most `every` work each (one expert at least); whole when every is null. */
function cancelParts(group: ExpertHandle[], users: Map<number, number[]>, every: number | null): ExpertHandle[][] {
  if (every === null) return [group];
  const parts: ExpertHandle[][] = [];
  let part: ExpertHandle[] = [];
  let work = 0;
  for (const h of group) {
    const w = users.get(h.id)!.length * h.bytes.byteLength;
    if (part.length > 0 && work + w > every) parts.push(part), (part = []), (work = 0);
    part.push(h);
    work += w;
  }
  if (part.length > 0) parts.push(part);
  return parts;
}

export class MoeLayer {
  readonly opts: MoeLayerOptions;
  lastStats: MoeForwardStats | null = null;
  /** The shared experts as one GLU MLP (null without them), with the layer's activation and bounds. */
  private readonly sharedMlp: GluMlp | null;
  private readonly situBetas: SituBetas;

  constructor(opts: MoeLayerOptions) {
    const inDim = opts.latent ? opts.latent.down.rows : opts.hidden;
    if (opts.compute.inDim !== inDim)
      throw new MoeStreamError(`layer ${opts.layer}: experts take ${opts.compute.inDim} inputs but the ${opts.latent ? "latent" : "hidden"} width is ${inDim}`);
    if (opts.router.weight.cols !== opts.hidden)
      throw new MoeStreamError(`layer ${opts.layer}: router takes ${opts.router.weight.cols} inputs, hidden is ${opts.hidden}`);
    if (opts.latent && (opts.latent.down.cols !== opts.hidden || opts.latent.up.rows !== opts.hidden || opts.latent.up.cols !== inDim || opts.latent.norm.length !== inDim))
      throw new MoeStreamError(`layer ${opts.layer}: latent projections do not match hidden ${opts.hidden} / latent ${inDim}`);
    this.situBetas = situBetasFor(opts.activation, opts.situBetas, `layer ${opts.layer}`);
    this.sharedMlp = opts.shared ? new GluMlp(opts.shared.gate, opts.shared.up, opts.shared.down, opts.activation, this.situBetas) : null;
    this.opts = opts;
  }

  /**
   * The experts `next` (a later MoE layer) would pick for x: its router applied ahead of time.
   * In a residual network the next layer's input is close to this one's, so this predicts most of
   * its experts; pass the result as `forward(..., { prefetch })` to read them while this layer computes.
   */
  static predict(next: MoeLayer, x: Float32Array, T: number): { layer: number; ids: number[] } {
    const r = next.opts.router.route(x, T);
    return { layer: next.opts.layer, ids: [...new Set(r.ids)] };
  }

  /**
   * y [T, hidden] for x [T, hidden]. Rejects (never returns partial output) if any expert read fails.
   * `prefetch`: experts of a later layer to read at low priority once this layer's misses are queued.
   * `cancelled`: asked before routing, between pieces of the shared experts, once they are done, after
   * each group of experts (as reads complete) and between parts of a large group; once it says true the
   * forward rejects with a CancelledError (every expert slot given back), so a long prefill chunk (all
   * 896 experts read) stops within one part (~490 rows of a K3 expert) instead of at the end of the layer.
   */
  async forward(x: Float32Array, T: number, opts: MoeForwardOptions = {}): Promise<Float32Array> {
    const { hidden } = this.opts;
    if (!Number.isInteger(T) || T < 1 || x.length < T * hidden)
      throw new MoeStreamError(`layer ${this.opts.layer}: x holds ${x.length} values, need T=${T} x hidden ${hidden}`);
    if (opts.out !== undefined && opts.out.length < T * hidden)
      throw new MoeStreamError(`layer ${this.opts.layer}: out holds ${opts.out.length} values, need T=${T} x hidden ${hidden}`);
    if (opts.cancelEvery !== undefined && !(opts.cancelEvery > 0 && Number.isFinite(opts.cancelEvery)))
      throw new MoeStreamError(`layer ${this.opts.layer}: cancelEvery ${opts.cancelEvery}: expected a positive number of token rows x expert bytes`, "input");
    const own = !sharedScratchBusy;
    if (own) sharedScratchBusy = true;
    try {
      return await this.run(x, T, opts, own ? sharedScratch : new Scratch());
    } finally {
      if (own) sharedScratchBusy = false;
    }
  }

  private async run(x: Float32Array, T: number, opts: MoeForwardOptions, sc: Scratch): Promise<Float32Array> {
    const { hidden, router, latent, compute } = this.opts;
    const t0 = now();
    const before = this.opts.experts.stats?.();
    const proc0 = this.opts.countProcReads ? procIo().readBytes : 0;
    let cpu = 0n;
    let expertCpu = 0n;
    let wait = 0n;

    if (opts.cancelled?.()) throw new CancelledError(`layer ${this.opts.layer}: cancelled before routing`);
    let c0 = now();
    const routing = router.route(x, T);
    const k = routing.k;
    const inDim = compute.inDim;
    cpu += now() - c0;

    // The union: unique experts in first-use order, each with the (token, rank) pairs it serves.
    const users = new Map<number, number[]>();
    for (let i = 0; i < T * k; i++) {
      const id = routing.ids[i];
      const list = users.get(id);
      if (list) list.push(i);
      else users.set(id, [i]);
    }
    const ids = [...users.keys()];
    const perSlot = sc.get("perSlot", T * k * compute.outDim); // E_i(u_t) for every (t, rank); every slot is written (a dropped expert's with zeros)
    let residentHits = 0;
    let prefetchHits = 0;

    const req = this.opts.experts.request(this.opts.layer, ids);
    const prefetchIssued = opts.prefetch && this.opts.experts.prefetch ? this.opts.experts.prefetch(opts.prefetch.layer, opts.prefetch.ids) : 0;
    let u: Float32Array;
    let shared: Float32Array | null;
    const done = new Set<ExpertHandle>();
    const dropped: DroppedExpert[] = [];
    const drop = this.opts.onExpertError === "drop";
    const outDim = compute.outDim;
    // Every expert as it settles (completion order). Whatever has arrived when the loop looks is
    // computed as one group: one native call for all of a token's cached experts.
    const settled: Settled[] = [];
    let wake: (() => void) | null = null;
    req.handles.forEach((p, i) =>
      p.then(
        (handle) => (settled.push({ id: ids[i], handle }), wake?.()),
        (error) => (settled.push({ id: ids[i], error }), wake?.()),
      ),
    );
    try {
      // With the reads in flight: the latent projection and the shared experts (neither needs an
      // expert), so that compute runs while the first experts arrive. The sums below keep their order.
      c0 = now();
      u = latent ? latent.down.apply(x, T, sc.get("u", T * inDim)) : x.subarray(0, T * hidden);
      shared = this.opts.shared ? this.sharedForward(x, T, sc, opts.cancelled) : null;
      cpu += now() - c0;
      if (opts.cancelled?.()) throw new CancelledError(`layer ${this.opts.layer}: cancelled before the routed experts`);
      for (let given = 0; given < ids.length; ) {
        if (settled.length === given) {
          const w0 = now();
          await new Promise<void>((r) => (wake = r));
          wake = null;
          wait += now() - w0;
          continue;
        }
        const group = settled.slice(given);
        given = settled.length;
        // A failure rejects before this group's handles are taken (the catch below releases them).
        for (const s of group) if (!s.handle && !(drop && droppable(s.error))) throw s.error;
        const ok: ExpertHandle[] = [];
        for (const { id, handle: h, error } of group) {
          if (!h) {
            dropped.push({ layer: this.opts.layer, expert: id, tokens: users.get(id)!.length, reason: (error as Error).message });
            continue;
          }
          done.add(h);
          if (h.source === "resident") residentHits++;
          else if (h.source === "prefetched") prefetchHits++;
          ok.push(h);
        }
        c0 = now();
        const parts = cancelParts(ok, users, opts.cancelled ? opts.cancelEvery ?? CANCEL_EVERY : null);
        let ran = given - group.length;
        try {
          for (let p = 0; p < parts.length; p++) {
            if (p > 0 && opts.cancelled?.()) throw new CancelledError(`layer ${this.opts.layer}: cancelled after ${ran} of ${ids.length} experts`);
            if (compute.runMany) this.runGroup(parts[p], users, k, u, perSlot, drop, dropped);
            else for (const h of parts[p]) this.runOne(h, users.get(h.id)!, k, u, perSlot, sc, drop, dropped);
            ran += parts[p].length;
          }
        } finally {
          for (const h of ok) h.release();
          const spent = now() - c0;
          cpu += spent;
          expertCpu += spent;
        }
        if (given < ids.length && opts.cancelled?.()) throw new CancelledError(`layer ${this.opts.layer}: cancelled after ${given} of ${ids.length} experts`);
      }
    } catch (err) {
      // Give back every slot: handles already used, and those that arrive after the failure.
      for (const p of req.handles) p.then((h) => { if (!done.has(h)) h.release(); }, () => undefined);
      throw err;
    }

    c0 = now();
    // A dropped expert adds nothing: its slots hold zeros (the buffer is reused, not fresh).
    for (const d of dropped) for (const i of users.get(d.expert)!) perSlot.fill(0, i * outDim, (i + 1) * outDim);
    // Weighted sum per token, in router order (fixed, so the result is independent of read order).
    // Native, as are the shared expert's addition and the copy: a run() called a few dozen times per
    // token never gets its loops optimised, and a 2304-wide JS loop here cost ~1.4 ms per layer.
    const out = opts.out ? opts.out.subarray(0, T * hidden) : new Float32Array(T * hidden);
    if (latent) {
      const r = sc.get("r", T * outDim);
      native.moeMix(perSlot, routing.weights, T, k, outDim, r, null);
      rmsNorm(r, latent.norm, latent.eps, r, outDim);
      latent.up.apply(r, T, out);
      if (shared) native.moeAdd(out, shared, out.length);
    } else {
      // out = (sum) + shared, each element rounded after the sum as before.
      native.moeMix(perSlot, routing.weights, T, k, outDim, out, shared);
    }
    cpu += now() - c0;

    const after = this.opts.experts.stats?.();
    const wallNs = Number(now() - t0);
    const ioNs = before && after ? after.ioBusyNs - before.ioBusyNs : 0;
    const cpuNs = Number(cpu);
    this.lastStats = {
      tokens: T,
      selections: T * k,
      uniqueExperts: ids.length,
      residentHits,
      prefetchHits,
      bytesRequested: before && after ? after.bytesRequested - before.bytesRequested : 0,
      deviceBytes: before && after ? after.deviceBytes - before.deviceBytes : 0,
      wallNs,
      ioNs,
      cpuNs,
      expertCpuNs: Number(expertCpu),
      procReadBytes: this.opts.countProcReads ? procIo().readBytes - proc0 : null,
      prefetchIssued,
      ioWaitNs: Number(wait),
      ioWaitShare: wallNs > 0 ? Number(wait) / wallNs : 0,
      overlap: overlapOf(ioNs, cpuNs, wallNs),
      routing,
      dropped,
    };
    return out;
  }

  /** One native call for a group of ready experts: each reads its tokens' rows of u, writes its slots. */
  private runGroup(hs: readonly ExpertHandle[], users: Map<number, number[]>, k: number, u: Float32Array, perSlot: Float32Array, drop: boolean, dropped: DroppedExpert[]): void {
    if (hs.length === 0) return;
    let rows = 0;
    for (const h of hs) rows += users.get(h.id)!.length;
    const xRow = groupRows.get(0, rows);
    const yRow = groupRows.get(1, rows);
    const items = hs.map((h) => ({ bytes: h.bytes, location: h.location, rows: users.get(h.id)!.length }));
    let r = 0;
    for (const h of hs)
      for (const slot of users.get(h.id)!) {
        xRow[r] = Math.floor(slot / k);
        yRow[r++] = slot;
      }
    const failed = this.opts.compute.runMany!(items, u, xRow, perSlot, yRow);
    // Refused bytes (an MXFP4 0xFF scale): as runOne, fail on the first or drop each (slots zeroed below).
    for (const f of failed ?? []) {
      if (!drop || !droppable(f.error)) throw f.error;
      dropped.push({ layer: this.opts.layer, expert: hs[f.index].id, tokens: items[f.index].rows, reason: f.error.message });
    }
  }

  /** One expert through ExpertCompute.run (computes without runMany: custom MXFP4 kernels, test doubles). */
  private runOne(h: ExpertHandle, list: number[], k: number, u: Float32Array, perSlot: Float32Array, sc: Scratch, drop: boolean, dropped: DroppedExpert[]): void {
    const { compute } = this.opts;
    const inDim = compute.inDim;
    const X = sc.get("X", list.length * inDim);
    const Y = sc.get("Y", list.length * compute.outDim);
    for (let b = 0; b < list.length; b++) {
      const t = Math.floor(list[b] / k);
      X.set(u.subarray(t * inDim, (t + 1) * inDim), b * inDim);
    }
    try {
      compute.run(h.bytes, h.location, X, list.length, Y, h.readId);
    } catch (err) {
      if (!drop || !droppable(err)) throw err;
      dropped.push({ layer: this.opts.layer, expert: h.id, tokens: list.length, reason: (err as Error).message });
      return;
    }
    for (let b = 0; b < list.length; b++) perSlot.set(Y.subarray(b * compute.outDim, (b + 1) * compute.outDim), list[b] * compute.outDim);
  }

  /**
   * The shared experts over x [T, hidden]. With `cancelled`, in SHARED_PIECE-token pieces with a
   * question between them (K3's two shared experts at a 1024-token chunk: 270 GFLOP, ~1 s at ~250
   * GFLOP/s); every row is computed alone, so the pieces give the bits of one call.
   */
  private sharedForward(x: Float32Array, T: number, sc: Scratch, cancelled?: () => boolean): Float32Array {
    const { hidden } = this.opts;
    const out = sc.get("shared", T * hidden);
    const piece = cancelled ? SHARED_PIECE : T;
    for (let t0 = 0; t0 < T; t0 += piece) {
      if (t0 > 0 && cancelled!()) throw new CancelledError(`layer ${this.opts.layer}: cancelled in the shared experts`);
      const n = Math.min(piece, T - t0);
      this.sharedRows(x.subarray(t0 * hidden, (t0 + n) * hidden), n, out.subarray(t0 * hidden, (t0 + n) * hidden), sc);
    }
    return out;
  }

  private sharedRows(x: Float32Array, T: number, out: Float32Array, sc: Scratch): void {
    const s = this.opts.shared!;
    const inter = s.gate.rows;
    const { hidden } = this.opts;
    if (sharedIsNative(s, hidden)) {
      // The shared expert as a one-expert batch of the native kernel (two dispatches, not four).
      const rows = groupRows.get(0, T);
      for (let t = 0; t < T; t++) rows[t] = t;
      denseExperts(
        [s.gate.raw, s.up.raw, s.down.raw], oneExpert(T), hidden, inter, hidden, s.gate.dtype === "BF16", this.opts.activation,
        this.situBetas, x, rows, out, rows, sc.get("sharedWork", T * (2 * hidden + 2 * inter)),
      );
    } else this.sharedMlp!.forward(x, T, out, sc);
  }
}

/** One expert of a request as it settles: its handle, or the error its read ended with. */
interface Settled {
  id: number;
  handle?: ExpertHandle;
  error?: unknown;
}

/** True when the shared expert's matrices can go to the native kernel as they are (one dtype, dense rows). */
function sharedIsNative(s: SharedExperts, hidden: number): boolean {
  const dt = s.gate.dtype;
  const exact = (m: Linear, rows: number, cols: number) => m.dtype === dt && m.rows === rows && m.cols === cols && m.ld === cols && m.raw.length === rows * cols;
  const I = s.gate.rows;
  return exact(s.gate, I, hidden) && exact(s.up, I, hidden) && exact(s.down, hidden, I);
}

const rowsOfOne = new Int32Array(1);
/** Row counts of a one-expert batch of T rows. */
function oneExpert(T: number): Int32Array {
  rowsOfOne[0] = T;
  return rowsOfOne;
}

/** Errors that mean "this expert's bytes cannot be had", as opposed to a bug or a bad setup. */
function droppable(err: unknown): boolean {
  return err instanceof ExpertReadError || err instanceof ChecksumError || err instanceof Mxfp4Error;
}

/** Compute/I-O overlap: 1 = the shorter of the two was fully hidden behind the other, 0 = serial. */
function overlapOf(ioNs: number, cpuNs: number, wallNs: number): number | null {
  const m = Math.min(ioNs, cpuNs);
  if (m <= 0) return null;
  return Math.max(0, Math.min(1, (ioNs + cpuNs - wallNs) / m));
}
