"""The learning-rate schedule of lib's training loops: a linear warmup, then a cosine decay to a floor.

`lr_at(step, ...)` is one step's rate; pretraining (`lib.train`), fine-tuning (`lib.finetune`) and
post-training (`lib.posttrain`) follow it.
"""
from __future__ import annotations

import math


def lr_at(step: int, lr: float, min_lr: float, warmup_iters: int, max_iters: int) -> float:
    """Learning rate of step `step` (0-based): lr * (step + 1) / warmup_iters while warming up,
    then min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress going from 0 at
    the end of warmup to 1 at max_iters, and min_lr from there on."""
    if step < warmup_iters:
        return lr * (step + 1) / warmup_iters
    if step >= max_iters:
        return min_lr
    progress = (step - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
