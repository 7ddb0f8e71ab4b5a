"""Choosing the next token on the model's device: `lib.sampling`'s steps in torch.

Read it beside `lib/sampling.py`: same steps, same names, same semantics (its docstring gives
their order); tests check that they pick the tokens the shared sampler picks. The uniform
numbers still come from a numpy Generator seeded as the shared sampler's, drawn for all steps
at once and copied to the device once, so a GPU never waits for the host between tokens.
`HostSampler` is the shared sampler itself, fed from and returning tensors.
Shapes: B batch, V vocab.
"""
from __future__ import annotations

import torch

from .. import sampling


def penalize(logits, seen, penalty):
    """Step 1. logits (B, V), seen (B, V) bool -> penalised copy (B, V)."""
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, scaled, logits)


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Steps 2 to 4 for temperature > 0: logits (B, V) -> probabilities (B, V) in float64."""
    z = logits.double() / temperature                               # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]           # (B, 1): k-th largest
        z = z.masked_fill(z < kth, float("-inf"))
    p = torch.softmax(z, dim=-1)                                    # (B, V)
    if top_p is not None and top_p < 1:
        s = torch.sort(p, dim=-1, descending=True).values           # (B, V), most likely first
        before = torch.cumsum(s, dim=-1) - s                        # (B, V): mass ahead of each
        n_keep = (before < top_p).sum(dim=-1, keepdim=True)         # (B, 1), >= 1
        cut = s.gather(-1, n_keep - 1)                              # (B, 1): least likely kept value
        p = torch.softmax(z.masked_fill(p < cut, float("-inf")), dim=-1)  # (B, V)
    return p


def draw(probs, u):
    """Step 5. probs (B, V), u (B,) in [0, 1) -> (B,) token ids by the inverse CDF."""
    c = torch.cumsum(probs, dim=-1)                                 # (B, V)
    ids = (c <= u[:, None] * c[:, -1:]).sum(dim=-1)                 # (B,)
    positions = torch.arange(probs.shape[-1], device=probs.device)  # (V,)
    last = torch.where(probs > 0, positions, -1).amax(dim=-1)       # (B,): last kept id
    return torch.minimum(ids, last)


class DeviceSampler:
    """lib.sampling.Sampler on the model's device: same `Sampling` settings, same seeded stream
    of u (drawn for `steps` steps at once), `seen` kept as a (B, V) bool tensor."""

    def __init__(self, vocab_size, batch, steps, settings: sampling.Sampling, device="cpu"):
        host = sampling.Sampler(vocab_size, batch, settings)
        self.settings = settings
        self.u = torch.as_tensor(host.rng.random((steps, batch)), device=device) if settings.temperature else None
        self.seen = None if host.seen is None else torch.zeros(host.seen.shape, dtype=torch.bool, device=device)
        self.step = 0

    def observe(self, ids):
        """Mark ids (B, T) as seen, for the repetition penalty."""
        if self.seen is not None:
            self.seen.scatter_(1, ids, True)

    def __call__(self, logits):
        """logits (B, V) -> next ids (B,), which it also marks as seen."""
        s = self.settings
        if self.seen is not None:
            logits = penalize(logits, self.seen, s.repetition_penalty)
        if s.temperature == 0:
            ids = logits.argmax(dim=-1)                             # (B,)
        else:
            ids = draw(filtered_probs(logits, s.temperature, s.top_k, s.top_p), self.u[self.step])
        self.step += 1
        self.observe(ids[:, None])
        return ids


class HostSampler(sampling.Sampler):
    """The shared sampler, fed from and returning tensors (one host round trip per token)."""

    def observe(self, ids):
        super().observe(ids.cpu().numpy() if torch.is_tensor(ids) else ids)

    def __call__(self, logits):
        ids = super().__call__(logits.float().cpu().numpy())
        return torch.as_tensor(ids, device=logits.device)
