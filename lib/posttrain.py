"""From a language model to an assistant: instruction data, the chat template, masked
instruction tuning, LoRA and DPO, measured (chapter 9).

- Data, offline: instructions with checkable answers built from the 38 plays (`TASKS`). Tasks that
  depend on the play (who speaks a line, who speaks next) are split by lines within the training
  plays: a held-out play's characters were never seen. Tasks that do not (capitals, counting
  words, the first word) are split by whole plays: they are tested on the plays no model here
  pre-trained on (`lib.evaluate.held_out_plays`).
- The template: `<|user|>instruction\\ninput<|assistant|>response<|end|>`, the three markers new
  token ids after the 256 bytes (`SPECIAL`); the prompt ends at `<|assistant|>` and a response
  ends with `<|end|>`, where sampling stops. `chat_batch` gives inputs, targets and the loss mask
  (1 on the response's tokens only, or on every real token without the mask).
- Evaluation with chapter 6b's machinery: choice accuracy by `lib.evaluate.score_questions`, and
  exact match of greedy decoding, computed in one pass (`exact_match`), right or wrong per item
  so that `lib.evaluate.mcnemar` can pair two models.
- The loops (`sft`, `dpo`) are the same for both twins; each twin's step, `LoRALinear` and DPO
  loss live in `lib/numpy_twin/posttrain.py` and `lib/torch_twin/posttrain.py`. `dpo_loss`
  computes DPO's loss with the twin of its inputs.
- `experiment()`: instruction tuning with and without the mask, LoRA against full fine-tuning,
  then DPO with its reference, without it and with a small beta, from the course's small
  Shakespeare model; run once (the install step does) and cached as JSON under a digest of its
  settings and the plays, as chapter 7's experiment is.
- `load_instructions(path)`: a published instruction dataset in the common JSON format (records
  with "instruction", "input", "output"; a JSON list or JSON lines), in Alpaca's text template for
  GPT-2's tokenizer: the GPU branch of the chapter fine-tunes GPT-2 Small on it.
"""
from __future__ import annotations

import copy
import json
import math
import string
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from .assets import cache_dir, digest_path
from .atomic import write_atomic
from .cached import shifted
from .data import shuffled_batches
from .settings import LoopSettings, check_fields
from .twins import as_model_ids, forward, twin_module, twin_of

TEXT_VOCAB = 256                                  # bytes
SPECIAL = ("<|user|>", "<|assistant|>", "<|end|>")
USER, ASSISTANT, END = TEXT_VOCAB, TEXT_VOCAB + 1, TEXT_VOCAB + 2
LINE_CHARS = (8, 24)                              # the lines used: short enough for a 64-byte context
N_CTX = 64                                        # the small Shakespeare model's context: prompt + response fit
# task -> (instruction, split by "lines" within the training plays or by whole "plays")
TASKS = {"speaker": ("Who speaks?", "lines"),
         "next_speaker": ("Who speaks next?", "lines"),
         "capitals": ("In capitals:", "plays"),
         "words": ("How many words?", "plays"),
         "first_word": ("First word?", "plays")}
TEST_LINES = 0.2                                  # the share of each training play's lines held out


@dataclass(frozen=True)
class SFTSettings(LoopSettings):
    """How `sft` trains (`lib.settings.LoopSettings`), with AdamW's `weight_decay`."""
    weight_decay: float

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, non_negative=("weight_decay",))


@dataclass(frozen=True)
class LoRASettings:
    """LoRA's adapters (`add_lora`: rank, and alpha, whose ratio to the rank scales them) and the
    learning rate they train at."""
    rank: int
    alpha: float
    lr: float

    def __post_init__(self):
        check_fields(self, counts=("rank",), positive=("alpha", "lr"))


@dataclass(frozen=True)
class DPOSettings(LoopSettings):
    """How `dpo` trains (`lib.settings.LoopSettings`), at DPO's `beta`; `small_beta` is the beta
    of the experiment's third DPO run (`experiment`)."""
    beta: float
    small_beta: float

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, positive=("beta", "small_beta"))


# The experiment's settings (sized to run in a few minutes on a 2-core CPU, once, then cached).
DATA = dict(train_per_task=500, test_per_task=100, seed=0)
SFT = SFTSettings(steps=300, batch_size=16, lr=2e-3, grad_clip=1.0, seed=0, weight_decay=0.0)
LORA = LoRASettings(rank=8, alpha=16, lr=5e-3)
DPO = DPOSettings(steps=80, batch_size=8, lr=3e-4, grad_clip=1.0, seed=0, beta=0.1, small_beta=0.01)


# ---- the template -----------------------------------------------------------------------------
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


# ---- the data: instructions from the plays ------------------------------------------------------
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
    from .evaluate import held_out_plays
    from .shakespeare import shakespeare_plays

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


# ---- evaluation ---------------------------------------------------------------------------------
def exact_match(model, pairs, batch_size=256):
    """(N,) bool: whether greedy decoding after each prompt gives its response exactly, <|end|>
    included. Computed in one teacher-forced pass per batch: greedy decoding writes the response
    if and only if, fed the response so far, the model's highest logit is its next token at every
    step (ties aside)."""
    out = []
    for i in range(0, len(pairs), batch_size):
        x, y, mask = chat_batch(pairs[i:i + batch_size])
        best = forward(model, x).argmax(axis=-1)            # (b, T)
        out.append(((best == y) | (mask == 0)).all(axis=1))
    return np.concatenate(out)


def choice_logps(model, items, batch_size=64):
    """(N, 4) float64: log p(choice<|end|> | prompt) of each item's choices (chapter 6b's
    `score_questions`). The choice accuracy is argmax == label; the preference accuracy compares
    the right choice with the rejected one."""
    from .evaluate import score_questions

    out = []
    for i in range(0, len(items), batch_size):
        questions = [(prompt_ids(it["instruction"], it["input"]), [response_ids(c) for c in it["choices"]])
                     for it in items[i:i + batch_size]]
        out += [s.sum for s in score_questions(model, questions)]
    return np.array(out)


def sequence_logps(model, pairs, batch_size=128):
    """(N,) float64: log p(response | prompt) of each (prompt ids, response ids) pair."""
    from .evaluate import log_likelihoods

    return np.concatenate([log_likelihoods(model, pairs[i:i + batch_size])[0]
                           for i in range(0, len(pairs), batch_size)])


def task_scores(model, items, seed=1):
    """On the items: {"exact", "choice", "preference"}, each (N,) bool (preference: the right
    answer more likely than the wrong choice `rejected_choices(items, seed)` picks), and
    "response_loss", the mean -log p per token of the right responses (<|end|> included)."""
    logp = choice_logps(model, items)                        # (N, 4)
    rows, labels = np.arange(len(items)), np.array([it["label"] for it in items])
    tokens = sum(len(response_ids(it["output"])) for it in items)
    return {"exact": exact_match(model, pairs_of(items)), "choice": logp.argmax(axis=1) == labels,
            "preference": logp[rows, labels] > logp[rows, rejected_choices(items, seed)],
            "response_loss": float(-logp[rows, labels].sum() / tokens)}


def kl_to(model, reference, pairs, batch_size=128):
    """Mean over the responses' tokens of KL(model || reference) of the next-token distributions,
    the responses read after their prompts: how far the model has drifted from the reference."""
    from .numpy_twin.train import log_softmax

    total, count = 0.0, 0
    for i in range(0, len(pairs), batch_size):
        x, _, mask = chat_batch(pairs[i:i + batch_size])
        rows = mask.astype(bool)
        logp = log_softmax(forward(model, x)[rows].astype(np.float64))       # (n, V)
        logq = log_softmax(forward(reference, x)[rows].astype(np.float64))   # (n, V)
        total += float((np.exp(logp) * (logp - logq)).sum())
        count += int(rows.sum())
    return total / count


# ---- the loops, the same for both twins ----------------------------------------------------------
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
    from .progress import progress_bar
    from .schedule import lr_at

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
    from .progress import progress_bar
    from .schedule import lr_at

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


# ---- the experiment, cached --------------------------------------------------------------------
def add_chat_tokens(model, seed=0):
    """A copy of `model` with the three markers of SPECIAL as new tokens (chapter 7's `add_tokens`)."""
    return twin_module(twin_of(model), "finetune").add_tokens(model, len(SPECIAL), seed)


def optimizer_bytes(optimizer):
    """The bytes of AdamW's state, its two moments, as the optimizer holds them (either twin)."""
    return int(sum(a.nbytes for a in optimizer.state_arrays().values()))


def _settings():
    """The experiment's settings as it runs them: the seeds of its trainings shifted by the course
    seed (`lib.cached.shifted`; the small model it starts from is shifted where it is trained)."""
    return dict(data=DATA, sft=asdict(replace(SFT, seed=shifted(SFT.seed))), lora=asdict(LORA),
                dpo=asdict(replace(DPO, seed=shifted(DPO.seed))), tasks=TASKS, line_chars=LINE_CHARS,
                test_lines=TEST_LINES)


def experiment_file():
    """Where `experiment` caches its result (the file exists once it has run): the name carries a
    digest of the settings and of the plays' text."""
    from .shakespeare import shakespeare_text

    return digest_path("posttrain/experiment", _settings(), shakespeare_text().encode(), suffix=".json")


def _scores(model, data):
    scores = task_scores(model.eval(), data["test"])
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in scores.items()}


def sft_folder():
    """The folder of the experiment's instruction-tuned model ("sft"), saved when it runs."""
    return experiment_file().with_name(experiment_file().stem.replace("experiment", "sft"))


def sft_model(twin="torch"):
    """The experiment's instruction-tuned model (run `experiment()` first) in either twin."""
    return twin_module(twin).GPT.load(sft_folder())


def experiment(progress=True, device="cpu"):
    """Chapter 9's measurements, from the small Shakespeare model with the markers added ("base"),
    on the held-out items (right or wrong per item, so that tests can be paired):

    - "sft": instruction-tuned (SFT), loss on the responses only; "sft_no_mask": on every token;
    - "lora": LoRA (LORA's rank, alpha and rate) on the same data, then merged;
    - "dpo": DPO from "sft" with "sft" as its frozen reference; "dpo_no_ref": without the
      reference (its log-probabilities taken as 0); "dpo_small_beta": with DPO's small_beta.

    Each has "exact", "choice" and "preference" (lists of bools over the test items),
    "response_loss" (nats per response token), and its training's "loss", "trainable" parameters,
    "optimizer_bytes" and "seconds"; DPO runs have "kl", their drift from the reference
    (`kl_to`). The "sft" model is saved (`sft_model`). Runs with the torch twin on `device`; cached
    as JSON (`experiment_file`)."""
    path = experiment_file()
    if path.is_file():
        return json.loads(path.read_text())
    from .pretrained import shakespeare_small

    began = time.perf_counter()
    settings = _settings()
    tuning, preference = SFTSettings(**settings["sft"]), DPOSettings(**settings["dpo"])
    data = instruction_data(**DATA)
    train_pairs, test_pairs = pairs_of(data["train"]), pairs_of(data["test"])
    train_triples = preference_pairs(data["train"], DATA["seed"])
    base = add_chat_tokens(shakespeare_small("torch"), tuning.seed).to(device)
    runs = {"base": _scores(base, data)}
    for name, mask_prompt, lora in (("sft", True, False), ("sft_no_mask", False, False), ("lora", True, True)):
        model = copy.deepcopy(base).train()
        twin = twin_module("torch", "posttrain")
        if lora:
            twin.add_lora(model, LORA.rank, LORA.alpha)
        trainable = sum(p.numel() for _, p in twin.trainable_parameters(model))
        start = time.perf_counter()
        history = sft(model, train_pairs, replace(tuning, lr=LORA.lr) if lora else tuning, mask_prompt,
                      progress=progress)
        runs[name] = dict(loss=history["loss"], trainable=trainable, optimizer_bytes=history["optimizer_bytes"],
                          seconds=time.perf_counter() - start)
        if lora:
            twin.merge_lora(model)
        runs[name].update(_scores(model, data))
        if name == "sft":
            reference = model
            model.save(sft_folder())                        # for sampling; atomic
    ref_logp = reference_logps(reference, train_triples)
    for name, beta, with_ref in (("dpo", preference.beta, True), ("dpo_no_ref", preference.beta, False),
                                 ("dpo_small_beta", preference.small_beta, True)):
        model = copy.deepcopy(reference).train()
        start = time.perf_counter()
        history = dpo(model, train_triples, ref_logp if with_ref else np.zeros_like(ref_logp),
                      replace(preference, beta=beta), progress=progress)
        runs[name] = dict(loss=history["loss"], seconds=time.perf_counter() - start, beta=beta, reference=with_ref)
        runs[name].update(_scores(model, data), kl=kl_to(model.eval(), reference, test_pairs))
    result = {"settings": settings, "tasks": [it["task"] for it in data["test"]], "runs": runs,
              "seconds": time.perf_counter() - began}
    write_atomic(path, json.dumps(result))
    return json.loads(path.read_text())                      # as a later call reads it


# ---- sampling an assistant ----------------------------------------------------------------------
def chat(model, instruction, text, max_new_tokens=40, temperature=0.0, seed=None):
    """The model's response to the template's prompt, sampled with chapter 6's `generate` (greedy
    at temperature 0) until <|end|>, which is not returned; `render`ed as text."""
    from .twins import to_numpy

    prompt = prompt_ids(instruction, text)
    out = to_numpy(model.generate(as_model_ids(model, prompt[None]), max_new_tokens,
                                  temperature=temperature, seed=seed,
                                  stop_token=END))[0, len(prompt):]   # (n,) new ids
    stop = np.flatnonzero(out == END)
    return render(out[:stop[0]] if len(stop) else out)


# ---- a published instruction dataset (the GPU branch) ----------------------------------------
ALPACA_URL = "https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/main/alpaca_data.json"


def load_instructions(path):
    """[{"instruction", "input", "output"}] from a JSON list of such records or from JSON lines
    (one record a line); "input" may be missing or empty."""
    text = open(path, encoding="utf-8").read()
    try:
        records = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON nor JSON lines ({e.msg} at line {e.lineno})") from None
    for k, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in ("instruction", "output")):
            raise ValueError(f"{path}: record {k} needs string fields instruction and output (and optional input)")
    return [{"instruction": r["instruction"], "input": r.get("input") or "", "output": r["output"]} for r in records]


def download_alpaca():
    """Alpaca's 52,002 instructions (Taori et al. 2023), downloaded once into the cache; needs the internet."""
    import urllib.request

    path = cache_dir() / "downloads" / "alpaca_data.json"
    if not path.is_file():
        try:
            with urllib.request.urlopen(ALPACA_URL, timeout=120) as response:
                write_atomic(path, response.read())
        except OSError as e:
            raise ConnectionError(f"downloading {ALPACA_URL} failed ({e}); it needs the internet (Colab)") from None
    return path


def alpaca_prompt(record):
    """Alpaca's template: the instruction, the input when there is one, then the response header."""
    if record["input"]:
        return (f"### Instruction:\n{record['instruction']}\n\n### Input:\n{record['input']}\n\n"
                "### Response:\n")
    return f"### Instruction:\n{record['instruction']}\n\n### Response:\n"


def gpt2_pairs(records, encode, end_id, n_ctx):
    """[(prompt ids, response ids)] in Alpaca's template for a GPT-2 tokenizer (`encode`: text ->
    ids), each response ending in end_id (GPT-2's <|endoftext|>); records whose prompt and
    response do not fit n_ctx + 1 tokens are left out."""
    pairs = []
    for record in records:
        prompt = np.array(encode(alpaca_prompt(record)), np.int64)
        response = np.array([*encode(record["output"]), end_id], np.int64)
        if len(prompt) + len(response) <= n_ctx + 1:
            pairs.append((prompt, response))
    return pairs
