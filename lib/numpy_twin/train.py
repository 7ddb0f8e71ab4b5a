"""Training pieces of the numpy twin: the loss and its gradient, AdamW, gradient clipping, one step.

Read it beside `lib/torch_twin/train.py`: same names, same order. The loop around them
(schedule, batches, validation, checkpoints) is framework-free and lives in `lib/train.py`.
Shapes: B batch, T time, V vocab.
"""
from __future__ import annotations

import math

import numpy as np

from ..allocator import keep_freed_memory
from ..config import uses_weight_decay
from ..dropout import eval_mode


def log_softmax(logits):                                     # (..., V) -> (..., V)
    """Stable: log(sum(exp(z))) computed after subtracting the row max, so no exponent overflows."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy(logits, targets):
    """Mean of -log p(target) over all B*T positions, and its gradient w.r.t. the logits.

    logits: (B, T, V) floats; targets: (B, T) ints in [0, V). Returns (loss: float, dlogits (B, T, V)).
    The gradient of the mean is (softmax - one_hot(target)) / (B*T).
    """
    B, T, V = logits.shape
    targets = np.asarray(targets)
    if targets.shape != (B, T):
        raise ValueError(f"targets must have shape {(B, T)} to match logits {logits.shape}, "
                         f"got {targets.shape}")
    if targets.min() < 0 or targets.max() >= V:
        raise ValueError(f"targets must lie in [0, {V}), got min {targets.min()} max {targets.max()}")
    rows, cols = np.arange(B * T), targets.reshape(-1)       # (B*T,), (B*T,)
    dlogits = log_softmax(logits)                            # (B, T, V), log p for now
    loss = -dlogits.reshape(B * T, V)[rows, cols].mean()
    np.exp(dlogits, out=dlogits)                             # p, in place: one (B, T, V) buffer
    dlogits.reshape(B * T, V)[rows, cols] -= 1.0             # p - one_hot
    dlogits *= 1.0 / (B * T)
    return float(loss), dlogits


def perplexity(loss):
    """exp(mean cross-entropy): the effective number of equally likely choices per token."""
    return math.exp(loss)


class AdamW:
    """Adam with decoupled weight decay, the arithmetic of `torch.optim.AdamW`, updating the
    model's arrays in place (one scratch array at a time, so memory stays at params + grads +
    two moments). Decay applies to 2-D weights and embeddings only (`uses_weight_decay`).

    params: (name, array) pairs, e.g. `model.named_parameters()`. Per step t, for each parameter:
        p -= lr * wd * p                      (decay, decoupled from the gradient)
        m = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2
        p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
    """
    steps = 0                                                # updates taken (torch's: a property)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.params = dict(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.decay = {name: uses_weight_decay(name, p.ndim) for name, p in self.params.items()}
        self.exp_avg = {name: np.zeros_like(p) for name, p in self.params.items()}     # m
        self.exp_avg_sq = {name: np.zeros_like(p) for name, p in self.params.items()}  # v

    def step(self, grads):
        """One update from `grads` ({name: gradient}, e.g. `model.grads`) at the current `self.lr`."""
        self.steps += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1 ** self.steps)
        sqrt_bc2 = math.sqrt(1 - b2 ** self.steps)
        for name, p in self.params.items():
            g, m, v = grads[name], self.exp_avg[name], self.exp_avg_sq[name]
            tmp = np.empty_like(p)
            if self.decay[name]:
                p *= 1 - self.lr * self.weight_decay
            m *= b1
            m += np.multiply(g, 1 - b1, out=tmp)             # m = b1 m + (1 - b1) g
            v *= b2
            np.multiply(g, g, out=tmp)
            v += np.multiply(tmp, 1 - b2, out=tmp)           # v = b2 v + (1 - b2) g^2
            np.sqrt(v, out=tmp)
            tmp /= sqrt_bc2
            tmp += self.eps                                  # sqrt(v_hat) + eps
            np.divide(m, tmp, out=tmp)
            p -= np.multiply(tmp, step_size, out=tmp)

    def state_arrays(self):
        """The moments as {"exp_avg.NAME": m, "exp_avg_sq.NAME": v} (same keys in both twins)."""
        return {**{f"exp_avg.{n}": m for n, m in self.exp_avg.items()},
                **{f"exp_avg_sq.{n}": v for n, v in self.exp_avg_sq.items()}}

    def load_state_arrays(self, arrays, steps):
        """Restore what `state_arrays()` gave and the number of steps taken."""
        for name in self.params:
            self.exp_avg[name][...] = arrays[f"exp_avg.{name}"]
            self.exp_avg_sq[name][...] = arrays[f"exp_avg_sq.{name}"]
        self.steps = int(steps)


def grad_norm(grads):
    """The global L2 norm: all gradients taken together as one long vector."""
    return math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))


def clip_grad_norm(grads, max_norm):
    """Scale every gradient by max_norm / norm when the global L2 norm over all of them exceeds
    max_norm (torch's formula, with 1e-6 added to the norm). Returns the norm before clipping."""
    norm = grad_norm(grads)
    scale = max_norm / (norm + 1e-6)
    if scale < 1.0:
        for g in grads.values():
            g *= scale
    return norm


def train_step(model, optimizer, micro_batches, lr, grad_clip):
    """One optimizer step over the micro-batches [(x, y), ...] (gradient accumulation): each
    micro-batch's gradient is scaled by 1/k, so k micro-batches equal one batch k times larger.
    Returns (mean loss, gradient norm before clipping). A non-finite loss or gradient raises
    FloatingPointError before the weights change."""
    model.zero_grad()
    k = len(micro_batches)
    loss = 0.0
    for x, y in micro_batches:
        micro_loss, dlogits = cross_entropy(model.forward(x), y)
        if not math.isfinite(micro_loss):
            raise FloatingPointError(f"the loss is {micro_loss}")
        dlogits *= 1.0 / k
        model.backward(dlogits)
        loss += micro_loss / k
    grads = model.grads
    norm = clip_grad_norm(grads, grad_clip) if grad_clip else grad_norm(grads)
    if not math.isfinite(norm):
        raise FloatingPointError(f"the gradient norm is {norm}")
    optimizer.lr = lr
    optimizer.step(grads)
    return loss, norm


def estimate_loss(model, batches):
    """Mean cross-entropy over [(x, y), ...] in evaluation mode (no dropout; no backward follows,
    the gradients are untouched)."""
    total = 0.0
    with eval_mode(model):
        for x, y in batches:
            loss, _ = cross_entropy(model.forward(x), y)
            total += loss
    return total / len(batches)


class Trainer:
    """What the framework-free loop in `lib.train` asks of a twin: a step, an evaluation, and
    the optimizer's state for checkpoints, for `model` trained as `config` (a
    `lib.config.TrainConfig`) says: AdamW's lr, betas and weight_decay, grad_clip, and the seed
    of dropout's masks. The numpy twin runs in one process on the CPU: device, dtype and compile
    must stay at their defaults."""
    rank, world_size, skips_overflow = 0, 1, False

    def __init__(self, model, config):
        model_dtype = next(p for _, p in model.named_parameters()).dtype.name
        if config.device not in (None, "cpu"):
            raise ValueError(f"the numpy twin runs on the CPU only; got device={config.device!r} (use --twin torch)")
        if config.dtype not in (None, model_dtype):
            raise ValueError(f"the numpy twin computes in the model's own dtype ({model_dtype}); "
                             f"got dtype={config.dtype!r} (mixed precision needs --twin torch)")
        if config.compile:
            raise ValueError("compile=True needs the torch twin (torch.compile)")
        self.model, self.grad_clip = model.train(), config.grad_clip
        model.seed_dropout(config.seed)                      # dropout's masks follow the run's seed
        self.optimizer = AdamW(model.named_parameters(), config.lr, config.betas, weight_decay=config.weight_decay)
        keep_freed_memory()                                  # each step's temporaries reuse freed memory

    def step(self, micro_batches, lr):
        return train_step(self.model, self.optimizer, micro_batches, lr, self.grad_clip)

    def evaluate(self, batches):
        return estimate_loss(self.model, batches)

    def model_state(self):
        return self.model.state_dict()

    def state(self):
        """(arrays, meta) to checkpoint besides the weights: AdamW's moments, dropout's generator."""
        return self.optimizer.state_arrays(), {"optimizer_steps": self.optimizer.steps,
                                               "dropout_rng": self.model.dropout_rng.bit_generator.state}

    def load_state(self, model_state, arrays, meta):
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_arrays(arrays, meta["optimizer_steps"])
        if "dropout_rng" in meta:
            self.model.dropout_rng.bit_generator.state = meta["dropout_rng"]

    def close(self):
        pass
