/**
 * KDA state carried across calls: layer 0 of the tiny K3 checkpoint (fixtures/models/tiny-k3, the
 * released layout) runs a prompt in one chunked call, then decodes token by token; the state is
 * saved after the prompt, restored into a fresh object, and the restored run must match bit for bit.
 *   pnpm --filter example-kda-state start        (--quick: fewer tokens, used by `test`)
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { openCheckpointSync } from "@k3/safetensors";
import { KdaLayer, KdaState, type KdaConfig, type KdaWeights } from "@k3/kda";

const quick = process.argv.includes("--quick");
const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures", "models", "tiny-k3");
const text = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).text_config;
const lin = text.linear_attn_config;
const config: KdaConfig = {
  hidden: text.hidden_size, numHeads: lin.num_heads, headDim: lin.head_dim, convKernel: lin.short_conv_kernel_size,
  gate: "k3-lowerbound", lowerBound: lin.gate_lower_bound, rmsNormEps: text.rms_norm_eps,
};

// layer 0 is KDA (kda_layers is 1-based): read its tensors as { dtype, shape, bytes }
const ckpt = openCheckpointSync(dir, { backend: "ts" }); // the pure-TS header parser: no native code needed here
const prefix = "language_model.model.layers.0.self_attn.";
const names = ["q_proj", "k_proj", "v_proj", "q_conv1d", "k_conv1d", "v_conv1d", "f_a_proj", "f_b_proj", "b_proj", "g_proj", "o_proj", "o_norm"];
const weights: Record<string, unknown> = {};
for (const n of names) {
  const info = ckpt.get(`${prefix}${n}.weight`);
  weights[n] = { dtype: info.dtype, shape: info.shape, data: ckpt.readSync(info.name) };
}
for (const n of ["A_log", "dt_bias"]) {
  const info = ckpt.get(prefix + n);
  weights[n] = { dtype: info.dtype, shape: info.shape, data: ckpt.readSync(info.name) };
}
const layer = new KdaLayer(weights as unknown as KdaWeights, config);
console.log(`KDA layer 0: ${config.numHeads} heads x ${config.headDim}, hidden ${config.hidden}, A_log per head [${Array.from(layer.aLog, (v) => v.toFixed(3)).join(", ")}]`);

// a deterministic "prompt" of hidden vectors (the mixer input is the already-normed hidden state)
const D = config.hidden, promptLen = quick ? 20 : 100, decodeLen = quick ? 4 : 16;
const xs = new Float32Array((promptLen + decodeLen) * D).map((_, i) => Math.sin(i * 0.37) + 0.3 * Math.cos(i * 0.011));

const state = layer.newState();
layer.forward(xs.subarray(0, promptLen * D), state); // chunked WY/UT prefill
const saved = state.save();
console.log(`after the ${promptLen}-token prompt: state ${state.byteLength} B (${saved.length} B saved with header), ${state.tokens} tokens`);

const decode = (s: KdaState) => {
  const outs = new Float32Array(decodeLen * D);
  for (let t = 0; t < decodeLen; t++) outs.set(layer.forward(xs.subarray((promptLen + t) * D, (promptLen + t + 1) * D), s), t * D);
  return outs;
};
const live = decode(state);
const restored = decode(KdaState.load(saved, config));
const same = Buffer.from(live.buffer).equals(Buffer.from(restored.buffer));
console.log(`decoded ${decodeLen} tokens from the live state and from the restored copy: ${same ? "bit-identical" : "DIFFERENT"}`);

// the same prompt token by token (recurrence) agrees with the chunked prefill to fp32 rounding
const byToken = layer.newState();
for (let t = 0; t < promptLen; t++) layer.forward(xs.subarray(t * D, (t + 1) * D), byToken);
const fresh = KdaState.load(saved, config);
let num = 0, den = 0;
for (let i = 0; i < fresh.S.length; i++) {
  num = Math.max(num, Math.abs((fresh.S as Float32Array)[i] - (byToken.S as Float32Array)[i]));
  den = Math.max(den, Math.abs((byToken.S as Float32Array)[i]));
}
console.log(`state after chunked prefill vs token-by-token recurrence: max rel diff ${(num / den).toExponential(2)}`);

const bf = layer.newState("bf16");
layer.forward(xs.subarray(0, promptLen * D), bf);
console.log(`bf16 state: ${bf.byteLength} B instead of ${state.byteLength} B`);
if (!same || !(num / den < 1e-5)) process.exit(1);
