"""Instruction tuning (`sft`) and DPO (`dpo`): the loops, the same for both twins, and their settings.

Each twin's step, `LoRALinear` and DPO loss live in `lib/numpy_twin/posttrain.py` and
`lib/torch_twin/posttrain.py`; `dpo_loss` computes DPO's loss with the twin of its inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import shuffled_batches
from ..settings import LoopSettings, check_fields
from ..twins import as_model_ids, twin_module, twin_of
from .scores import sequence_logps
from .template import chat_batch


@dataclass(frozen=True)
class SFTSettings(LoopSettings):
    """How `sft` trains (`lib.settings.LoopSettings`), with AdamW's `weight_decay`."""
    weight_decay: float

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, non_negative=("weight_decay",))


@dataclass(frozen=True)
class DPOSettings(LoopSettings):
    """How `dpo` trains (`lib.settings.LoopSettings`), at DPO's `beta`; `small_beta` is the beta
    of the experiment's third DPO run (`lib.posttrain.experiment`)."""
    beta: float
    small_beta: float

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, positive=("beta", "small_beta"))


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp, beta):
    """DPO's loss, the mean over the batch of -log sigmoid(beta ((pc - rc) - (pr - rr))), stable
    for any margin: numpy arrays give the numpy twin's value (a float), torch tensors the torch
    twin's (a tensor autograd can differentiate)."""
    args = (policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp)
    if hasattr(policy_chosen_logp, "detach"):
        return twin_module("torch", "posttrain").dpo_loss(*args, beta)
    arrays = [np.asarray(a, np.float64) for a in args]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError(f"the four log-probabilities must be (B,) arrays of one shape, got "
                         f"{[a.shape for a in arrays]}")
    return twin_module("numpy", "posttrain").dpo_loss(*arrays, beta)[0]


def sft(model, pairs, settings, mask_prompt=True, *, progress=True):
    """Instruction-tune `model` (either twin; with LoRA layers, those only) on (prompt ids,
    response ids) pairs as `settings` (an `SFTSettings`) say: `steps` AdamW steps of the masked
    loss (every real token's loss without mask_prompt), batches from shuffled passes, linear warmup
    over a tenth of the steps then cosine decay to 0. Returns {"loss": one a step,
    "optimizer_bytes": AdamW's state at the end}."""
    from ..progress import progress_bar
    from ..schedule import lr_at

    twin = twin_module(twin_of(model), "posttrain")
    x, y, mask = chat_batch(pairs, mask_prompt, model.config.n_ctx)
    s = settings
    optimizer = twin.make_optimizer(model, s.lr, s.weight_decay)
    losses = []
    with progress_bar(s.steps, "instruction tuning", disable=not progress) as bar:
        for step, rows in enumerate(shuffled_batches(len(x), s.steps, s.batch_size, s.seed)):
            lr_now = lr_at(step, s.lr, 0.0, max(1, s.steps // 10), s.steps)
            losses.append(twin.sft_step(model, optimizer, *(as_model_ids(model, a[rows]) for a in (x, y, mask)),
                                        lr_now, s.grad_clip))
            bar.update(1)
    return {"loss": [float(loss) for loss in losses], "optimizer_bytes": optimizer_bytes(optimizer)}


def reference_logps(reference, triples):
    """(N, 2) float64: the reference model's log p(chosen), log p(rejected) of each triple."""
    return sequence_logps(reference, [(p, c) for p, c, r in triples] + [(p, r) for p, c, r in triples]
                          ).reshape(2, -1).T


def dpo(model, triples, ref_logp, settings, *, progress=True):
    """DPO on (prompt, chosen, rejected) triples as `settings` (a `DPOSettings`) say: `steps` AdamW
    steps at DPO's `beta`, ref_logp (N, 2) the frozen reference's log-probabilities of each chosen
    and rejected response (`reference_logps`; zeros for DPO without a reference). Returns {"loss":
    one a step, "optimizer_bytes": AdamW's state}."""
    from ..progress import progress_bar
    from ..schedule import lr_at

    twin = twin_module(twin_of(model), "posttrain")
    ref_logp = np.asarray(ref_logp, np.float64)
    s = settings
    optimizer = twin.make_optimizer(model, s.lr, 0.0)
    losses = []
    with progress_bar(s.steps, "DPO", disable=not progress) as bar:
        for step, rows in enumerate(shuffled_batches(len(triples), s.steps, s.batch_size, s.seed)):
            batch = [(triples[i][0], triples[i][1]) for i in rows] + [(triples[i][0], triples[i][2]) for i in rows]
            x, y, mask = chat_batch(batch)                  # (2B, T): chosen rows, then rejected rows
            ref = np.concatenate([ref_logp[rows, 0], ref_logp[rows, 1]])
            lr_now = lr_at(step, s.lr, 0.0, max(1, s.steps // 10), s.steps)
            losses.append(twin.dpo_step(model, optimizer, *(as_model_ids(model, a) for a in (x, y, mask)),
                                        ref if twin_of(model) == "numpy" else ref.astype(np.float32), s.beta,
                                        lr_now, s.grad_clip))
            bar.update(1)
    return {"loss": [float(loss) for loss in losses], "optimizer_bytes": optimizer_bytes(optimizer)}


def optimizer_bytes(optimizer):
    """The bytes of AdamW's state, its two moments, as the optimizer holds them (either twin)."""
    return int(sum(a.nbytes for a in optimizer.state_arrays().values()))
