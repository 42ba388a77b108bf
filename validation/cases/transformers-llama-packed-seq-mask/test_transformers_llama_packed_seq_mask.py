"""Training-style forward of a small randomly initialised Llama causal LM with SDPA attention: no
attention mask, no KV cache (use_cache=False), batch 2 x 512 tokens of unpadded, unpacked
sequences. The causal mask should be left to SDPA's is_causal path."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
CONFIG = LlamaConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
    max_position_embeddings=2048,
    attn_implementation="sdpa",
)
MODEL = LlamaForCausalLM(CONFIG).eval()
INPUT_IDS = torch.randint(0, 1000, (2, 512))


def forward():
    with torch.no_grad():
        return MODEL(input_ids=INPUT_IDS, use_cache=False).logits


def test_llama_forward_without_cache_or_mask(benchmark):
    logits = benchmark(forward)
    assert logits.shape == (2, 512, 1000)
