"""Fine-tuning pieces of the numpy twin (chapter 7, GPT-1's recipe): new token rows, the
classification head with its hand-written backward, and one step of L3 = L2 + lm_weight * L1.

Read it beside `lib/torch_twin/finetune.py`: same names, same order. The task and the loop
are framework-free and live in `lib/finetune.py`.
Shapes: B batch, T time, C = n_embd, V vocab, K classes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..weights import normal_rows
from .model import GPT, Linear
from .train import AdamW, clip_grad_norm, cross_entropy


def add_tokens(model, n, seed=0):
    """A copy of `model` with n more tokens in its vocabulary: wte gains n rows drawn
    N(0, 0.02), every other weight is kept. The tied head then scores the new tokens too."""
    config = dataclasses.replace(model.config, vocab_size=model.config.vocab_size + n)
    state = model.state_dict()
    wte = state["wte.weight"]
    state["wte.weight"] = np.concatenate(                          # (V + n, C)
        [wte, normal_rows(n, config.n_embd, seed).astype(wte.dtype)])
    bigger = GPT(config, dtype=wte.dtype)
    bigger.load_state_dict(state)
    return bigger


class ClassifierHead(Linear):
    """GPT-1's task head: a linear map from the hidden state at the last position (where the
    classify token sits) to one score per class. Weights N(0, 0.02), bias 0."""

    def __init__(self, n_embd, n_classes, seed=0):
        super().__init__(n_embd, n_classes)
        self.weight[...] = normal_rows(n_classes, n_embd, seed)
        self.zero_grad()

    def forward(self, hidden):                               # hidden: (B, T, C)
        scores, last = super().forward(hidden[:, -1])        # (B, K)
        return scores, (last, hidden.shape)

    def backward(self, dscores, cache):                      # dscores: (B, K)
        last, shape = cache
        dhidden = np.zeros(shape, dscores.dtype)             # (B, T, C): only the last position was read
        dhidden[:, -1] = super().backward(dscores, last)     # (B, C)
        return dhidden


def finetune_loss(model, head, x, labels, lm_weight):
    """Forward and backward of L3 = L2 + lm_weight * L1 on one batch; the gradients add into
    model.grads and head.grads. x: (B, T) ids ending in the classify token; labels: (B,).
    Returns (L3, L2, L1) as floats."""
    logits, hidden, _ = model.forward_outputs(x)             # (B, T, V), (B, T, C)
    scores, head_cache = head.forward(hidden)                # (B, K)
    cls_loss, dscores = cross_entropy(scores[:, None], labels[:, None])  # L2, as a (B, 1, K) batch
    lm_loss, dlm = cross_entropy(logits[:, :-1], x[:, 1:])   # L1: each position predicts the next token
    dlogits = np.zeros_like(logits)                          # (B, T, V): the last position predicts nothing
    dlogits[:, :-1] = lm_weight * dlm
    model.backward(dlogits, dhidden=head.backward(dscores[:, 0], head_cache))
    return cls_loss + lm_weight * lm_loss, cls_loss, lm_loss


def make_optimizer(model, head, lr, weight_decay):
    """AdamW over the model's parameters and the head's (named `head.weight`, `head.bias`)."""
    params = [*model.named_parameters(), *((f"head.{n}", p) for n, p in head.named_parameters())]
    return AdamW(params, lr, weight_decay=weight_decay)


def optimizer_step(model, head, optimizer, losses_of, lr, grad_clip):
    """One AdamW step of model and head at rate lr on the gradients that `losses_of()` leaves while
    it computes (L3, L2, L1), clipped to norm grad_clip (0: not clipped); returns those losses."""
    model.zero_grad()
    head.zero_grad()
    losses = losses_of()
    grads = {**model.grads, **{f"head.{n}": g for n, g in head.named_grads()}}
    if grad_clip:
        clip_grad_norm(grads, grad_clip)
    optimizer.lr = lr
    optimizer.step(grads)
    return losses


def finetune_step(model, head, optimizer, x, labels, lm_weight, lr, grad_clip):
    """One AdamW step on one batch; returns (L3, L2, L1)."""
    x, labels = np.asarray(x), np.asarray(labels)
    return optimizer_step(model, head, optimizer, lambda: finetune_loss(model, head, x, labels, lm_weight),
                          lr, grad_clip)


def predict(model, head, x, batch_size=256):
    """The predicted class (N,) of each row of x (N, T): the head's highest score."""
    out = []
    for i in range(0, len(x), batch_size):
        hidden = model.forward_outputs(np.asarray(x[i:i + batch_size])).hidden  # (b, T, C)
        out.append(head.forward(hidden)[0].argmax(axis=-1))  # (b,)
    return np.concatenate(out)
