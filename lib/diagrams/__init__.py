"""Diagrams of GPT-2, drawn from lib's own numbers, so that a picture cannot disagree with the model.

Every number on a diagram is read from lib when it is drawn: `GPTConfig.gpt2()`, `param_counts`,
`param_shapes` and `kv_cache_bytes` (lib.config), merges that lib's tokenizer learns, the training
recipe's defaults (lib.train) and `lr_at` (lib.schedule), the fine-tuning task (lib.finetune),
RoPE's angles (`rope_cos_sin`). A chapter shows one with `draw(name)`: the cell's output is an <img> holding the
SVG and its alt text, which Jupyter, Colab and the built book display, offline (lib/diagrams/svg.py
has the drawing kit, the palette and the type style).

`DIAGRAMS` maps each name to the book page that shows it and the function that draws it:

- chapter 1: `bpe_merges`, byte-pair encoding of a short string, merge by merge;
- chapter 2: `embeddings`, token and position embeddings summed into the residual stream;
- chapter 3: `causal_attention`, one head's Q, K, V and masked scores; `multi_head`, the split
  into heads and back, (B, T, C) -> (B, H, T, D) -> (B, T, C);
- chapter 4: `block`, the pre-norm block; `model`, ids to logits with the tied head, and where
  the parameters sit;
- chapter 5: `training_step`, forward, loss, backward, clipping, AdamW; `lr_schedule`, warmup
  and cosine decay;
- chapter 6: `prefill_decode`, the cache slots each phase writes; `kv_cache`, what every layer
  keeps, and its size;
- chapter 6b: `likelihood_scoring`, a multiple-choice item scored choice by choice (sum, mean,
  gain over a neutral text);
- chapter 7: `gpt1_classification`, GPT-1's input format and the head on the last token;
- chapter 8: `rope`, the rotation of pairs; `gqa`, query heads sharing key/value heads;
- chapter 11: `attention_masks`, bidirectional, causal and prefix.
"""
from __future__ import annotations

from . import attention, decoding, embeddings, evaluation, finetuning, model, modern, scale, tokenization, training

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
    "likelihood_scoring": ("chapters/06b_evaluation", evaluation.likelihood_scoring),
    "gpt1_classification": ("chapters/07_finetuning", finetuning.gpt1_classification),
    "rope": ("chapters/08_modern_block", modern.rope),
    "gqa": ("chapters/08_modern_block", modern.gqa),
    "attention_masks": ("chapters/11_scale", scale.attention_masks),
}


def draw(name: str):
    """The diagram called `name` (a `lib.diagrams.svg.Diagram`; a notebook displays it)."""
    if name not in DIAGRAMS:
        raise ValueError(f"unknown diagram {name!r}; expected one of {sorted(DIAGRAMS)}")
    return DIAGRAMS[name][1]()
