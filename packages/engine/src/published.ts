/**
 * The published configurations, one copy for the synthetic checkpoint generator (`k3 synth`), the
 * plan tables and the tests.
 *
 * - Kimi K3 (moonshotai/Kimi-K3 config.json): docs/architecture.md §0. The nested
 *   layout (`text_config`, `text_config.linear_attn_config`) as released; the vision_config
 *   (MoonViT-V2), which text engines ignore, is left out.
 * - Kimi-Linear-48B-A3B (moonshotai/Kimi-Linear-48B-A3B-Instruct config.json): docs/architecture.md §0,
 *   flat layout.
 *
 * Both functions return a fresh object (callers may edit it).
 */

/** compressed-tensors MXFP4 for the routed experts only (the K3 release). */
function k3Quantization(): Record<string, unknown> {
  return {
    quant_method: "compressed-tensors",
    format: "mxfp4-pack-quantized",
    quantization_status: "compressed",
    config_groups: {
      group_0: {
        format: "mxfp4-pack-quantized",
        targets: ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
        weights: {
          num_bits: 4,
          type: "float",
          strategy: "group",
          group_size: 32,
          symmetric: true,
          dynamic: false,
          scale_dtype: "uint8",
          observer: "minmax",
        },
        input_activations: null,
        output_activations: null,
      },
    },
    ignore: ["lm_head", "re:.*shared_experts.*", "re:.*self_attn.*", "re:.*mlp\\..*", "re:.*routed_expert_(down|up)_proj$", "re:.*block_sparse_moe\\.gate$"],
  };
}

/** The released ONE-based MLA layer list: every 4th layer plus the last one (K3: 4,8,…,92,93; 48B: 4,…,24,27). */
export function releasedFullAttnLayers(numLayers: number): number[] {
  const full: number[] = [];
  for (let l = 4; l <= numLayers; l += 4) full.push(l);
  if (full[full.length - 1] !== numLayers) full.push(numLayers);
  return full;
}

/** The ONE-based KDA layers: the complement of `full` in 1..numLayers. */
export function complementLayers(full: readonly number[], numLayers: number): number[] {
  const out: number[] = [];
  for (let l = 1; l <= numLayers; l++) if (!full.includes(l)) out.push(l);
  return out;
}

/** Kimi K3's config.json (text part), as published: 93 layers, hidden 7168, 896 MXFP4 experts top-16. */
export function publishedK3Config(): Record<string, any> {
  const full = releasedFullAttnLayers(93);
  return {
    architectures: ["KimiK3ForConditionalGeneration"],
    model_type: "kimi_k3",
    bos_token_id: 163584,
    eos_token_id: 163586,
    pad_token_id: 163839,
    media_placeholder_token_id: 163605,
    tie_word_embeddings: false,
    torch_dtype: "bfloat16",
    quantization_config: k3Quantization(),
    text_config: {
      model_type: "kimi_linear",
      architectures: ["KimiLinearForCausalLM"],
      hidden_size: 7168,
      num_hidden_layers: 93,
      vocab_size: 163840,
      bos_token_id: 163584,
      eos_token_id: 163586,
      pad_token_id: 163839,
      rms_norm_eps: 1e-5,
      max_position_embeddings: 1048576,
      tie_word_embeddings: false,
      hidden_act: "situ",
      activation_situ_beta: 4.0,
      activation_situ_linear_beta: 25.0,
      linear_attn_config: {
        num_heads: 96,
        head_dim: 128,
        short_conv_kernel_size: 4,
        full_attn_layers: full,
        kda_layers: complementLayers(full, 93),
        gate_lower_bound: -5.0,
        use_full_rank_gate: true,
      },
      num_attention_heads: 96,
      num_key_value_heads: 96,
      q_lora_rank: 1536,
      kv_lora_rank: 512,
      qk_nope_head_dim: 128,
      qk_rope_head_dim: 64,
      v_head_dim: 128,
      mla_use_nope: true,
      mla_use_output_gate: true,
      num_experts: 896,
      num_experts_per_token: 16,
      num_shared_experts: 2,
      moe_intermediate_size: 3072,
      routed_expert_hidden_size: 3584,
      latent_moe_use_norm: true,
      intermediate_size: 33792,
      first_k_dense_replace: 1,
      moe_layer_freq: 1,
      moe_router_activation_func: "sigmoid",
      topk_method: "noaux_tc",
      use_grouped_topk: true,
      num_expert_group: 1,
      topk_group: 1,
      moe_renormalize: true,
      routed_scaling_factor: 1.0,
      attn_res_block_size: 12,
      num_nextn_predict_layers: 0,
      torch_dtype: "bfloat16",
      quantization_config: k3Quantization(),
    },
  };
}

/** Kimi-Linear-48B-A3B's config.json, as published: 27 layers, hidden 2304, 256 bf16 experts top-8. */
export function publishedKimiLinearConfig(): Record<string, any> {
  const full = releasedFullAttnLayers(27);
  return {
    architectures: ["KimiLinearForCausalLM"],
    model_type: "kimi_linear",
    bos_token_id: 163584,
    eos_token_id: 163586,
    pad_token_id: 163839,
    dtype: "bfloat16",
    first_k_dense_replace: 1,
    head_dim: 72,
    hidden_act: "silu",
    hidden_size: 2304,
    initializer_range: 0.02,
    intermediate_size: 9216,
    kv_lora_rank: 512,
    linear_attn_config: {
      full_attn_layers: full,
      head_dim: 128,
      kda_layers: complementLayers(full, 27),
      num_heads: 32,
      short_conv_kernel_size: 4,
    },
    mla_use_nope: true,
    model_max_length: 1048576,
    moe_intermediate_size: 1024,
    moe_layer_freq: 1,
    moe_renormalize: true,
    moe_router_activation_func: "sigmoid",
    num_attention_heads: 32,
    num_expert_group: 1,
    num_experts: 256,
    num_experts_per_token: 8,
    num_hidden_layers: 27,
    num_key_value_heads: 32,
    num_nextn_predict_layers: 0,
    num_shared_experts: 1,
    q_lora_rank: null,
    qk_nope_head_dim: 128,
    qk_rope_head_dim: 64,
    rms_norm_eps: 1e-5,
    rope_scaling: null,
    rope_theta: 10000.0,
    routed_scaling_factor: 2.446,
    tie_word_embeddings: false,
    topk_group: 1,
    use_cache: true,
    use_grouped_topk: true,
    v_head_dim: 128,
    vocab_size: 163840,
  };
}
