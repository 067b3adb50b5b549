/** Dense GLU MLP (K3 SiTU-GLU or Kimi-Linear SiLU-GLU): down(act(gate x, up x)). */
import { siluGlu, situGlu } from "@k3/dense";
import type { ModelConfig } from "../config.js";
import { loadMatrix, matmul, type Matrix, type WeightSource } from "../weights.js";
import { Scratch } from "@k3/dense";

/** Work buffers of every GluMlp.forward (synchronous, so one set serves all layers; 17 MB at K3's dense width x 64 tokens). */
const scratch = new Scratch(64 << 20);

/** Applies the model's GLU activation: out = act(gate, up). */
export function glu(cfg: ModelConfig, gate: Float32Array, up: Float32Array, out: Float32Array): Float32Array {
  return cfg.hiddenAct === "situ" ? situGlu(gate, up, out, cfg.situBeta, cfg.situLinearBeta) : siluGlu(gate, up, out);
}

export class GluMlp {
  readonly gate: Matrix;
  readonly up: Matrix;
  readonly down: Matrix;
  constructor(
    private readonly cfg: ModelConfig,
    src: WeightSource,
    prefix: string,
    readonly inDim: number,
    readonly hidden: number,
    names: [string, string, string] = ["gate_proj.weight", "up_proj.weight", "down_proj.weight"],
  ) {
    this.gate = loadMatrix(src, prefix + names[0], hidden, inDim);
    this.up = loadMatrix(src, prefix + names[1], hidden, inDim);
    this.down = loadMatrix(src, prefix + names[2], inDim, hidden);
  }

  /** out[T, inDim] = MLP(x[T, inDim]). */
  forward(x: Float32Array, T: number, out: Float32Array): void {
    const g = scratch.get("g", T * this.hidden);
    const u = scratch.get("u", T * this.hidden);
    matmul(this.gate, x, g, T);
    matmul(this.up, x, u, T);
    glu(this.cfg, g, u, g);
    matmul(this.down, g, out, T);
  }

  /** Bytes of the three matrices (what one forward call reads from memory). */
  get bytes(): number {
    const b = (m: Matrix) => (m.bf16 ? m.bf16.byteLength : m.f32!.byteLength);
    return b(this.gate) + b(this.up) + b(this.down);
  }
}
