"""Forward pass of a small randomly initialised Mistral causal LM (SDPA attention) whose input is
as long as its sliding window (batch 2, 512 tokens, sliding_window=512), with an all-ones
padding mask."""

from __future__ import annotations

import torch
from transformers import MistralConfig, MistralForCausalLM

torch.manual_seed(0)
CONFIG = MistralConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
    max_position_embeddings=4096,
    sliding_window=512,
    attn_implementation="sdpa",
)
MODEL = MistralForCausalLM(CONFIG).eval()
INPUT_IDS = torch.randint(0, 1000, (2, 512))
ATTENTION_MASK = torch.ones(2, 512, dtype=torch.long)


def forward():
    with torch.no_grad():
        return MODEL(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits


def test_mistral_forward_at_sliding_window_length(benchmark):
    logits = benchmark(forward)
    assert logits.shape == (2, 512, 1000)
