// Writes small (tests) or K3-sized (bench) checkpoints in the released K3 layout: per MoE layer the
// trunk tensors, then the experts in LEXICOGRAPHIC id order (0, 1, 10, 100, ...) as in the real
// shards, each expert's six MXFP4 tensors adjacent. Offsets are unaligned, like the real files.
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";

export interface SynthSpec {
  dir: string;
  /** MoE layer numbers; one shard per layer. */
  layers: number[];
  experts: number;
  hidden: number;
  latent: number;
  inter: number;
  /** Also write trunk tensors for each layer (router, latent projections, shared experts, norms). */
  trunk?: boolean;
  /** Content: "pattern" (verifiable per byte) or "fast" (a repeated random block; for big benches). */
  content?: "pattern" | "fast";
}

export const PREFIX = "language_model.model.layers.";

interface T { name: string; dtype: string; shape: number[]; bytes: number; fill: (buf: Uint8Array) => void }

/** The byte at position p of a tensor with this seed (pattern mode). */
export function patternByte(seed: number, p: number): number {
  let x = (seed * 2654435761 + p * 40503 + ((p >>> 8) * 977)) >>> 0;
  x ^= x >>> 13;
  x = Math.imul(x, 0x5bd1e995) >>> 0;
  return (x ^ (x >>> 15)) & 0xff;
}

/** E8M0 scales stay in 118..125 (2^-9 .. 2^-2): never the 0xFF NaN code, so MXFP4 kernels accept them. */
export function scaleByte(seed: number, p: number): number {
  return 118 + (patternByte(seed, p) & 7);
}

/** The byte at position p of tensor `name` written with this seed (pattern mode). */
export function expectedByte(name: string, seed: number, p: number): number {
  return name.endsWith("weight_scale") ? scaleByte(seed, p) : patternByte(seed, p);
}

function fillPattern(seed: number, scale = false) {
  return (buf: Uint8Array) => {
    if (scale) for (let p = 0; p < buf.length; p++) buf[p] = scaleByte(seed, p);
    else for (let p = 0; p < buf.length; p++) buf[p] = patternByte(seed, p);
  };
}

let fastBlock: Uint8Array | null = null;
function fillFast(seed: number, scale = false) {
  return (buf: Uint8Array) => {
    if (scale) {
      for (let p = 0; p < buf.length; p++) buf[p] = 118 + (p % 8);
      return;
    }
    if (!fastBlock) {
      fastBlock = new Uint8Array(1 << 20);
      for (let i = 0; i < fastBlock.length; i++) fastBlock[i] = patternByte(7, i);
    }
    for (let at = 0; at < buf.length; at += fastBlock.length) buf.set(fastBlock.subarray(0, Math.min(fastBlock.length, buf.length - at)), at);
    // Stamp the seed so every tensor differs.
    const n = Math.min(8, buf.length);
    for (let i = 0; i < n; i++) buf[i] = (seed >>> ((i & 3) * 8)) & 0xff;
  };
}

export function expertSeed(layer: number, id: number, tensor: number): number {
  return ((layer * 4099 + id) * 8 + tensor) >>> 0;
}

export const EXPERT_TENSORS = ["w1.weight_packed", "w1.weight_scale", "w2.weight_packed", "w2.weight_scale", "w3.weight_packed", "w3.weight_scale"];

export function expertTensorShapes(latent: number, inter: number): Array<[string, number[]]> {
  return [
    ["w1.weight_packed", [inter, latent / 2]],
    ["w1.weight_scale", [inter, latent / 32]],
    ["w2.weight_packed", [latent, inter / 2]],
    ["w2.weight_scale", [latent, inter / 32]],
    ["w3.weight_packed", [inter, latent / 2]],
    ["w3.weight_scale", [inter, latent / 32]],
  ];
}

export function expertBytes(latent: number, inter: number): number {
  return expertTensorShapes(latent, inter).reduce((a, [, s]) => a + s[0] * s[1], 0);
}

function layerTensors(spec: SynthSpec, layer: number): T[] {
  const fill = spec.content === "fast" ? fillFast : fillPattern;
  const out: T[] = [];
  const p = `${PREFIX}${layer}.`;
  if (spec.trunk) {
    const bf = (name: string, shape: number[], s: number) => out.push({ name: p + name, dtype: "BF16", shape, bytes: shape.reduce((a, b) => a * b, 1) * 2, fill: fill(s) });
    out.push({ name: p + "block_sparse_moe.gate.e_score_correction_bias", dtype: "F32", shape: [spec.experts], bytes: spec.experts * 4, fill: fill(layer * 100 + 1) });
    bf("block_sparse_moe.gate.weight", [spec.experts, spec.hidden], layer * 100 + 2);
    bf("block_sparse_moe.routed_expert_down_proj.weight", [spec.latent, spec.hidden], layer * 100 + 3);
    bf("block_sparse_moe.routed_expert_norm.weight", [spec.latent], layer * 100 + 4);
    bf("block_sparse_moe.routed_expert_up_proj.weight", [spec.hidden, spec.latent], layer * 100 + 5);
    bf("block_sparse_moe.shared_experts.down_proj.weight", [spec.hidden, 2 * spec.inter], layer * 100 + 6);
    bf("block_sparse_moe.shared_experts.gate_proj.weight", [2 * spec.inter, spec.hidden], layer * 100 + 7);
    bf("block_sparse_moe.shared_experts.up_proj.weight", [2 * spec.inter, spec.hidden], layer * 100 + 8);
    bf("input_layernorm.weight", [spec.hidden], layer * 100 + 9);
    bf("post_attention_layernorm.weight", [spec.hidden], layer * 100 + 10);
  }
  const ids = Array.from({ length: spec.experts }, (_, i) => i).sort((a, b) => String(a).localeCompare(String(b)));
  for (const id of ids)
    expertTensorShapes(spec.latent, spec.inter).forEach(([name, shape], t) =>
      out.push({ name: `${p}block_sparse_moe.experts.${id}.${name}`, dtype: "U8", shape, bytes: shape[0] * shape[1], fill: fill(expertSeed(layer, id, t), name.endsWith("weight_scale")) }),
    );
  return out;
}

/** Writes one safetensors file from tensor descriptions, streaming the data. */
function writeShard(file: string, tensors: T[], extra: T[] = []): void {
  const all = [...extra, ...tensors];
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let at = 0;
  for (const t of all) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.bytes] };
    at += t.bytes;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - ((Buffer.byteLength(json) + 8) % 8)) % 8);
  const fd = openSync(file, "w");
  try {
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    writeSync(fd, len);
    writeSync(fd, Buffer.from(json));
    let buf = Buffer.alloc(0);
    for (const t of all) {
      if (buf.length < t.bytes) buf = Buffer.alloc(t.bytes);
      const view = buf.subarray(0, t.bytes);
      t.fill(view);
      let off = 0;
      while (off < view.length) off += writeSync(fd, view, off, view.length - off);
    }
  } finally {
    closeSync(fd);
  }
}

/** Writes the checkpoint: one shard per layer plus model.safetensors.index.json; returns shard paths. */
export function writeSyntheticK3(spec: SynthSpec): string[] {
  mkdirSync(spec.dir, { recursive: true });
  const weightMap: Record<string, string> = {};
  const files: string[] = [];
  spec.layers.forEach((layer, i) => {
    const name = `model-${String(i + 1).padStart(5, "0")}-of-${String(spec.layers.length).padStart(5, "0")}.safetensors`;
    const ts = layerTensors(spec, layer);
    // A tiny odd-sized tensor first makes every later offset unaligned, like the real shards.
    const odd: T = { name: `${PREFIX}${layer}.odd_marker`, dtype: "U8", shape: [13], bytes: 13, fill: fillPattern(5) };
    writeShard(join(spec.dir, name), ts, [odd]);
    for (const t of [odd, ...ts]) weightMap[t.name] = name;
    files.push(join(spec.dir, name));
  });
  writeFileSync(join(spec.dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
  return files;
}

export interface RawTensor { name: string; dtype: string; shape: number[]; data: Uint8Array }

/** Writes `model.safetensors` in `dir` with the tensors in the given order (header padded to 8). */
export function writeRawCheckpoint(dir: string, tensors: RawTensor[]): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "model.safetensors");
  writeShard(
    file,
    tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, bytes: t.data.byteLength, fill: (b: Uint8Array) => b.set(t.data) })),
  );
  return file;
}
