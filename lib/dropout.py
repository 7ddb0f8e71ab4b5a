"""Dropout, the parts both twins share (no framework here).

Dropout (Srivastava et al. 2014): while training, each value is zeroed with probability p
and the kept ones are divided by 1 - p ("inverted" dropout), so that a value's expectation is
unchanged and evaluation can use the network as it is, with nothing dropped. GPT-2's places,
with transformers' module names (each twin's model.py has them):

- `drop`: the embeddings, wte[idx] + wpe[pos], before the first block;
- `h.i.attn.attn_dropout`: the attention weights, after the softmax;
- `h.i.attn.resid_dropout` and `h.i.mlp.dropout`: each branch's output, before it is added
  to the residual stream.

- `check_dropout(p)`: p must lie in [0, 1).
- `dropout_mask(shape, p, rng)`: a mask of 0 and 1 / (1 - p), drawn from a numpy Generator.
- `mask_shapes(config, B, T)`, `draw_masks(config, B, T, seed)`: every dropout's mask for one
  forward pass over (B, T) token ids, by name.
- `use_masks(model, masks)`: a context within which either twin uses the given masks instead of
  drawing its own, so that the two twins (and autograd) can be checked on the same masks.
- `eval_mode(model)`: a context within which a model of either twin is in evaluation mode
  (no dropout); the model's mode is restored on leaving it.
"""
from __future__ import annotations

import contextlib
import numbers

import numpy as np


def check_dropout(p, name="dropout") -> float:
    """p, when it is a probability that dropout can use; 1 would drop everything (and divide by 0)."""
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0 <= p < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    return p


def dropout_mask(shape, p, rng, dtype=np.float32):
    """Each entry kept with probability 1 - p: 1 / (1 - p) where kept, 0 where dropped."""
    keep = rng.random(shape, dtype=np.float32) >= p          # (shape) booleans
    return np.where(keep, 1.0 / (1.0 - p), 0.0).astype(dtype)


def mask_shapes(config, batch, T) -> dict[str, tuple[int, ...]]:
    """The shape of every dropout's mask in one forward pass over (batch, T) ids, by layer name."""
    B, C, H = batch, config.n_embd, config.n_head
    shapes = {"drop": (B, T, C)}
    for i in range(config.n_layer):
        shapes.update({f"h.{i}.attn.attn_dropout": (B, H, T, T), f"h.{i}.attn.resid_dropout": (B, T, C),
                       f"h.{i}.mlp.dropout": (B, T, C)})
    return shapes


def draw_masks(config, batch, T, seed, dtype=np.float32) -> dict[str, np.ndarray]:
    """Masks for one forward pass, drawn from a Generator seeded with `seed`, at config.dropout."""
    rng = np.random.default_rng(seed)
    return {name: dropout_mask(shape, check_dropout(config.dropout), rng, dtype)
            for name, shape in mask_shapes(config, batch, T).items()}


def _layer(model, name):
    """The sub-layer of `model` at a dotted name such as "h.1.attn.attn_dropout"."""
    for part in name.split("."):
        model = model[int(part)] if part.isdigit() else getattr(model, part)
    return model


@contextlib.contextmanager
def use_masks(model, masks):
    """Within this block each named dropout layer of `model` (either twin) multiplies by its mask
    from `masks` ({name: array}, e.g. `draw_masks`) instead of drawing one, while the model is in
    training mode. Leaving the block removes the masks."""
    layers = [_layer(model, name) for name in masks]
    for layer, mask in zip(layers, masks.values()):
        layer.mask = np.asarray(mask)
    try:
        yield
    finally:
        for layer in layers:
            layer.mask = None


@contextlib.contextmanager
def eval_mode(model):
    """Evaluation mode within this block (dropout off), whatever the model's mode before it;
    leaving the block restores that mode. Works with either twin's model (`train(mode)`,
    `training`), as torch's own modules do."""
    was_training = model.training
    model.train(False)
    try:
        yield model
    finally:
        model.train(was_training)
