"""Instructions with checkable answers, built offline from the 38 plays (chapter 9's data).

Tasks that depend on the play (who speaks a line, who speaks next) are split by lines within the
training plays: a held-out play's characters were never seen. Tasks that do not (capitals,
counting words, the first word) are split by whole plays: they are tested on the plays no model
here pre-trained on (`lib.evaluate.held_out_plays`). Each item has four choices, so that it can
be scored by choice as well as by exact match, and a wrong choice to reject for DPO.
"""
from __future__ import annotations

import string

import numpy as np

from .template import prompt_ids, response_ids

LINE_CHARS = (8, 24)                              # the lines used: short enough for a 64-byte context
N_CTX = 64                                        # the small Shakespeare model's context: prompt + response fit
# task -> (instruction, split by "lines" within the training plays or by whole "plays")
TASKS = {"speaker": ("Who speaks?", "lines"),
         "next_speaker": ("Who speaks next?", "lines"),
         "capitals": ("In capitals:", "plays"),
         "words": ("How many words?", "plays"),
         "first_word": ("First word?", "plays")}
TEST_LINES = 0.2                                  # the share of each training play's lines held out
# The experiment's data (`lib.posttrain.experiment`): items per task and split, and their seed.
DATA = dict(train_per_task=500, test_per_task=100, seed=0)


def speeches(text):
    """[(speaker, [lines])] of a play in lib.shakespeare's plain form."""
    out = []
    for block in text.strip("\n").split("\n\n"):
        name, *lines = block.split("\n")
        out.append((name.rstrip(":"), lines))
    return out


def _short(line):
    return LINE_CHARS[0] <= len(line) <= LINE_CHARS[1]


def _first_word(line):
    return line.split()[0].strip(string.punctuation)


def _choices(right, others, rng, k=4):
    """(choices, label): the right answer and k - 1 distinct others, in an order drawn from rng."""
    others = list(dict.fromkeys(o for o in others if o != right))
    picked = [others[i] for i in rng.permutation(len(others))[:k - 1]]
    choices = [right, *picked]
    order = rng.permutation(len(choices))
    return [choices[i] for i in order], int(np.flatnonzero(order == 0)[0])


def _line_tasks(play):
    """{task: [(line, answer, wrong candidates)]} for the play-dependent tasks; lines whose text
    has two different answers in the play are left out (the answer must be checkable)."""
    talk = speeches(play["text"])
    speakers = sorted({name for name, _ in talk})
    found = {"speaker": {}, "next_speaker": {}}
    for k, (name, lines) in enumerate(talk):
        for line in filter(_short, lines):
            found["speaker"].setdefault(line, set()).add(name)
        if k + 1 < len(talk) and _short(lines[-1]):
            found["next_speaker"].setdefault(lines[-1], set()).add(talk[k + 1][0])
    return {task: [(line, next(iter(names)), speakers) for line, names in found[task].items() if len(names) == 1]
            for task in found}


def _text_tasks(play):
    """{task: [(line, answer, wrong candidates)]} for the play-independent tasks."""
    lines = list(dict.fromkeys(line for _, ls in speeches(play["text"]) for line in ls if _short(line)))
    out = {"capitals": [], "words": [], "first_word": []}
    for line in lines:
        if line.upper() != line:
            out["capitals"].append((line, line.upper(), [line, line.lower(), line.title(), line.swapcase(), line.capitalize()]))
        n = len(line.split())
        out["words"].append((line, str(n), None))
        if _first_word(line):
            others = [w.strip(string.punctuation) for w in line.split()[1:]]
            out["first_word"].append((line, _first_word(line), [w for w in others if w]))
    return out


def _fits(task, line, answer):
    """Whether the prompt and the response (with its markers) fit N_CTX + 1 tokens (for the answer
    and for every choice: DPO trains on the rejected ones too)."""
    return len(prompt_ids(TASKS[task][0], line)) + len(response_ids(answer)) <= N_CTX + 1


def _item(task, slug, line, answer, candidates, rng, pool):
    if task == "words":
        n = int(answer)
        low = max(1, n - int(rng.integers(0, 4)))
        candidates = [str(m) for m in range(low, low + 4)]
    elif task == "first_word" and len(set(candidates) - {answer}) < 3:
        candidates = candidates + [pool[i] for i in rng.permutation(len(pool))[:8]]   # other lines' first words
    choices, label = _choices(answer, [c for c in candidates if _fits(task, line, c)], rng)
    instruction = TASKS[task][0]
    return dict(task=task, play=slug, instruction=instruction, input=line, output=answer, choices=choices,
                label=label)


def instruction_data(train_per_task=DATA["train_per_task"], test_per_task=DATA["test_per_task"],
                     seed=DATA["seed"]):
    """{"train": [item], "test": [item]}, each item {"task", "play", "instruction", "input",
    "output", "choices" (4, the output among them), "label" (its index)}. Per task,
    train_per_task and test_per_task items drawn with the seed. Play-dependent tasks come from the
    training plays, their lines split TEST_LINES : 1 - TEST_LINES within each play; the others
    train on the training plays and test on the held-out plays (`lib.evaluate.held_out_plays`)."""
    from ..evaluate import held_out_plays
    from ..shakespeare import shakespeare_plays

    rng = np.random.default_rng(seed)
    held_out = {p["slug"] for p in held_out_plays()}
    pools = {split: {task: [] for task in TASKS} for split in ("train", "test")}
    for play in shakespeare_plays():
        if play["slug"] not in held_out:
            split_of = {}                                   # line -> its split, the same for every task
            for task, rows in _line_tasks(play).items():
                for row in rows:                            # a line is held out with probability TEST_LINES
                    split = split_of.setdefault(row[0], "test" if rng.random() < TEST_LINES else "train")
                    pools[split][task].append((play["slug"], *row))
        for task, rows in _text_tasks(play).items():
            pools["test" if play["slug"] in held_out else "train"][task] += [(play["slug"], *row) for row in rows]
    held = {(slug, line) for task in ("speaker", "next_speaker") for slug, line, *_ in pools["test"][task]}
    for task in ("capitals", "words", "first_word"):       # a held-out line is no training input at all
        pools["train"][task] = [row for row in pools["train"][task] if tuple(row[:2]) not in held]
    seen = {line for rows in pools["train"].values() for _, line, *_ in rows}
    for task in ("capitals", "words", "first_word"):       # a held-out line also in a training play is dropped
        pools["test"][task] = [row for row in pools["test"][task] if row[1] not in seen]
    data = {}
    for split, n in (("train", train_per_task), ("test", test_per_task)):
        data[split] = []
        for task in TASKS:
            rows = pools[split][task]
            if len(rows) < n:
                raise ValueError(f"{task} has {len(rows)} {split} items; asked for {n}")
            rows = [row for row in rows if _fits(task, row[1], row[2]) and (task in ("words", "first_word") or len(
                {c for c in row[3] if _fits(task, row[1], c)} - {row[2]}) >= 3)]   # 3 wrong choices that fit
            firsts = [_first_word(line) for _, line, *_ in rows if _first_word(line)]
            data[split] += [_item(task, *rows[i], rng, firsts) for i in np.sort(rng.choice(len(rows), n, False))]
    return data


def pairs_of(items):
    """[(prompt ids, response ids)] of the items, their outputs as the responses."""
    return [(prompt_ids(it["instruction"], it["input"]), response_ids(it["output"])) for it in items]


def rejected_choices(items, seed=0):
    """(N,) the index of one wrong choice of each item, drawn with the seed."""
    rng = np.random.default_rng(seed)
    return np.array([[k for k in range(len(it["choices"])) if k != it["label"]][rng.integers(len(it["choices"]) - 1)]
                     for it in items])


def preference_pairs(items, seed=0):
    """[(prompt ids, chosen ids, rejected ids)]: the right output chosen, the wrong choice of
    `rejected_choices` (plausible: another speaker of the play, a near count, another casing)
    rejected."""
    return [(prompt_ids(it["instruction"], it["input"]), response_ids(it["output"]), response_ids(it["choices"][k]))
            for it, k in zip(items, rejected_choices(items, seed))]
