"""Post-training pieces of the torch twin (chapter 9): LoRA, the masked instruction-tuning loss,
response log-probabilities and the DPO loss (autograd does the backward).

Read it beside `lib/numpy_twin/posttrain.py`: same names, same order. The data, the template and
the loops are framework-free and live in the package `lib/posttrain/`.
Shapes: B batch, T time, V vocab, N = B T rows, r LoRA rank.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..weights import normal_rows
from .model import Linear
from .train import AdamW, clip_grad_norm, named_grads

LORA_TARGETS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")   # every Linear of a block


# ---- LoRA ------------------------------------------------------------------------------------
class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update: y = x W^T + b + (alpha / r) x A^T B^T,
    A (r, in) drawn N(0, 1 / in), B (out, r) zero, so the layer starts as the base layer. Only A
    and B are parameters; W and b are buffers, read, never changed."""

    def __init__(self, base, rank, alpha, seed=0):
        super().__init__()
        n_out, n_in = base.weight.shape
        if not isinstance(rank, int) or not 1 <= rank <= min(n_in, n_out):
            raise ValueError(f"rank must be an integer from 1 to {min(n_in, n_out)}, got {rank!r}")
        self.register_buffer("weight", base.weight.detach())  # frozen: not a parameter
        self.register_buffer("bias", None if base.bias is None else base.bias.detach())
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        A = torch.as_tensor(normal_rows(rank, n_in, seed) / (0.02 * math.sqrt(n_in)))
        self.lora_A = nn.Parameter(A.to(base.weight))                           # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(n_out, rank).to(base.weight))    # (out, r)

    def forward(self, x):                                     # (..., in) -> (..., out)
        return F.linear(x, self.weight, self.bias) + self.scale * ((x @ self.lora_A.T) @ self.lora_B.T)

    def merge(self):
        """A plain Linear with W + (alpha / r) B A: the same outputs, no extra product at inference."""
        n_out, n_in = self.weight.shape
        merged = Linear(n_in, n_out, bias=self.bias is not None).to(self.weight)
        with torch.no_grad():
            merged.weight.copy_(self.weight + self.scale * (self.lora_B @ self.lora_A))   # (out, in)
            if self.bias is not None:
                merged.bias.copy_(self.bias)
        return merged


def _targets(model, targets):
    for i, block in enumerate(model.h):
        for k, target in enumerate(targets):
            parent_name, name = target.split(".")
            yield i * len(targets) + k, getattr(block, parent_name), name


def add_lora(model, rank=8, alpha=16, targets=LORA_TARGETS, seed=0):
    """Wrap each block's `targets` Linears in LoRALinear (in place; layer j's A seeded seed + j)
    and return the model. Its trainable parameters are then the LoRA matrices only: every other
    parameter stops asking for gradients."""
    for j, parent, name in _targets(model, targets):
        setattr(parent, name, LoRALinear(getattr(parent, name), rank, alpha, seed + j))
    for name, p in model.named_parameters():
        p.requires_grad_(name.rsplit(".", 1)[-1].startswith("lora_"))
    return model


def merge_lora(model):
    """Replace every LoRALinear by its merged Linear (in place); returns the model."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
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
    """Mean of -log p(y) over the positions where mask is 1 (a scalar tensor).
    logits: (B, T, V); y: (B, T) ids; mask: (B, T) of 0 and 1."""
    losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")  # (N,)
    mask = mask.flatten().to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


def sft_step(model, optimizer, x, y, mask, lr, grad_clip):
    """One AdamW step of the masked loss on one batch; returns the loss, a 0-d tensor, unread."""
    x, y, mask = (torch.as_tensor(a, device=model.wte.weight.device) for a in (x, y, mask))
    loss = masked_cross_entropy(model(x), y, mask)
    return _update(model, optimizer, lr, grad_clip, loss)


def _update(model, optimizer, lr, grad_clip, loss):
    for group in optimizer.param_groups:
        group["lr"] = lr
    loss.backward()
    if grad_clip:
        clip_grad_norm(named_grads(optimizer.names.items()), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


# ---- preferences: DPO -----------------------------------------------------------------------
def response_logp(model, x, y, mask):
    """(B,) sum of log p(y) over each row's masked positions (its response)."""
    logp = torch.log_softmax(model(x), dim=-1)        # (B, T, V)
    picked = logp.gather(-1, y[..., None])[..., 0]            # (B, T)
    return (picked * mask.to(picked.dtype)).sum(dim=1)        # (B,)


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp, beta):
    """DPO's loss, the mean over the batch of -log sigmoid(beta m), m = (pc - rc) - (pr - rr);
    -log sigmoid(z) = softplus(-z), which torch computes without overflow."""
    z = beta * ((policy_chosen_logp - ref_chosen_logp) - (policy_rejected_logp - ref_rejected_logp))  # (B,)
    return F.softplus(-z).mean()


def dpo_step(model, optimizer, x, y, mask, ref_logp, beta, lr, grad_clip):
    """One AdamW step of DPO. x, y, mask: (2B, T), the B chosen responses then the B rejected
    ones to the same prompts; ref_logp: (2B,) the reference model's `response_logp` of the same
    rows. Returns the loss, a 0-d tensor, unread."""
    device = model.wte.weight.device
    x, y, mask, ref_logp = (torch.as_tensor(a, device=device) for a in (x, y, mask, ref_logp))
    logp = response_logp(model, x, y, mask)                   # (2B,)
    B = len(logp) // 2
    loss = dpo_loss(logp[:B], logp[B:], ref_logp[:B].to(logp.dtype), ref_logp[B:].to(logp.dtype), beta)
    return _update(model, optimizer, lr, grad_clip, loss)
