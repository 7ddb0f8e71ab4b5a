"""GPT-1's four input formats in the torch twin: the states at [extract], the pooled and the
per-choice scores, the padded language-modelling loss, and one step of L3 = L2 + lm_weight * L1
for any format (autograd does the backward).

Read it beside `lib/numpy_twin/gpt1_formats.py`: same names, same order. The sequences, the tasks
and the loop are framework-free and live in `lib/gpt1_tasks.py`; the head is `finetune.ClassifierHead`.
Shapes: B examples, S sequences per example, T time, C = n_embd, V vocab, K scores.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .finetune import optimizer_step
from .train import cross_entropy


def extract_states(hidden, extract):                         # hidden: (B, S, T, C), extract: (B, S)
    """Each sequence's hidden state at its [extract] position: (B, S, C)."""
    B, S = extract.shape
    rows = torch.arange(B, device=hidden.device)[:, None]
    return hidden[rows, torch.arange(S, device=hidden.device), extract]   # (B, S, C)


def pooled_scores(head, states):                             # states: (B, S, C)
    """The head on the sum of each example's states: (B, K). With one sequence (classification,
    pairs) that is its state; similarity's two orders add, so the scores cannot depend on the order."""
    return head(states.sum(dim=1)[:, None])                  # (B, 1, C) -> (B, K)


def choice_scores(head, states):                             # states: (B, S, C), head: C -> 1
    """One score per choice from the same head: (B, S), the logits of a softmax across the choices
    (the head's bias adds the same to every choice, so the softmax never sees it)."""
    B, S, C = states.shape
    return head(states.reshape(B * S, 1, C)).reshape(B, S)   # (B S, 1) -> (B, S)


def padded_lm_loss(logits, x, extract):                      # logits: (N, T, V), x: (N, T), extract: (N,)
    """L1 over the positions up to each sequence's [extract] (position t predicts x[t + 1] for
    t < extract; the padding after [extract] is left out), as a tensor."""
    T = x.shape[1]
    keep = torch.arange(T - 1, device=x.device) < extract[:, None]   # (N, T - 1)
    targets = x[:, 1:].masked_fill(~keep, -100)              # -100: cross_entropy's ignored target
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)


def format_loss(model, head, x, extract, labels, per_choice, lm_weight):
    """L3 = L2 + lm_weight * L1 on one batch of any format, as tensors (L3, L2, L1). x: (B, S, T)
    ids, extract: (B, S), labels: (B,); per_choice: score each sequence (choice) instead of their sum."""
    B, S, T = x.shape
    logits, hidden, _ = model.forward_outputs(x.reshape(B * S, T))   # (B S, T, V), (B S, T, C)
    states = extract_states(hidden.reshape(B, S, T, -1), extract)     # (B, S, C)
    scores = (choice_scores if per_choice else pooled_scores)(head, states)   # (B, K)
    cls_loss = cross_entropy(scores[:, None], labels[:, None])        # L2, as a (B, 1, K) batch
    lm_loss = padded_lm_loss(logits, x.reshape(B * S, T), extract.reshape(-1))   # L1
    return cls_loss + lm_weight * lm_loss, cls_loss, lm_loss


def format_step(model, head, optimizer, x, extract, labels, per_choice, lm_weight, lr, grad_clip):
    """One AdamW step on one batch of any format (optimizer: `finetune.make_optimizer`); returns
    (L3, L2, L1) as 0-d tensors on the device, unread: the caller reads them when it reports."""
    device = model.wte.weight.device
    x, extract, labels = (torch.as_tensor(a, device=device) for a in (x, extract, labels))
    return optimizer_step(optimizer, lambda: format_loss(model, head, x, extract, labels, per_choice, lm_weight),
                          lr, grad_clip)


@torch.no_grad()
def format_scores(model, head, x, extract, per_choice):
    """The scores (B, K) of a batch x (B, S, T)."""
    device = model.wte.weight.device
    x, extract = torch.as_tensor(x, device=device), torch.as_tensor(extract, device=device)
    B, S, T = x.shape
    hidden = model.forward_outputs(x.reshape(B * S, T)).hidden         # (B S, T, C)
    states = extract_states(hidden.reshape(B, S, T, -1), extract)       # (B, S, C)
    return (choice_scores if per_choice else pooled_scores)(head, states)


def predict_format(model, head, x, extract, per_choice, batch_size=64):
    """The predicted label (N,) of each example of x (N, S, T): its highest score."""
    out = [format_scores(model, head, x[i:i + batch_size], extract[i:i + batch_size], per_choice).argmax(dim=-1)
           for i in range(0, len(x), batch_size)]            # (b,) each, on the device
    return torch.cat(out).cpu().numpy()                      # (N,): one read, after the loop
