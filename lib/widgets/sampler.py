"""Sampling every setting of the temperature widget in one batched generation."""
from __future__ import annotations

import numpy as np

from .. import sampling
from ..sampling import Sampling
from ..twins import to_numpy


class SettingsSampler:
    """Samples row i of a batch with its own settings[i] = (temperature, top_k, top_p), through
    the sampling steps of the logits' twin (lib.sampling's for numpy arrays, the torch twin's
    on-device versions for tensors). Every row uses the same uniform number at each step, from
    one Generator seeded as lib.sampling.Sampler's: row i picks exactly the tokens that
    `model.generate(prompt, n, temperature=..., top_k=..., top_p=..., seed=seed)` picks, and two
    rows differ only because their settings do."""

    def __init__(self, settings, seed):
        for t, k, p in settings:
            Sampling(t, k, p)                                # checks them
        self.rng = np.random.default_rng(seed)
        temperature = np.array([t if t else 1.0 for t, _, _ in settings])     # (B,), 1 for greedy rows
        self.groups = []                                     # rows sharing a cut: (k, p, rows, their T)
        for k, p in dict.fromkeys((k, p) for t, k, p in settings if t):
            rows = np.array([i for i, (t, k2, p2) in enumerate(settings) if t and (k2, p2) == (k, p)])
            self.groups.append((k, p, rows, temperature[rows, None]))

    def __call__(self, logits):                              # (B, V) -> (B,) ids, same twin
        if hasattr(logits, "cpu"):                           # torch: its steps, on the logits' device
            import torch
            from ..torch_twin import sampling as steps
            z64, like = logits.double(), (lambda a: torch.as_tensor(a, device=logits.device))
        else:
            steps = sampling
            z64, like = np.asarray(logits, np.float64), np.asarray
        ids = logits.argmax(-1)                              # (B,): greedy rows keep these
        u = self.rng.random(1)                               # (1,), as a one-row sampler draws it
        for k, p, rows, temperature in self.groups:
            z = z64[like(rows)] / like(temperature)          # (b, V): as the samplers divide
            ids[like(rows)] = steps.draw(steps.filtered_probs(z, 1.0, k, p), like(np.repeat(u, len(rows))))
        return ids


def generate_all(model, ids, settings, n_tokens, seed):
    """ids (1, T) -> (len(settings), n_tokens) new ids, row i sampled with settings[i]; one
    batched generation, so that precomputing every setting costs about as much as one."""
    stream = model.stream(np.repeat(ids, len(settings), axis=0), n_tokens, seed=seed)
    stream.sampler = SettingsSampler(settings, seed)         # the stream calls it once per step
    return np.stack([to_numpy(step) for step in stream], axis=1)           # (B, n_tokens)
