"""The chat template: an instruction, its input and a response as token ids, with three markers.

The template is `<|user|>instruction\\ninput<|assistant|>response<|end|>`, the three markers new
token ids after the 256 bytes (`SPECIAL`, added to a model by `add_chat_tokens`); the prompt
ends at `<|assistant|>` and a response ends with `<|end|>`, where sampling stops (`chat`).
`chat_batch` gives inputs, targets and the loss mask of a batch.
"""
from __future__ import annotations

import numpy as np

from ..twins import as_model_ids, to_numpy, twin_module, twin_of

TEXT_VOCAB = 256                                  # bytes
SPECIAL = ("<|user|>", "<|assistant|>", "<|end|>")
USER, ASSISTANT, END = TEXT_VOCAB, TEXT_VOCAB + 1, TEXT_VOCAB + 2


def prompt_ids(instruction, text):
    """<|user|>instruction\\ntext<|assistant|> as int64 ids: the bytes, the markers after them."""
    body = np.frombuffer(f"{instruction}\n{text}".encode("utf-8"), np.uint8)
    return np.concatenate([[USER], body, [ASSISTANT]]).astype(np.int64)


def response_ids(response):
    """response<|end|> as int64 ids."""
    return np.concatenate([np.frombuffer(response.encode("utf-8"), np.uint8), [END]]).astype(np.int64)


def render(ids):
    """Ids (bytes and markers) as text, the markers written as SPECIAL."""
    parts, run = [], []
    for i in map(int, ids):
        if i < TEXT_VOCAB:
            run.append(i)
            continue
        parts += [bytes(run).decode("utf-8", "replace"), SPECIAL[i - TEXT_VOCAB]]
        run = []
    return "".join(parts) + bytes(run).decode("utf-8", "replace")


def chat_batch(pairs, mask_prompt=True, n_ctx=None):
    """x, y, mask, each (N, T) int64, from (prompt ids, response ids) pairs: row i is prompt +
    response without its last token, y the same shifted by one, padded on the right with 0.
    mask is 1 where y is a response token (mask_prompt) or any real token (not mask_prompt)."""
    seqs = [np.concatenate([p, r]) for p, r in pairs]
    T = max(len(s) for s in seqs) - 1
    if n_ctx is not None and T > n_ctx:
        raise ValueError(f"a prompt and its response take {T + 1} tokens; "
                         f"expected at most n_ctx + 1 = {n_ctx + 1}")
    x, y, mask = (np.zeros((len(seqs), T), np.int64) for _ in range(3))
    for row, (seq, (prompt, _)) in enumerate(zip(seqs, pairs)):
        n = len(seq) - 1
        x[row, :n], y[row, :n] = seq[:-1], seq[1:]
        # y[len(prompt) - 1] is the first response token
        mask[row, len(prompt) - 1 if mask_prompt else 0:n] = 1
    return x, y, mask


def add_chat_tokens(model, seed=0):
    """A copy of `model` with the three markers of SPECIAL as new tokens (chapter 7's `add_tokens`)."""
    return twin_module(twin_of(model), "finetune").add_tokens(model, len(SPECIAL), seed)


def chat(model, instruction, text, max_new_tokens=40, temperature=0.0, seed=None):
    """The model's response to the template's prompt, sampled with chapter 6's `generate` (greedy
    at temperature 0) until <|end|>, which is not returned; `render`ed as text."""
    prompt = prompt_ids(instruction, text)
    out = to_numpy(model.generate(as_model_ids(model, prompt[None]), max_new_tokens,
                                  temperature=temperature, seed=seed,
                                  stop_token=END))[0, len(prompt):]   # (n,) new ids
    stop = np.flatnonzero(out == END)
    return render(out[:stop[0]] if len(stop) else out)
