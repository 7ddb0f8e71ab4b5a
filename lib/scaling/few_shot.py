"""Few-shot prompting scored: a rule shown by k examples in the prompt, each answer one token.

The task: capitalise a letter. A prompt of k examples and a query reads "c=C x=X q=" (k = 2), the
examples drawn from the other letters, and the right answer is the query's capital, "Q". The
examples show the rule only: the query's own answer is never among them, so copying what followed
an earlier occurrence of the query letter (an induction head's move) cannot answer it; the model
has to continue the pattern of the examples, as GPT-3 did with its few-shot prompts.

- `case_prompt(examples, query)`: the prompt's text.
- `case_items(k, draws, seed)`: (prompt, answer) for every query letter, `draws` prompts each,
  the k examples drawn at random from the other 25 letters.
- `next_token_logp(model, prompts)`: each prompt's next-token log-probabilities (P, V), from
  forward passes over the prompts padded on the right (lib.twins.forward: either twin), as many
  prompts a pass as keep its logits under `max_logits` numbers (GPT-2's 50,257 per position).
- `few_shot(model, encode, ks, draws, seed)`: for each k, the share of prompts whose most likely
  next token is the answer (greedy decoding's answer), the share whose answer is the most likely
  of the 26 capitals (the rule, apart from the format), the mean log-probability of the answer
  and of any capital (the format: an answer of the right kind). `encode` is the model's
  tokenizer (text -> ids): the same code scores a byte model and GPT-2.
"""
from __future__ import annotations

import string

import numpy as np

from ..numpy_twin.train import log_softmax
from ..twins import forward

LETTERS = string.ascii_lowercase


def case_prompt(examples, query) -> str:
    """'c=C x=X q=': each example letter with its capital, then the query letter and '='."""
    return "".join(f"{x}={x.upper()} " for x in examples) + f"{query}="


def case_items(k, draws=4, seed=0) -> list[tuple[str, str]]:
    """(prompt, answer) pairs: for each of the 26 letters as the query, `draws` prompts of k
    examples drawn without replacement from the other 25 letters."""
    if not (isinstance(k, (int, np.integer)) and 0 <= k < len(LETTERS)):
        raise ValueError(f"k must be an integer from 0 to {len(LETTERS) - 1} (examples from the other letters), "
                         f"got {k!r}")
    rng = np.random.default_rng(seed)
    items = []
    for query in LETTERS:
        others = [x for x in LETTERS if x != query]
        items += [(case_prompt(rng.choice(others, size=k, replace=False), query), query.upper())
                  for _ in range(draws)]
    return items


def next_token_logp(model, prompts, max_logits=2**24) -> np.ndarray:
    """(P, V) float64: log p(next token | prompt) for each prompt (a list of 1-D int token id
    arrays, each 1 to n_ctx long), padded on the right, which changes nothing before the padding
    (attention is causal); at most `max_logits` logits a forward pass."""
    n_ctx = model.config.n_ctx
    lengths = np.array([len(p) for p in prompts])                             # (P,)
    if len(prompts) == 0 or lengths.min() < 1 or lengths.max() > n_ctx:
        raise ValueError(f"prompts must be 1 to n_ctx={n_ctx} tokens long, got lengths "
                         f"{sorted(set(lengths.tolist()))}")
    x = np.zeros((len(prompts), lengths.max()), np.int64)                     # (P, T), 0 as padding
    for row, p in enumerate(prompts):
        x[row, :len(p)] = p
    rows = max(1, max_logits // (x.shape[1] * model.config.vocab_size))       # prompts a pass
    last = [forward(model, x[i:i + rows])[np.arange(len(x[i:i + rows])), lengths[i:i + rows] - 1]
            for i in range(0, len(x), rows)]                                  # passes x (rows, V)
    return log_softmax(np.concatenate(last).astype(np.float64))              # (P, V)


def few_shot(model, encode, ks=(0, 1, 2, 4, 8), draws=4, seed=0) -> dict[int, dict]:
    """{k: {"accuracy", "among_capitals", "logp", "logp_capitals", "n"}} on `case_items(k, draws,
    seed)`: the shares of prompts whose answer is the most likely next token and the most likely
    capital, the answer's mean log-probability and the mean log of all capitals' probability."""
    capitals = [encode(c) for c in LETTERS.upper()]
    if any(len(c) != 1 for c in capitals):
        raise ValueError(f"each capital letter must be one token of the model's tokenizer; got "
                         f"{sum(len(c) != 1 for c in capitals)} that are not")
    capitals = np.array(capitals)                                             # (26, 1)
    scores = {}
    for k in ks:
        items = case_items(k, draws, seed)
        answers = np.array([LETTERS.upper().index(answer) for _, answer in items])  # (P,) capital index
        logp = next_token_logp(model, [np.array(encode(prompt)) for prompt, _ in items])  # (P, V)
        on_capitals = logp[:, capitals[:, 0]]                                 # (P, 26)
        rows = np.arange(len(items))
        scores[k] = dict(accuracy=float(np.mean(logp.argmax(-1) == capitals[answers, 0])),
                         among_capitals=float(np.mean(on_capitals.argmax(-1) == answers)),
                         logp=float(on_capitals[rows, answers].mean()),
                         logp_capitals=float(np.logaddexp.reduce(on_capitals, axis=-1).mean()), n=len(items))
    return scores
