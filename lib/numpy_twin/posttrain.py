"""Post-training pieces of the numpy twin (chapter 9): LoRA with its hand-written backward, the
masked instruction-tuning loss, response log-probabilities and the DPO loss with its gradient.

Read it beside `lib/torch_twin/posttrain.py`: same names, same order. The data, the template and
the loops are framework-free and live in the package `lib/posttrain/`.
Shapes: B batch, T time, V vocab, N = B T rows, r LoRA rank.
"""
from __future__ import annotations

import math

import numpy as np

from ..weights import normal_rows
from .model import Linear, Module
from .modern import sigmoid
from .train import AdamW, clip_grad_norm, log_softmax

LORA_TARGETS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")   # every Linear of a block


# ---- LoRA ------------------------------------------------------------------------------------
class LoRALinear(Module):
    """A frozen Linear plus a trainable low-rank update: y = x W^T + b + (alpha / r) x A^T B^T,
    A (r, in) drawn N(0, 1 / in), B (out, r) zero, so the layer starts as the base layer. Only A
    and B are parameters; W and b are kept, read, never changed."""
    param_names = ("lora_A", "lora_B")

    def __init__(self, base, rank, alpha, seed=0):
        n_out, n_in = base.weight.shape
        if not isinstance(rank, int) or not 1 <= rank <= min(n_in, n_out):
            raise ValueError(f"rank must be an integer from 1 to {min(n_in, n_out)}, got {rank!r}")
        self.weight, self.bias = base.weight, base.bias      # frozen: not in param_names
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        dtype = base.weight.dtype
        self.lora_A = (normal_rows(rank, n_in, seed) / (0.02 * math.sqrt(n_in))).astype(dtype)  # (r, in)
        self.lora_B = np.zeros((n_out, rank), dtype)                                            # (out, r)
        self.zero_grad()

    def forward(self, x):                                    # x: (..., in)
        x2 = x.reshape(-1, x.shape[-1])                      # (N, in)
        u = x2 @ self.lora_A.T                               # (N, r)
        y = x2 @ self.weight.T + self.scale * (u @ self.lora_B.T)  # (N, out)
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], -1), (x, u)          # (..., out)

    def backward(self, dy, cache):                           # dy: (..., out)
        x, u = cache
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])   # (N, out), (N, in)
        self.grads["lora_B"] += self.scale * (dy2.T @ u)     # (out, r)
        du = self.scale * (dy2 @ self.lora_B)                # (N, r)
        self.grads["lora_A"] += du.T @ x2                    # (r, in)
        return (dy2 @ self.weight + du @ self.lora_A).reshape(x.shape)  # (..., in): W gets no gradient

    def merge(self):
        """A plain Linear with W + (alpha / r) B A: the same outputs, no extra product at inference."""
        n_out, n_in = self.weight.shape
        merged = Linear(n_in, n_out, bias=self.bias is not None)
        merged.weight = self.weight + self.scale * (self.lora_B @ self.lora_A)   # (out, in)
        if self.bias is not None:
            merged.bias = self.bias.copy()
        merged.zero_grad()
        return merged


def _targets(model, targets):
    for i, block in enumerate(model.h):
        for k, target in enumerate(targets):
            parent_name, name = target.split(".")
            yield i * len(targets) + k, getattr(block, parent_name), name


def add_lora(model, rank=8, alpha=16, targets=LORA_TARGETS, seed=0):
    """Wrap each block's `targets` Linears in LoRALinear (in place; layer j's A seeded seed + j)
    and return the model. Its trainable parameters are then the LoRA matrices only."""
    for j, parent, name in _targets(model, targets):
        setattr(parent, name, LoRALinear(getattr(parent, name), rank, alpha, seed + j))
    return model


def merge_lora(model):
    """Replace every LoRALinear by its merged Linear (in place); returns the model."""
    for module in list(model.modules()):
        for name, child in list(vars(module).items()):
            if isinstance(child, LoRALinear):
                setattr(module, name, child.merge())
    return model


def trainable_parameters(model):
    """[(name, parameter)]: the LoRA matrices when the model has any, else every parameter."""
    params = list(model.named_parameters())
    lora = [(n, p) for n, p in params if n.rsplit(".", 1)[-1].startswith("lora_")]
    return lora or params


def make_optimizer(model, lr, weight_decay):
    """AdamW over `trainable_parameters(model)`."""
    return AdamW(trainable_parameters(model), lr, weight_decay=weight_decay)


# ---- instruction tuning: the loss on response tokens only --------------------------------------
def masked_cross_entropy(logits, y, mask):
    """Mean of -log p(y) over the positions where mask is 1, and its gradient w.r.t. the logits.
    logits: (B, T, V); y: (B, T) ids; mask: (B, T) of 0 and 1. Returns (loss: float, dlogits)."""
    B, T, V = logits.shape
    weight = mask.reshape(-1) / mask.sum()                   # (N,): 1 / (masked positions), or 0
    rows, cols = np.arange(B * T), y.reshape(-1)             # (N,), (N,)
    dlogits = log_softmax(logits).reshape(B * T, V)          # (N, V), log p for now
    loss = -(dlogits[rows, cols] * weight).sum()
    np.exp(dlogits, out=dlogits)                             # p
    dlogits[rows, cols] -= 1.0                               # p - one_hot
    dlogits *= weight[:, None].astype(dlogits.dtype)         # masked positions only
    return float(loss), dlogits.reshape(B, T, V)


def sft_step(model, optimizer, x, y, mask, lr, grad_clip):
    """One AdamW step of the masked loss on one batch; returns the loss."""
    model.zero_grad()
    x, y, mask = np.asarray(x), np.asarray(y), np.asarray(mask)
    loss, dlogits = masked_cross_entropy(model.forward(x), y, mask)
    model.backward(dlogits)
    return _update(model, optimizer, lr, grad_clip, loss)


def _update(model, optimizer, lr, grad_clip, loss):
    grads = {name: model.grads[name] for name in optimizer.params}   # the trainable ones only
    if grad_clip:
        clip_grad_norm(grads, grad_clip)
    optimizer.lr = lr
    optimizer.step(grads)
    return loss


# ---- preferences: DPO -----------------------------------------------------------------------
def response_logp(model, x, y, mask):
    """(B,) sum of log p(y) over each row's masked positions (its response), and the cache that
    `response_logp_backward` needs."""
    logp = log_softmax(model.forward(np.asarray(x)))         # (B, T, V)
    picked = np.take_along_axis(logp, y[..., None], axis=-1)[..., 0]   # (B, T)
    return (picked * mask).sum(axis=1), (logp, y, mask)      # (B,)


def response_logp_backward(model, dlogp, cache):
    """Backward of `response_logp`: dlogp (B,) into the model's gradients. d logp_t[y_t] /
    d logits_t = one_hot(y_t) - softmax_t at each masked position."""
    logp, y, mask = cache
    w = (dlogp[:, None] * mask).astype(logp.dtype)           # (B, T)
    dlogits = -np.exp(logp) * w[..., None]                   # (B, T, V): -p w
    np.put_along_axis(dlogits, y[..., None], np.take_along_axis(dlogits, y[..., None], -1) + w[..., None], -1)
    model.backward(dlogits)


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp, beta):
    """DPO's loss, the mean over the batch of -log sigmoid(beta m), m = (pc - rc) - (pr - rr),
    and its gradient w.r.t. the four (B,) log-probabilities, in their order.
    -log sigmoid(z) = log(1 + exp(-z)) is computed as logaddexp(0, -z), which never overflows;
    its derivative is -sigmoid(-z), which tanh keeps finite for any z."""
    B = len(policy_chosen_logp)
    z = beta * ((policy_chosen_logp - ref_chosen_logp) - (policy_rejected_logp - ref_rejected_logp))  # (B,)
    loss = float(np.mean(np.logaddexp(0.0, -z)))
    g = -beta * sigmoid(-z) / B                              # (B,): dloss / dpc
    return loss, (g, -g, -g, g)


def dpo_step(model, optimizer, x, y, mask, ref_logp, beta, lr, grad_clip):
    """One AdamW step of DPO. x, y, mask: (2B, T), the B chosen responses then the B rejected
    ones to the same prompts; ref_logp: (2B,) the reference model's `response_logp` of the same
    rows. Returns the loss."""
    model.zero_grad()
    y, mask, ref_logp = np.asarray(y), np.asarray(mask), np.asarray(ref_logp)
    logp, cache = response_logp(model, x, y, mask)           # (2B,)
    B = len(logp) // 2
    loss, (dchosen, drejected, _, _) = dpo_loss(logp[:B], logp[B:], ref_logp[:B], ref_logp[B:], beta)
    response_logp_backward(model, np.concatenate([dchosen, drejected]), cache)
    return _update(model, optimizer, lr, grad_clip, loss)
