"""Inference forward of a small randomly initialised BERT encoder (SDPA attention):
batch 8 x 128 tokens with an all-ones padding mask, hidden size 128, 2 layers."""

from __future__ import annotations

import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
CONFIG = BertConfig(
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    attn_implementation="sdpa",
)
MODEL = BertModel(CONFIG).eval()
INPUT_IDS = torch.randint(0, 1000, (8, 128))
ATTENTION_MASK = torch.ones(8, 128, dtype=torch.long)


def forward():
    with torch.no_grad():
        return MODEL(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).last_hidden_state


def test_bert_encoder_forward(benchmark):
    hidden = benchmark(forward)
    assert hidden.shape == (8, 128, 128)
