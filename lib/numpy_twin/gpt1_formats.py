"""GPT-1's four input formats in the numpy twin: the states at [extract], the pooled and the
per-choice scores with their hand-written backward, the padded language-modelling loss, and one
step of L3 = L2 + lm_weight * L1 for any format.

Read it beside `lib/torch_twin/gpt1_formats.py`: same names, same order. The sequences, the tasks
and the loop are framework-free and live in `lib/gpt1_tasks.py`; the head is `finetune.ClassifierHead`.
Shapes: B examples, S sequences per example, T time, C = n_embd, V vocab, K scores.
"""
from __future__ import annotations

import numpy as np

from .finetune import optimizer_step
from .train import cross_entropy, log_softmax


def extract_states(hidden, extract):                         # hidden: (B, S, T, C), extract: (B, S)
    """Each sequence's hidden state at its [extract] position: (B, S, C)."""
    B, S = extract.shape
    return hidden[np.arange(B)[:, None], np.arange(S), extract]  # (B, S, C)


def extract_states_backward(dstates, extract, T):            # dstates: (B, S, C)
    """The gradient w.r.t. the hidden states (B, S, T, C): dstates at [extract], zero elsewhere."""
    B, S, C = dstates.shape
    dhidden = np.zeros((B, S, T, C), dstates.dtype)          # (B, S, T, C)
    dhidden[np.arange(B)[:, None], np.arange(S), extract] = dstates
    return dhidden


def pooled_scores(head, states):                             # states: (B, S, C)
    """The head on the sum of each example's states: (B, K). With one sequence (classification,
    pairs) that is its state; similarity's two orders add, so the scores cannot depend on the order."""
    return head.forward(states.sum(axis=1)[:, None])         # (B, 1, C) -> (B, K)


def pooled_scores_backward(head, dscores, cache, S):         # dscores: (B, K)
    """d states (B, S, C): every sequence of an example receives the sum's gradient."""
    dpooled = head.backward(dscores, cache)[:, 0]            # (B, C)
    return np.repeat(dpooled[:, None], S, axis=1)            # (B, S, C)


def choice_scores(head, states):                             # states: (B, S, C), head: C -> 1
    """One score per choice from the same head: (B, S), the logits of a softmax across the choices
    (the head's bias adds the same to every choice, so the softmax never sees it)."""
    B, S, C = states.shape
    scores, cache = head.forward(states.reshape(B * S, 1, C))  # (B S, 1)
    return scores.reshape(B, S), cache


def choice_scores_backward(head, dscores, cache, S):         # dscores: (B, S)
    """d states (B, S, C)."""
    B = dscores.shape[0]
    dstates = head.backward(dscores.reshape(B * S, 1), cache)  # (B S, 1, C)
    return dstates.reshape(B, S, -1)                         # (B, S, C)


def padded_lm_loss(logits, x, extract):                      # logits: (N, T, V), x: (N, T), extract: (N,)
    """L1 over the positions up to each sequence's [extract] (position t predicts x[t + 1] for
    t < extract; the padding after [extract] is left out), and its gradient w.r.t. the logits."""
    N, T, V = logits.shape
    keep = np.arange(T - 1) < extract[:, None]               # (N, T - 1)
    n = keep.sum()
    logp = log_softmax(logits[:, :-1])                       # (N, T - 1, V)
    targets = x[:, 1:, None]                                 # (N, T - 1, 1)
    loss = -(np.take_along_axis(logp, targets, -1)[..., 0] * keep).sum() / n
    dlogits = np.zeros_like(logits)                          # (N, T, V): the last position predicts nothing
    p = np.exp(logp)
    np.put_along_axis(p, targets, np.take_along_axis(p, targets, -1) - 1.0, -1)   # p - one_hot
    dlogits[:, :-1] = p * (keep / n)[..., None].astype(logits.dtype)
    return float(loss), dlogits


def format_loss(model, head, x, extract, labels, per_choice, lm_weight):
    """Forward and backward of L3 = L2 + lm_weight * L1 on one batch of any format; the gradients
    add into model.grads and head.grads. x: (B, S, T) ids, extract: (B, S), labels: (B,);
    per_choice: score each sequence (choice) instead of their sum. Returns (L3, L2, L1) as floats."""
    B, S, T = x.shape
    logits, hidden, _ = model.forward_outputs(x.reshape(B * S, T))   # (B S, T, V), (B S, T, C)
    states = extract_states(hidden.reshape(B, S, T, -1), extract)     # (B, S, C)
    scores, head_cache = (choice_scores if per_choice else pooled_scores)(head, states)   # (B, K)
    cls_loss, dscores = cross_entropy(scores[:, None], labels[:, None])  # L2, as a (B, 1, K) batch
    lm_loss, dlm = padded_lm_loss(logits, x.reshape(B * S, T), extract.reshape(-1))   # L1
    backward = choice_scores_backward if per_choice else pooled_scores_backward
    dstates = backward(head, dscores[:, 0], head_cache, S)                # (B, S, C)
    dhidden = extract_states_backward(dstates, extract, T).reshape(B * S, T, -1)   # (B S, T, C)
    model.backward(lm_weight * dlm, dhidden=dhidden)
    return cls_loss + lm_weight * lm_loss, cls_loss, lm_loss


def format_step(model, head, optimizer, x, extract, labels, per_choice, lm_weight, lr, grad_clip):
    """One AdamW step on one batch of any format (optimizer: `finetune.make_optimizer`); returns (L3, L2, L1)."""
    x, extract, labels = map(np.asarray, (x, extract, labels))
    return optimizer_step(model, head, optimizer,
                          lambda: format_loss(model, head, x, extract, labels, per_choice, lm_weight), lr, grad_clip)


def format_scores(model, head, x, extract, per_choice):
    """The scores (B, K) of a batch x (B, S, T), without keeping anything for a backward."""
    B, S, T = x.shape
    hidden = model.forward_outputs(x.reshape(B * S, T)).hidden         # (B S, T, C)
    states = extract_states(hidden.reshape(B, S, T, -1), extract)       # (B, S, C)
    return (choice_scores if per_choice else pooled_scores)(head, states)[0]


def predict_format(model, head, x, extract, per_choice, batch_size=64):
    """The predicted label (N,) of each example of x (N, S, T): its highest score."""
    x, extract = np.asarray(x), np.asarray(extract)
    return np.concatenate([format_scores(model, head, x[i:i + batch_size], extract[i:i + batch_size], per_choice)
                           .argmax(axis=-1) for i in range(0, len(x), batch_size)])   # (N,)
