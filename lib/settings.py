"""The settings of the training loops over a set of examples (fine-tuning, instruction tuning, DPO).

`LoopSettings` holds what the three loops share: `steps` AdamW steps of `batch_size` examples
taken in turn from seeded shuffled passes (`lib.data.shuffled_batches`), a peak rate and
gradient clipping. `lib.finetune.FinetuneSettings` and `lib.posttrain.loops`' SFT and DPO
settings add their own fields to it. Each is checked where it is built: a bad value raises
ValueError in one line naming it (`check_fields`), before any training.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass


def check_fields(settings, *, counts=(), seeds=(), positive=(), non_negative=(), fractions=()):
    """ValueError for the first field of `settings` (named in one of the groups) whose value is not
    what its group takes: counts integers >= 1, seeds integers >= 0, positive numbers > 0,
    non_negative numbers >= 0, fractions numbers in [0, 1]."""
    for group, minimum in ((counts, 1), (seeds, 0)):
        for name in group:
            value = getattr(settings, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    for group, holds, expected in ((positive, lambda v: v > 0, "> 0"), (non_negative, lambda v: v >= 0, ">= 0"),
                                   (fractions, lambda v: 0 <= v <= 1, "in [0, 1]")):
        for name in group:
            value = getattr(settings, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool) or not holds(value):
                raise ValueError(f"{name} must be a number {expected}, got {value!r}")


@dataclass(frozen=True)
class LoopSettings:
    """`steps` AdamW steps of `batch_size` examples at peak rate `lr`, the gradients clipped to
    global norm `grad_clip` (0: off), `seed` seeding the batches' order."""
    steps: int
    batch_size: int
    lr: float
    grad_clip: float
    seed: int

    def __post_init__(self):
        check_fields(self, counts=("steps", "batch_size"), seeds=("seed",), positive=("lr",),
                     non_negative=("grad_clip",))
