import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BudgetError } from "../src/errors.js";
import { censusFromConfig, planMemory } from "../src/plan.js";
import { tinyK3Dir } from "./fixtures.js";

const GB = 1e9;
// Kimi K3's published text_config (docs/architecture.md §0).
const fullAttn = [...Array.from({ length: 23 }, (_, i) => 4 * (i + 1)), 93];
const k3 = {
  quantization_config: { format: "mxfp4-pack-quantized" },
  text_config: {
    hidden_size: 7168, num_hidden_layers: 93, vocab_size: 163840,
    linear_attn_config: { num_heads: 96, head_dim: 128, short_conv_kernel_size: 4, use_full_rank_gate: true, full_attn_layers: fullAttn, kda_layers: Array.from({ length: 93 }, (_, i) => i + 1).filter((l) => !fullAttn.includes(l)) },
    num_attention_heads: 96, q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128, mla_use_output_gate: true,
    num_experts: 896, num_experts_per_token: 16, num_shared_experts: 2, moe_intermediate_size: 3072, routed_expert_hidden_size: 3584,
    intermediate_size: 33792, first_k_dense_replace: 1,
  },
};

describe("censusFromConfig", () => {
  it("reproduces K3's published byte counts", () => {
    const c = censusFromConfig(k3);
    expect(c.expertBytes).toBe(17_547_264);
    expect(c.moeLayers.length).toBe(92);
    // KDA MoE layer = KDA 887,886,848 + router 12,848,640 + latent 102,767,616 + shared 264,241,152
    expect(c.layerTrunkBytes[1]).toBe(887_886_848 + 12_848_640 + 102_767_616 + 264_241_152);
    // MLA MoE layer (layer 3, zero-based) = MLA 464,478,208 + the same MoE trunk
    expect(c.layerTrunkBytes[3]).toBe(464_478_208 + 12_848_640 + 102_767_616 + 264_241_152);
    // 16 experts x 92 layers = 25.83 GB per token
    expect(c.topK * c.moeLayers.length * c.expertBytes).toBe(25_829_572_608);
  });
});

describe("planMemory", () => {
  it("8 GB: two ring slots (overlap), trunk before cache", () => {
    const p = planMemory({ config: k3, budgetBytes: 8 * GB, reservedBytes: 1 * GB });
    expect(p.ringSlots).toBe(2);
    expect(p.trunkOverlap).toBe(true);
    expect(p.ioSlots).toBe(18);
    expect(p.totalBytes).toBeLessThanOrEqual(8 * GB);
    expect(p.cacheSlotsPerLayer).toBe(0);
    expect(p.pinnedLayers.length + p.streamedLayers.length).toBe(93);
    expect(p.bytesPerTokenNoCache).toBeGreaterThan(25.8 * GB);
    // Pinning the 2.34 GB dense layer 0 shrinks both ring slots to the 1.27 GB MoE-layer size.
    expect(p.pinnedLayers).toContain(0);
    expect(p.ringSlotBytes).toBe(887_886_848 + 12_848_640 + 102_767_616 + 264_241_152);
  });

  it("a big budget pins everything and gives the rest to the expert cache", () => {
    const p = planMemory({ config: k3, budgetBytes: 256 * GB });
    expect(p.streamedLayers).toEqual([]);
    expect(p.ringSlots).toBe(0);
    expect(p.globalResident).toBe(true);
    expect(p.cacheSlotsPerLayer).toBeGreaterThan(50);
    expect(p.expectedBytesPerToken).toBeLessThan(p.bytesPerTokenNoCache);
    expect(p.totalBytes).toBeLessThanOrEqual(256 * GB);
  });

  it("a budget too small fails before anything loads, with both numbers", () => {
    expect(() => planMemory({ config: k3, budgetBytes: 1 * GB })).toThrow(BudgetError);
    try {
      planMemory({ config: k3, budgetBytes: 1 * GB });
    } catch (e) {
      const b = e as BudgetError;
      expect(b.budgetBytes).toBe(1 * GB);
      expect(b.neededBytes).toBeGreaterThan(1 * GB);
      expect(b.message).toMatch(/memory plan minimum .* needs .* but the budget is 1\.00 GB \(1000000000 B\)/);
    }
  });

  it("plans tiny-k3 from its own config.json", () => {
    const cfg = JSON.parse(readFileSync(join(tinyK3Dir, "config.json"), "utf8"));
    const c = censusFromConfig(cfg);
    expect(c.expertBytes).toBe(3 * 64 * 32 * (0.5 + 1 / 32));
    const p = planMemory({ config: cfg, budgetBytes: 64 << 20, overheadBytes: 0 });
    expect(p.streamedLayers.length).toBe(0);
    expect(p.cacheSlotsPerLayer).toBe(16);
  });
});
