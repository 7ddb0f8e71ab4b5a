"""Training pieces of the torch twin: the loss, AdamW, gradient clipping, one step, and the
Trainer that `lib.train` drives (its device side, GPU precision and DistributedDataParallel, is
`lib/torch_twin/gpu.py`).

Read it beside `lib/numpy_twin/train.py`: same names, same order; autograd replaces the
hand-written gradients. Three more: `named_grads` (the {name: gradient} dict that the numpy
model's `grads` is), `accumulate` (a step's first half) and `queue_step`, the step the Trainer
takes on a device without waiting for it. The loop around them is framework-free and
lives in `lib/train.py`.
Shapes: B batch, T time, V vocab.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from ..config import uses_weight_decay
from ..dropout import eval_mode
from .gpu import DeviceSide


def cross_entropy(logits, targets):
    """Mean of -log p(target) over all B*T positions (torch's log-softmax is the stable one).
    logits: (B, T, V); targets: (B, T) -> a scalar tensor; autograd gives its gradient."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (B*T, V), (B*T,)


def perplexity(loss):
    """exp(mean cross-entropy): the effective number of equally likely choices per token."""
    return math.exp(float(loss))


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW with two groups: decay for 2-D weights and embeddings
    (`uses_weight_decay`), none for biases and LayerNorm parameters. torch's fused kernel, on
    the CPU too: one pass per parameter instead of a dozen, so the whole step is faster there
    too.

    params: (name, parameter) pairs, e.g. `model.named_parameters()`."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.names = dict(params)                            # name -> parameter
        decay = [p for n, p in self.names.items() if uses_weight_decay(n, p.ndim)]
        no_decay = [p for n, p in self.names.items() if not uses_weight_decay(n, p.ndim)]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        fused = all(p.device.type in ("cpu", "cuda") for p in self.names.values())
        super().__init__(groups, lr=lr, betas=betas, eps=eps, fused=fused or None)

    @property
    def steps(self):
        first = next(iter(self.state.values()), None)
        return 0 if first is None else int(first["step"])

    def state_arrays(self):
        """The moments as {"exp_avg.NAME": m, "exp_avg_sq.NAME": v} (same keys in both twins)."""
        arrays = {}
        for key in ("exp_avg", "exp_avg_sq"):
            for name, p in self.names.items():
                value = self.state[p][key] if p in self.state else torch.zeros_like(p)
                arrays[f"{key}.{name}"] = value.detach().cpu().numpy()
        return arrays

    def load_state_arrays(self, arrays, steps):
        """Restore what `state_arrays()` gave and the number of steps taken."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state = {index[id(p)]: {"step": torch.tensor(float(steps)),
                                "exp_avg": torch.as_tensor(arrays[f"exp_avg.{n}"]),
                                "exp_avg_sq": torch.as_tensor(arrays[f"exp_avg_sq.{n}"])}
                 for n, p in self.names.items()}
        self.load_state_dict({"state": state, "param_groups": self.state_dict()["param_groups"]})


def named_grads(named_parameters):
    """{name: gradient} of the (name, parameter) pairs that have one: what the numpy twin's
    `model.grads` holds, for `grad_norm` and `clip_grad_norm`."""
    return {name: p.grad for name, p in named_parameters if p.grad is not None}


def grad_norm(grads):
    """The global L2 norm: all gradients taken together as one long vector (a 0-d tensor)."""
    return torch.nn.utils.get_total_norm(list(grads.values()))


def clip_grad_norm(grads, max_norm):
    """Scale every gradient by max_norm / norm when the global L2 norm over all of them exceeds
    max_norm (torch's clip_grad_norm_, with 1e-6 added to the norm). Returns the norm before
    clipping (a tensor). The scale stays on the device: no read of the norm here."""
    norm = grad_norm(grads)
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads.values():
        g.mul_(scale)
    return norm


def accumulate(model, optimizer, micro_batches, lr, grad_clip, autocast=contextlib.nullcontext, scaler=None):
    """The first half of a step: set the rate, backpropagate the micro-batches [(x, y), ...]
    (gradient accumulation: each micro-batch's loss is scaled by 1/k, so k micro-batches equal one
    batch k times larger), then clip. Under DDP, gradients are averaged across processes on the
    last micro-batch only, and the loss is the mean over all processes. Returns (mean loss,
    gradient norm before clipping) as 0-d tensors on the device: nothing here waits for it."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    k = len(micro_batches)
    loss = torch.zeros((), device=micro_batches[0][0].device)
    for i, (x, y) in enumerate(micro_batches):
        wait = i < k - 1 and isinstance(model, DistributedDataParallel)
        with model.no_sync() if wait else contextlib.nullcontext():
            with autocast():
                micro_loss = cross_entropy(model(x), y) / k
            (scaler.scale(micro_loss) if scaler else micro_loss).backward()
        loss += micro_loss.detach()
    if dist.is_initialized():
        dist.all_reduce(loss)
        loss /= dist.get_world_size()
    if scaler:
        scaler.unscale_(optimizer)
    grads = named_grads(optimizer.names.items())
    norm = clip_grad_norm(grads, grad_clip) if grad_clip else grad_norm(grads)
    return loss, norm


def train_step(model, optimizer, micro_batches, lr, grad_clip, autocast=contextlib.nullcontext, scaler=None):
    """One optimizer step over the micro-batches [(x, y), ...] (`accumulate`, then AdamW).
    Returns (mean loss, gradient norm before clipping) as floats; a non-finite loss or gradient
    raises FloatingPointError before the weights change."""
    loss, norm = accumulate(model, optimizer, micro_batches, lr, grad_clip, autocast, scaler)
    loss, norm = loss.item(), norm.item()
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss}")
    if not math.isfinite(norm) and scaler is None:           # with a scaler, inf means "lower the scale"
        raise FloatingPointError(f"the gradient norm is {norm}")
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, norm


def queue_step(model, optimizer, micro_batches, lr, grad_clip, halted, autocast=contextlib.nullcontext,
               scaler=None):
    """`train_step` for a loop that must not wait for the device each step (a GPU would idle
    while the host reads a number): the loss and norm stay on the device as 0-d tensors, for the
    host to read when it reports them, and so does the check that they are finite. A non-finite
    one sets `halted` (a boolean 0-d tensor owned by the caller), and while it is set AdamW's
    fused kernel skips every update (its `found_inf`): when the host reads the losses later, the
    weights and moments are still those from before the first bad step.
    With a GradScaler (float16), a non-finite gradient means the scaled loss overflowed: that
    step alone is skipped and `scaler.update()` lowers the scale, both on the device (unscale_
    in `accumulate` recorded the overflow); only a non-finite loss halts."""
    loss, norm = accumulate(model, optimizer, micro_batches, lr, grad_clip, autocast, scaler)
    halted |= ~torch.isfinite(loss)
    if scaler is None:
        halted |= ~torch.isfinite(norm)
    optimizer.found_inf = (halted | ~torch.isfinite(norm)).float()
    optimizer.step()
    del optimizer.found_inf
    if scaler:
        scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss, norm


@torch.no_grad()
def estimate_loss(model, batches, autocast=contextlib.nullcontext):
    """Mean cross-entropy over [(x, y), ...] in evaluation mode (no dropout), without building a
    graph. The losses stay on the device until one read at the end (a GPU would idle at each)."""
    losses = []
    with eval_mode(model):
        for x, y in batches:
            with autocast():
                losses.append(cross_entropy(model(x), y))
    return torch.stack(losses).double().mean().item()


class Trainer:
    """What the framework-free loop in `lib.train` asks of a twin: a step, an evaluation, and
    the optimizer's and RNGs' state for checkpoints, for `model` trained as `config` (a
    `lib.config.TrainConfig`) says: AdamW's lr, betas and weight_decay, grad_clip, the seed of
    dropout's masks, and the device side (`lib.torch_twin.gpu.DeviceSide`: device, dtype,
    compile; under torchrun, DistributedDataParallel)."""

    def __init__(self, model, config):
        self.gpu = gpu = DeviceSide(config.device, config.dtype)  # checks dtype before anything else
        self.rank, self.world_size, self.device = gpu.rank, gpu.world_size, gpu.device
        self.grad_clip, self.model = config.grad_clip, model.to(gpu.device).train()
        if model.config.dropout > 0:                         # dropout's masks follow the run's seed;
            torch.manual_seed(config.seed + self.rank)       # without dropout, torch's generator is left alone
        self.autocast, self.scaler = gpu.autocast, gpu.scaler
        self.skips_overflow = gpu.scaler is not None         # lib.train records a skipped step's norm, goes on
        gpu.pad_head(model)
        self.optimizer = AdamW(model.named_parameters(), config.lr, config.betas, weight_decay=config.weight_decay)
        self.halted = torch.zeros((), dtype=torch.bool, device=gpu.device)  # set by a step that stops (queue_step)
        self.compute = gpu.wrap(model, config.compile)

    def step(self, micro_batches, lr):
        """(mean loss, gradient norm) of one optimizer step, left on the device unread
        (`queue_step`; lib.train reads them when it reports). With float16's GradScaler a
        non-finite norm is a skipped step, not an error. An optimizer without the fused kernel
        (no `found_inf` to skip on the device) reads them at once (`train_step`)."""
        micro_batches = self.gpu.to_device(micro_batches)
        if not self.optimizer.defaults["fused"]:
            return train_step(self.compute, self.optimizer, micro_batches, lr, self.grad_clip, self.autocast,
                              self.scaler)
        return queue_step(self.compute, self.optimizer, micro_batches, lr, self.grad_clip, self.halted,
                          self.autocast, self.scaler)

    def evaluate(self, batches):
        """Mean loss over this process's batches, averaged over all processes."""
        return self.gpu.mean_over_processes(estimate_loss(self.compute, self.gpu.to_device(batches), self.autocast))

    def model_state(self):
        return self.model.state_dict_numpy()

    def state(self):
        """(arrays, meta) to checkpoint besides the weights: AdamW's moments, RNG states."""
        arrays = self.optimizer.state_arrays()
        arrays["rng.torch_cpu"] = torch.get_rng_state().numpy()
        arrays.update(self.gpu.rng_arrays())
        meta = {"optimizer_steps": self.optimizer.steps}
        if self.scaler:
            meta["grad_scaler"] = self.scaler.state_dict()
        return arrays, meta

    def load_state(self, model_state, arrays, meta):
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_arrays(arrays, meta["optimizer_steps"])
        torch.set_rng_state(torch.from_numpy(np.array(arrays["rng.torch_cpu"])))
        self.gpu.load_rng_arrays(arrays)
        if self.scaler and "grad_scaler" in meta:
            self.scaler.load_state_dict(meta["grad_scaler"])

    def close(self):
        """Leave the process group if this trainer joined it; restore the unpadded head."""
        self.gpu.close()
