/**
 * One model-shape path: config.json -> readConfig/parseConfig (the strict reader) -> censusOf ->
 * budgetsFor + planMemory. These pin the census to K3's published byte counts, show that a config
 * read from a checkpoint directory in the released layout plans exactly as the published
 * dimensions do, and that first_k_dense_replace / moe_layer_freq decide which layers carry experts.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { isMoeLayer, parseConfig, readConfig } from "../src/config.js";
import { ALIGN_SLACK, budgetsFor, GB, planMemory, PRESET_NAMES } from "../src/presets.js";
import { publishedK3Config, rawConfig, TINY_K3 } from "./helpers.js";

const box = { totalBytes: 512 * GB, availableBytes: 500 * GB };
const k3 = censusOf(parseConfig(publishedK3Config()));
// A routed-expert layer's trunk besides its attention: router + bias, latent down/up + norm, two shared experts.
const MOE_TRUNK = 12_848_640 + 102_767_616 + 264_241_152;

describe("census of the published K3 config", () => {
  it("reproduces K3's published byte counts", () => {
    expect(k3.expertBytes).toBe(17_547_264);
    expect(k3.moeLayers).toBe(92);
    expect(k3.layerTrunkBytes[1]).toBe(887_886_848 + MOE_TRUNK); // a KDA MoE layer
    expect(k3.layerTrunkBytes[3]).toBe(464_478_208 + MOE_TRUNK); // an MLA MoE layer (zero-based 3)
    expect(k3.layerTrunkBytes[0]).toBe(887_886_848 + 3 * 33792 * 7168 * 2); // layer 0: KDA + the dense MLP
    expect(k3.expertBytesPerToken).toBe(25_829_572_608); // 16 experts x 92 layers
  });

  it("takes the tiny checkpoint's expert size from its own config.json", () => {
    expect(censusOf(readConfig(TINY_K3)).expertBytes).toBe(3 * 64 * 32 * (0.5 + 1 / 32));
  });
});

describe("one planner", () => {
  it("plans a config read from a checkpoint directory in the released layout exactly as the published K3 dimensions", () => {
    // tiny-k3's config.json is the released file layout (top-level quantization_config, nested
    // text_config with its own copy, linear_attn_config); give it K3's widths and layer map.
    const raw = rawConfig(TINY_K3);
    const pub = publishedK3Config().text_config;
    const widths = [
      "hidden_size", "num_hidden_layers", "vocab_size", "bos_token_id", "eos_token_id", "pad_token_id", "num_attention_heads", "num_key_value_heads",
      "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_experts", "num_experts_per_token",
      "moe_intermediate_size", "routed_expert_hidden_size", "intermediate_size", "attn_res_block_size",
    ];
    for (const key of widths) raw.text_config[key] = pub[key];
    for (const key of ["bos_token_id", "eos_token_id", "pad_token_id", "media_placeholder_token_id"]) raw[key] = publishedK3Config()[key];
    raw.text_config.linear_attn_config = { ...raw.text_config.linear_attn_config, ...pub.linear_attn_config };
    const dir = mkdtempSync(join(tmpdir(), "k3-plan-path-"));
    try {
      writeFileSync(join(dir, "config.json"), JSON.stringify(raw, null, 2));
      const fromDir = censusOf(readConfig(dir));
      expect(fromDir).toEqual(k3);
      for (const preset of PRESET_NAMES)
        for (const packedTrunk of [false, true]) {
          const a = planMemory(fromDir, budgetsFor(preset, fromDir, box), preset, box, { packedTrunk });
          const b = planMemory(k3, budgetsFor(preset, k3, box), preset, box, { packedTrunk });
          expect(a).toEqual(b);
        }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("honours first_k_dense_replace and moe_layer_freq: only MoE layers hold experts, cache slots and expert reads", () => {
    const raw = publishedK3Config();
    raw.text_config.first_k_dense_replace = 3;
    raw.text_config.moe_layer_freq = 2;
    const cfg = parseConfig(raw);
    const moe = [...Array(93).keys()].filter((l) => isMoeLayer(cfg, l));
    // Layers 4, 6, ..., 92: at or past the third, and even.
    expect(moe).toEqual([...Array(45).keys()].map((i) => 4 + 2 * i));
    const c = censusOf(cfg);
    expect(c.moeLayers).toBe(45);
    expect(c.expertsTotal).toBe(45 * 896);
    expect(c.expertBytesPerToken).toBe(45 * 16 * 17_547_264);
    // A dense layer carries the dense MLP and no router; a MoE layer the MoE trunk.
    expect(c.layerTrunkBytes[2]).toBe(887_886_848 + 3 * 33792 * 7168 * 2);
    expect(c.layerTrunkBytes[5]).toBe(887_886_848 + 3 * 33792 * 7168 * 2);
    expect(c.layerTrunkBytes[6]).toBe(887_886_848 + MOE_TRUNK);
    const slot = Math.ceil(17_547_264 / 4096) * 4096 + 4096;
    const plan = planMemory(c, budgetsFor("desktop", c, box), "desktop", box, { packedTrunk: true });
    // The cache budget spread over 45 MoE layers, not 92.
    expect(plan.cacheSlotsPerLayer).toBe(Math.floor((10 * GB) / 45 / slot));
    expect(plan.parts.expertCache).toBe(plan.cacheSlotsPerLayer * 45 * slot);
    expect(plan.expectedReads.experts).toBe(45 * 16 * (17_547_264 + ALIGN_SLACK));
  });
});
