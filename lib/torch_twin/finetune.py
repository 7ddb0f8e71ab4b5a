"""Fine-tuning pieces of the torch twin (chapter 7, GPT-1's recipe): new token rows, the
classification head, and one step of L3 = L2 + lm_weight * L1 (autograd does the backward).

Read it beside `lib/numpy_twin/finetune.py`: same names, same order. The task and the loop
are framework-free and live in `lib/finetune.py`.
Shapes: B batch, T time, C = n_embd, V vocab, K classes.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn as nn

from ..weights import normal_rows
from .model import GPT
from .train import AdamW, clip_grad_norm, cross_entropy, named_grads


def add_tokens(model, n, seed=0):
    """A copy of `model` with n more tokens in its vocabulary: wte gains n rows drawn
    N(0, 0.02), every other weight is kept. The tied head then scores the new tokens too."""
    config = dataclasses.replace(model.config, vocab_size=model.config.vocab_size + n)
    state = model.state_dict_numpy()
    state["wte.weight"] = np.concatenate(                          # (V + n, C)
        [state["wte.weight"], normal_rows(n, config.n_embd, seed)])
    bigger = GPT(config)
    bigger.load_state_dict(state)
    return bigger.to(model.wte.weight.device)


class ClassifierHead(nn.Linear):
    """GPT-1's task head: a linear map from the hidden state at the last position (where the
    classify token sits) to one score per class. Weights N(0, 0.02), bias 0."""

    def __init__(self, n_embd, n_classes, seed=0):
        super().__init__(n_embd, n_classes)
        with torch.no_grad():
            self.weight.copy_(torch.as_tensor(normal_rows(n_classes, n_embd, seed)))
            self.bias.zero_()

    def forward(self, hidden):                                # (B, T, C) -> (B, K)
        return super().forward(hidden[:, -1])


def finetune_loss(model, head, x, labels, lm_weight):
    """L3 = L2 + lm_weight * L1 on one batch, as tensors (L3, L2, L1). x: (B, T) ids ending in the
    classify token; labels: (B,)."""
    logits, hidden, _ = model.forward_outputs(x)              # (B, T, V), (B, T, C)
    cls_loss = cross_entropy(head(hidden)[:, None], labels[:, None])  # L2, as a (B, 1, K) batch
    lm_loss = cross_entropy(logits[:, :-1], x[:, 1:])         # L1: each position predicts the next token
    return cls_loss + lm_weight * lm_loss, cls_loss, lm_loss


def make_optimizer(model, head, lr, weight_decay):
    """AdamW over the model's parameters and the head's (named `head.weight`, `head.bias`)."""
    params = [*model.named_parameters(), *((f"head.{n}", p) for n, p in head.named_parameters())]
    return AdamW(params, lr, weight_decay=weight_decay)


def optimizer_step(optimizer, losses_of, lr, grad_clip):
    """One AdamW step of the optimizer's parameters at rate lr on the gradient of L3, the first of the losses
    (L3, L2, L1) that `losses_of()` computes, clipped to norm grad_clip (0: not clipped). Returns
    the losses as 0-d tensors on the device, unread (a read would make a GPU wait for the host
    every step): the caller reads them when it reports."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    losses = losses_of()
    losses[0].backward()
    if grad_clip:
        clip_grad_norm(named_grads(optimizer.names.items()), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return tuple(loss.detach() for loss in losses)


def finetune_step(model, head, optimizer, x, labels, lm_weight, lr, grad_clip):
    """One AdamW step on one batch; returns (L3, L2, L1) as 0-d tensors on the device, unread."""
    device = model.wte.weight.device
    x, labels = torch.as_tensor(x, device=device), torch.as_tensor(labels, device=device)
    return optimizer_step(optimizer, lambda: finetune_loss(model, head, x, labels, lm_weight), lr, grad_clip)


@torch.no_grad()
def predict(model, head, x, batch_size=256):
    """The predicted class (N,) of each row of x (N, T): the head's highest score."""
    device = model.wte.weight.device
    out = []
    for i in range(0, len(x), batch_size):
        hidden = model.forward_outputs(torch.as_tensor(x[i:i + batch_size], device=device)).hidden  # (b, T, C)
        out.append(head(hidden).argmax(dim=-1))             # (b,), on the device
    return torch.cat(out).cpu().numpy()                      # (N,): one read, after the loop
