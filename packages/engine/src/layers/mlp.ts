/**
 * The model's GLU MLPs from the checkpoint: @k3/dense's GluMlp (K3 SiTU-GLU or Kimi-Linear SiLU-GLU)
 * over zero-copy `Linear` views, with the activation and its SiTU bounds from the config. `gluOf`
 * is what every MLP of the model runs: dense layer 0 here, the shared and routed experts in moe.ts.
 */
import { GluMlp, type GluActivation, type SituBetas } from "@k3/dense";
import type { ModelConfig } from "../config.js";
import { loadMatrix, type WeightSource } from "../weights.js";

/** The config's GLU: activation (hidden_act) and SiTU bounds (activation_situ_beta / _linear_beta). */
export function gluOf(cfg: ModelConfig): { activation: GluActivation; betas: SituBetas } {
  return { activation: cfg.hiddenAct, betas: { beta: cfg.situBeta, linearBeta: cfg.situLinearBeta } };
}

/** The dense MLP at `prefix`: gate/up [hidden, inDim], down [inDim, hidden], shapes checked against the config. */
export function loadGluMlp(
  cfg: ModelConfig,
  src: WeightSource,
  prefix: string,
  inDim: number,
  hidden: number,
  names: [string, string, string] = ["gate_proj.weight", "up_proj.weight", "down_proj.weight"],
): GluMlp {
  const { activation, betas } = gluOf(cfg);
  return new GluMlp(
    loadMatrix(src, prefix + names[0], hidden, inDim),
    loadMatrix(src, prefix + names[1], hidden, inDim),
    loadMatrix(src, prefix + names[2], inDim, hidden),
    activation,
    betas,
  );
}
