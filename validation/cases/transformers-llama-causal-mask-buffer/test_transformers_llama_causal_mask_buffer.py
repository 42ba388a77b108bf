"""Forward pass of a small randomly initialised Llama causal LM (batch 2, 64 tokens, all-ones
padding mask).

The config keeps the Llama-2 style `max_position_embeddings` (here 1024); the causal-mask work
done per forward should depend on the input length, not on that maximum."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
CONFIG = LlamaConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    vocab_size=1000,
    max_position_embeddings=1024,
)
MODEL = LlamaForCausalLM(CONFIG).eval()
INPUT_IDS = torch.randint(0, 1000, (2, 64))
ATTENTION_MASK = torch.ones(2, 64, dtype=torch.long)


def forward():
    with torch.no_grad():
        return MODEL(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits


def test_llama_forward_with_padding_mask(benchmark):
    logits = benchmark(forward)
    assert logits.shape == (2, 64, 1000)
