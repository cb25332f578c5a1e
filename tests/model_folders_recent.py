"""config.json files of recent published checkpoints, one per family cfgcheck reads
generically (transformers builds them on the meta device, cfgcheck/memory/traced.py).

Each holds the shape-defining keys of the file at the URL above it (values unchanged; rope,
token-id and dtype keys left out where they do not change a parameter); every shape was
cross-checked against LitGPT's litgpt/config.py (Lightning-AI/litgpt @ 26857050fe3f) where
LitGPT has the model. ``PUBLISHED_PARAMS`` holds the parameter counts the model cards state
(billions as rounded there; total and active for MoE).
"""

from __future__ import annotations

from typing import Any

_LAYERS_6 = ["sliding_attention"] * 5 + ["full_attention"]

RECENT: dict[str, dict[str, Any]] = {
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    "mistralai/Mixtral-8x7B-v0.1": {
        "architectures": ["MixtralForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "model_type": "mixtral",
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
    # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
    "Qwen/Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "decoder_sparse_step": 1,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "mlp_only_layers": [],
        "model_type": "qwen3_moe",
        "moe_intermediate_size": 768,
        "norm_topk_prob": True,
        "num_attention_heads": 32,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json
    "Qwen/Qwen1.5-MoE-A2.7B": {
        "architectures": ["Qwen2MoeForCausalLM"],
        "decoder_sparse_step": 1,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "max_position_embeddings": 8192,
        "model_type": "qwen2_moe",
        "moe_intermediate_size": 1408,
        "num_attention_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 16,
        "shared_expert_intermediate_size": 5632,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
    "openai/gpt-oss-20b": {
        "architectures": ["GptOssForCausalLM"],
        "attention_bias": True,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "model_type": "gpt_oss",
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 8,
        "num_local_experts": 32,
        "quantization_config": {
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
            "quant_method": "mxfp4",
        },
        "rms_norm_eps": 1e-05,
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    },
    # https://huggingface.co/allenai/OLMoE-1B-7B-0924/blob/main/config.json
    "allenai/OLMoE-1B-7B-0924": {
        "architectures": ["OlmoeForCausalLM"],
        "clip_qkv": None,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 1024,
        "max_position_embeddings": 4096,
        "model_type": "olmoe",
        "num_attention_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 16,
        "num_key_value_heads": 16,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": 50304,
    },
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json
    "deepseek-ai/DeepSeek-V2-Lite": {
        "architectures": ["DeepseekV2ForCausalLM"],
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v2",
        "moe_intermediate_size": 1408,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_attention_heads": 16,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 27,
        "num_key_value_heads": 16,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "greedy",
        "v_head_dim": 128,
        "vocab_size": 102400,
    },
    # https://huggingface.co/google/gemma-3-1b-it/blob/main/config.json
    "google/gemma-3-1b-it": {
        "architectures": ["Gemma3ForCausalLM"],
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": 4,
        "num_hidden_layers": 26,
        "num_key_value_heads": 1,
        "query_pre_attn_scalar": 256,
        "rope_local_base_freq": 10000,
        "rope_theta": 1000000,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "vocab_size": 262144,
    },
    # https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (Gemma3ForConditional-
    # Generation: the language model under text_config, a SigLIP vision tower beside it)
    "google/gemma-3-4b-it": {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    },
    # https://huggingface.co/HuggingFaceTB/SmolLM3-3B/blob/main/config.json
    "HuggingFaceTB/SmolLM3-3B": {
        "architectures": ["SmolLM3ForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "max_position_embeddings": 65536,
        "model_type": "smollm3",
        "no_rope_layer_interval": 4,
        "num_attention_heads": 16,
        "num_hidden_layers": 36,
        "num_key_value_heads": 4,
        "rope_theta": 5000000.0,
        "tie_word_embeddings": True,
        "vocab_size": 128256,
    },
    # https://huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json
    "allenai/OLMo-2-1124-7B": {
        "architectures": ["Olmo2ForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "max_position_embeddings": 4096,
        "model_type": "olmo2",
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "rms_norm_eps": 1e-06,
        "rope_theta": 500000,
        "tie_word_embeddings": False,
        "vocab_size": 100352,
    },
    # https://huggingface.co/tiiuae/falcon-7b/blob/main/config.json
    "tiiuae/falcon-7b": {
        "alibi": False,
        "architectures": ["FalconForCausalLM"],
        "bias": False,
        "hidden_size": 4544,
        "model_type": "falcon",
        "multi_query": True,
        "new_decoder_architecture": False,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "parallel_attn": True,
        "vocab_size": 65024,
    },
    # https://huggingface.co/stabilityai/stablelm-2-1_6b/blob/main/config.json
    "stabilityai/stablelm-2-1_6b": {
        "architectures": ["StableLmForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": 4096,
        "model_type": "stablelm",
        "num_attention_heads": 32,
        "num_hidden_layers": 24,
        "num_key_value_heads": 32,
        "partial_rotary_factor": 0.25,
        "tie_word_embeddings": False,
        "use_parallel_residual": False,
        "use_qkv_bias": True,
        "vocab_size": 100352,
    },
    # https://huggingface.co/bigcode/starcoder2-7b/blob/main/config.json
    "bigcode/starcoder2-7b": {
        "architectures": ["Starcoder2ForCausalLM"],
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 4608,
        "intermediate_size": 18432,
        "max_position_embeddings": 16384,
        "model_type": "starcoder2",
        "norm_epsilon": 1e-05,
        "num_attention_heads": 36,
        "num_hidden_layers": 32,
        "num_key_value_heads": 4,
        "sliding_window": 4096,
        "use_bias": True,
        "vocab_size": 49152,
    },
    # https://huggingface.co/ibm-granite/granite-3.1-8b-base/blob/main/config.json
    "ibm-granite/granite-3.1-8b-base": {
        "architectures": ["GraniteForCausalLM"],
        "attention_bias": False,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 12800,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "granite",
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
        "vocab_size": 49155,
    },
    # https://huggingface.co/CohereForAI/c4ai-command-r-v01/blob/main/config.json
    "CohereForAI/c4ai-command-r-v01": {
        "architectures": ["CohereForCausalLM"],
        "hidden_act": "silu",
        "hidden_size": 8192,
        "intermediate_size": 22528,
        "logit_scale": 0.0625,
        "max_position_embeddings": 8192,
        "model_type": "cohere",
        "num_attention_heads": 64,
        "num_hidden_layers": 40,
        "num_key_value_heads": 64,
        "use_qk_norm": False,
        "vocab_size": 256000,
    },
    # https://huggingface.co/EleutherAI/pythia-1b/blob/main/config.json
    "EleutherAI/pythia-1b": {
        "architectures": ["GPTNeoXForCausalLM"],
        "hidden_act": "gelu",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "max_position_embeddings": 2048,
        "model_type": "gpt_neox",
        "num_attention_heads": 8,
        "num_hidden_layers": 16,
        "rotary_pct": 0.25,
        "tie_word_embeddings": False,
        "use_parallel_residual": True,
        "vocab_size": 50304,
    },
}

# (total, active) in billions as each model card states them, and the rounding of that figure.
PUBLISHED_PARAMS: dict[str, tuple[float, float | None, float]] = {
    "mistralai/Mixtral-8x7B-v0.1": (46.7, 12.9, 0.05),  # Mixtral paper / model card
    "Qwen/Qwen3-30B-A3B": (30.5, 3.3, 0.05),  # model card: 30.5B total, 3.3B activated
    "Qwen/Qwen1.5-MoE-A2.7B": (14.3, 2.7, 0.05),  # model card: 14.3B total, 2.7B activated
    "openai/gpt-oss-20b": (21.0, 3.6, 0.5),  # model card: 21B total, 3.6B active
    "allenai/OLMoE-1B-7B-0924": (6.9, 1.3, 0.05),  # OLMoE paper: 6.9B total, 1.3B active
    "deepseek-ai/DeepSeek-V2-Lite": (15.7, 2.4, 0.05),  # model card: 15.7B, 2.4B activated
    "google/gemma-3-1b-it": (1.0, None, 0.05),
    "google/gemma-3-4b-it": (4.3, None, 0.05),  # the Hub's safetensors count: 4.3B
    "HuggingFaceTB/SmolLM3-3B": (3.1, None, 0.05),  # the Hub's safetensors count: 3.08B
    "allenai/OLMo-2-1124-7B": (7.3, None, 0.05),  # the Hub's safetensors count: 7.3B
    "tiiuae/falcon-7b": (6.9, None, 0.05),  # the Hub's safetensors count: 6.92B
    "stabilityai/stablelm-2-1_6b": (1.6, None, 0.05),  # model card: 1.6B (1,644,417,024)
    "bigcode/starcoder2-7b": (7.2, None, 0.05),  # the Hub's safetensors count: 7.17B
    "ibm-granite/granite-3.1-8b-base": (8.2, None, 0.05),  # the Hub's count: 8.17B
    "CohereForAI/c4ai-command-r-v01": (35.0, None, 0.05),  # model card: 35B
    "EleutherAI/pythia-1b": (1.0, None, 0.02),  # Pythia paper: 1,011,781,632 (1.0B)
}
