"""Diagrams of GPT-2, drawn from lib's own numbers (the configuration, the parameter counts, the
shapes, the tokenizer), so that a picture cannot disagree with the model.
"""
from __future__ import annotations

from . import attention, decoding, embeddings, finetuning, model, modern, tokenization, training

DIAGRAMS = {
    "bpe_merges": ("chapters/01_tokenization", tokenization.bpe_merges),
    "embeddings": ("chapters/02_embeddings", embeddings.embeddings),
    "causal_attention": ("chapters/03_attention", attention.causal_attention),
    "multi_head": ("chapters/03_attention", attention.multi_head),
    "block": ("chapters/04_model", model.block),
    "model": ("chapters/04_model", model.model),
    "training_step": ("chapters/05_training", training.training_step),
    "lr_schedule": ("chapters/05_training", training.lr_schedule),
    "prefill_decode": ("chapters/06_decoding", decoding.prefill_decode),
    "kv_cache": ("chapters/06_decoding", decoding.kv_cache),
    "gpt1_classification": ("chapters/07_finetuning", finetuning.gpt1_classification),
    "rope": ("chapters/08_modern_block", modern.rope),
    "gqa": ("chapters/08_modern_block", modern.gqa),
}


def draw(name: str):
    if name not in DIAGRAMS:
        raise ValueError(f"unknown diagram {name!r}; expected one of {sorted(DIAGRAMS)}")
    return DIAGRAMS[name][1]()
