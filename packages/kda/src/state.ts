/**
 * The state a KDA layer carries between calls: three conv tails (last K-1 pre-conv inputs of q, k,
 * v, oldest first) and the recurrent state S [H][dk][dv] (fp32, or bf16 bits). `save()` writes a
 * checked header + the raw bytes, so a restored state continues bit for bit.
 */
import { checkConfig, type KdaConfig } from "./config.js";
import { KdaError } from "./errors.js";

export type StateDtype = "f32" | "bf16";

const MAGIC = "K3KDAST1";
const VERSION = 1;
const HEADER_BYTES = 64;

/** FNV-1a over the payload: catches truncation-free corruption of a saved state. */
function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193) >>> 0;
  return h >>> 0;
}

export class KdaState {
  readonly config: KdaConfig;
  readonly dtype: StateDtype;
  /** Conv tails [(K-1)][H*dk], oldest first. */
  readonly convQ: Float32Array;
  readonly convK: Float32Array;
  readonly convV: Float32Array;
  /** S [H][dk][dv]: Float32Array, or Uint16Array of bf16 bits. */
  readonly S: Float32Array | Uint16Array;
  /** Tokens consumed so far. */
  tokens = 0;

  constructor(config: KdaConfig, dtype: StateDtype = "f32") {
    this.config = checkConfig(config);
    if (dtype !== "f32" && dtype !== "bf16") throw new KdaError("state", `state dtype must be 'f32' or 'bf16', got ${JSON.stringify(dtype)}`);
    this.dtype = dtype;
    const P = config.numHeads * config.headDim;
    const tail = (config.convKernel - 1) * P;
    this.convQ = new Float32Array(tail);
    this.convK = new Float32Array(tail);
    this.convV = new Float32Array(tail);
    const n = config.numHeads * config.headDim * config.headDim;
    this.S = dtype === "f32" ? new Float32Array(n) : new Uint16Array(n);
  }

  /** Bytes held (conv tails + S). */
  get byteLength(): number {
    return (this.convQ.length + this.convK.length + this.convV.length) * 4 + this.S.byteLength;
  }

  /** Back to the start of a sequence. */
  reset(): void {
    this.convQ.fill(0);
    this.convK.fill(0);
    this.convV.fill(0);
    this.S.fill(0);
    this.tokens = 0;
  }

  /** An independent copy. */
  clone(): KdaState {
    return new KdaState(this.config, this.dtype).copyFrom(this);
  }

  /**
   * Overwrites this state with `other`'s (same shape and dtype), reusing this state's memory: a
   * checkpoint taken before speculative tokens and restored when they are rejected.
   */
  copyFrom(other: KdaState): this {
    if (other.dtype !== this.dtype || other.S.length !== this.S.length || other.convQ.length !== this.convQ.length)
      throw new KdaError("state", `copyFrom: a ${other.dtype} state of ${other.S.length} + ${other.convQ.length} values does not fit this ${this.dtype} one of ${this.S.length} + ${this.convQ.length}`);
    this.convQ.set(other.convQ);
    this.convK.set(other.convK);
    this.convV.set(other.convV);
    this.S.set(other.S as never);
    this.tokens = other.tokens;
    return this;
  }

  /** Header (magic, version, config fingerprint, dtype, tokens, payload checksum) + raw bytes. */
  save(): Uint8Array {
    const parts = [this.convQ, this.convK, this.convV, this.S];
    const payloadBytes = parts.reduce((a, p) => a + p.byteLength, 0);
    const out = new Uint8Array(HEADER_BYTES + payloadBytes);
    let off = HEADER_BYTES;
    for (const p of parts) {
      out.set(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), off);
      off += p.byteLength;
    }
    const dv = new DataView(out.buffer);
    for (let i = 0; i < 8; i++) out[i] = MAGIC.charCodeAt(i);
    const c = this.config;
    dv.setUint32(8, VERSION, true);
    dv.setUint32(12, HEADER_BYTES, true);
    dv.setUint32(16, c.hidden, true);
    dv.setUint32(20, c.numHeads, true);
    dv.setUint32(24, c.headDim, true);
    dv.setUint32(28, c.convKernel, true);
    dv.setUint32(32, c.gate === "k3-lowerbound" ? 0 : 1, true);
    dv.setUint32(36, this.dtype === "f32" ? 0 : 1, true);
    dv.setFloat64(40, this.tokens, true);
    dv.setFloat64(48, payloadBytes, true);
    dv.setUint32(56, fnv1a(out.subarray(HEADER_BYTES)), true);
    return out;
  }

  /** Restores a saved state for `config`; refuses another config, a bad header, truncation or corruption. */
  static load(bytes: Uint8Array, config: KdaConfig): KdaState {
    if (!(bytes instanceof Uint8Array)) throw new KdaError("state", "KdaState.load: bytes must be a Uint8Array");
    if (bytes.length < HEADER_BYTES) throw new KdaError("state", `KdaState.load: ${bytes.length} bytes is shorter than the ${HEADER_BYTES}-byte header`);
    for (let i = 0; i < 8; i++)
      if (bytes[i] !== MAGIC.charCodeAt(i)) throw new KdaError("state", `KdaState.load: bad magic (not a saved KDA state; expected '${MAGIC}')`);
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const version = dv.getUint32(8, true);
    if (version !== VERSION) throw new KdaError("state", `KdaState.load: version ${version}, expected ${VERSION}`);
    if (dv.getUint32(12, true) !== HEADER_BYTES) throw new KdaError("state", `KdaState.load: header size ${dv.getUint32(12, true)}, expected ${HEADER_BYTES}`);
    const c = checkConfig(config);
    const fields: Array<[string, number, number]> = [
      ["hidden", dv.getUint32(16, true), c.hidden],
      ["numHeads", dv.getUint32(20, true), c.numHeads],
      ["headDim", dv.getUint32(24, true), c.headDim],
      ["convKernel", dv.getUint32(28, true), c.convKernel],
      ["gate", dv.getUint32(32, true), c.gate === "k3-lowerbound" ? 0 : 1],
    ];
    for (const [name, saved, want] of fields)
      if (saved !== want) throw new KdaError("state", `KdaState.load: state was saved with ${name}=${saved}, config has ${want}`);
    const dtypeCode = dv.getUint32(36, true);
    if (dtypeCode > 1) throw new KdaError("state", `KdaState.load: unknown state dtype code ${dtypeCode}`);
    const state = new KdaState(c, dtypeCode === 0 ? "f32" : "bf16");
    const tokens = dv.getFloat64(40, true);
    if (!Number.isSafeInteger(tokens) || tokens < 0) throw new KdaError("state", `KdaState.load: bad token count ${tokens}`);
    const payload = dv.getFloat64(48, true);
    const expected = state.byteLength;
    if (payload !== expected) throw new KdaError("state", `KdaState.load: header says ${payload} payload bytes, this config needs ${expected}`);
    if (bytes.length !== HEADER_BYTES + expected)
      throw new KdaError("state", `KdaState.load: ${bytes.length} bytes, expected ${HEADER_BYTES + expected} (truncated or padded)`);
    if (fnv1a(bytes.subarray(HEADER_BYTES)) !== dv.getUint32(56, true)) throw new KdaError("state", "KdaState.load: payload checksum mismatch (corrupted state)");
    let off = bytes.byteOffset + HEADER_BYTES;
    // copy through a fresh aligned buffer (bytes may sit at any offset)
    const copy = (dst: Float32Array | Uint16Array) => {
      new Uint8Array(dst.buffer, dst.byteOffset, dst.byteLength).set(new Uint8Array(bytes.buffer, off, dst.byteLength));
      off += dst.byteLength;
    };
    copy(state.convQ);
    copy(state.convK);
    copy(state.convV);
    copy(state.S);
    state.tokens = tokens;
    return state;
  }
}
