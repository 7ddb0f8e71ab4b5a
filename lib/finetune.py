"""Pre-train, then fine-tune: GPT-1's recipe on a task that runs offline (chapter 7).

The task: is this passage of Shakespeare as he wrote it, or were its words shuffled? A judgement
of acceptability, as GPT-1's CoLA task, which needs a knowledge of the language that a few labelled
examples cannot teach and that pre-training on unlabelled text can.

- Input: one sequence per example, `[start] passage [classify]`, the passage 64 bytes from a
  line start; its shuffled twin has the same bytes with the words between the first and the last
  in random order. The special tokens (start, delimiter, classify) are new ids after the text
  vocabulary, with new embedding rows (`add_tokens` in each twin); the delimiter joins inputs in
  several parts (`encode_example`), which this task does not have. The head reads the hidden
  state at the last position, the classify token's.
- Loss: L3 = L2 + lm_weight * L1, L2 the classification cross-entropy and L1 the language-
  modelling loss on the same sequences (GPT-1 used lm_weight = 0.5).
- Splits: `play_folds` deals the 38 plays into folds holding every genre; split k tests on the
  plays of fold k, fine-tunes on the others, and pre-trains on the others' text only
  (`pretrained`, through `lib.pretrained.trained_folder`), so no test play is seen before the test.
- `finetune(model, head, x, labels, settings)`: the loop (`train_loop`, which GPT-1's other
  formats share, `lib.gpt1_tasks.finetune_format`), the same for both twins (the step is the
  twin's: `lib/numpy_twin/finetune.py`, `lib/torch_twin/finetune.py`), its settings a
  `FinetuneSettings`.
- `word_order_experiment(...)`: for every split, the test accuracy after fine-tuning on SIZES
  labelled examples, starting from the split's pre-trained model and from scratch.

Pre-trained models and the experiment's results are cached in `$GPT2_COURSE_CACHE` (default
`~/.cache/gpt2-course/`) under `finetune/`, in names that carry a digest of every setting and
of the text, so a change retrains instead of reusing a stale result.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from .assets import digest_path
from .atomic import write_atomic
from .cached import shifted
from .config import GPTConfig
from .data import shuffled_batches
from .settings import LoopSettings, check_fields
from .twins import as_model_ids, twin_module, twin_of

GENRES = ("comedies", "histories", "problems", "roman", "romances", "tragedies")
LABELS = ("shuffled", "as written")
TEXT_VOCAB = 256                     # bytes
N_SPECIAL = 3                        # start, delimiter, classify: ids TEXT_VOCAB, +1, +2
N_FOLDS = 2                          # splits of the plays: each half is the test set once

# The model pre-trained for each split, and how (TrainConfig settings, lib.config). Sized so that the
# whole experiment (2 pre-trainings, 12 fine-tunings) runs in a few minutes on a 2-core CPU; it
# is cached after its first run.
PRETRAIN_CONFIG = GPTConfig(vocab_size=TEXT_VOCAB, n_ctx=128, n_layer=4, n_head=4, n_embd=64)
PRETRAIN = dict(max_iters=600, batch_size=16, lr=2e-3, min_lr=2e-4, warmup_iters=60, weight_decay=0.1,
                betas=(0.9, 0.99), grad_clip=1.0, seed=1337)
# The task's data: passage length in bytes, and the test passages per split (each gives two examples).
TASK = dict(passage_len=64, test_passages=256)
SIZES = (32, 256, 2048)              # labelled examples to fine-tune on, half of them shuffled


@dataclass(frozen=True)
class FinetuneSettings(LoopSettings):
    """How `finetune` trains (`lib.settings.LoopSettings`), with loss L3 = L2 + lm_weight * L1,
    warmup over `warmup_frac` of the steps and AdamW's `weight_decay`."""
    lm_weight: float
    warmup_frac: float
    weight_decay: float

    def __post_init__(self):
        super().__post_init__()
        check_fields(self, non_negative=("lm_weight", "weight_decay"), fractions=("warmup_frac",))


# The fine-tuning, the same for every size and for the pre-trained and the fresh model.
FINETUNE = FinetuneSettings(steps=256, batch_size=16, lr=1e-3, grad_clip=1.0, seed=0, lm_weight=0.5, warmup_frac=0.1,
                            weight_decay=0.01)


def special_ids(text_vocab=TEXT_VOCAB):
    """(start, delim, classify): the ids just after the text vocabulary."""
    return text_vocab, text_vocab + 1, text_vocab + 2


# ---- the task --------------------------------------------------------------------------------------
def _plays():
    from .shakespeare import shakespeare_plays
    return {p["slug"]: p for p in shakespeare_plays()}


def play_folds(n_folds=N_FOLDS, seed=0):
    """[[slug, ...] per fold]: each genre's plays, shuffled (seeded), dealt round the folds in
    turn, so every fold holds every genre (the smallest genres have 4 plays: n_folds <= 4) and
    the folds' sizes differ by at most one."""
    plays = _plays().values()
    by_genre = {g: [p["slug"] for p in plays if p["genre"] == g] for g in GENRES}
    smallest = min(len(slugs) for slugs in by_genre.values())
    if not isinstance(n_folds, int) or not 2 <= n_folds <= smallest:
        raise ValueError(f"n_folds must be an integer from 2 to {smallest} (the smallest genre's play count), "
                         f"got {n_folds!r}")
    rng = np.random.default_rng(seed)
    folds, k = [[] for _ in range(n_folds)], 0
    for genre in GENRES:
        for slug in rng.permutation(by_genre[genre]):
            folds[k % n_folds].append(str(slug))
            k += 1
    return folds


def split(fold, n_folds=N_FOLDS):
    """(train slugs, test slugs) of split `fold`: its fold is the test set."""
    folds = play_folds(n_folds)
    if not 0 <= fold < n_folds:
        raise ValueError(f"fold must be in [0, {n_folds}), got {fold!r}")
    return [s for k, f in enumerate(folds) if k != fold for s in f], folds[fold]


def encode_example(segments, text_vocab=TEXT_VOCAB):
    """[start] s_1 [delim] s_2 ... [delim] s_n [classify] as one int64 array (segments: arrays of
    text ids; one segment gives [start] s_1 [classify])."""
    start, delim, classify = special_ids(text_vocab)
    parts = [[start]]
    for i, segment in enumerate(segments):
        parts += [[delim], segment] if i else [segment]
    return np.concatenate(parts + [[classify]]).astype(np.int64)


def shuffle_words(passage, rng):
    """The passage (bytes) with its words between the first and the last in random order: the
    same bytes and length, the same first and last word (a passage cut mid-word ends in part of
    one), so only the order inside differs."""
    words = passage.split(b" ")
    if len(words) < 3:                                       # no word between the first and the last
        return passage
    middle = [words[i] for i in rng.permutation(np.arange(1, len(words) - 1))]
    return b" ".join([words[0], *middle, words[-1]])


def word_order_examples(slugs, n_passages, passage_len=TASK["passage_len"], seed=0):
    """x (2 n, passage_len + 2) int64 and labels (2 n,) int64 (indices into LABELS), n =
    n_passages: each passage passage_len bytes from a line start of a play drawn at random
    (seeded), once as written (label 1) and once with its words shuffled (label 0), in that
    order. The first 2 k rows are those of the first k passages, so a smaller training set is
    part of a larger one."""
    plays = _plays()
    unknown = sorted(set(slugs) - set(plays))
    if unknown:
        raise ValueError(f"unknown plays {unknown}; "
                         "expected slugs from lib.shakespeare.shakespeare_plays()")
    texts = {}
    for slug in slugs:
        text = plays[slug]["text"].encode("utf-8")
        ids = np.frombuffer(text, np.uint8)
        # the starts of the lines with room for a passage after them
        texts[slug] = text, np.flatnonzero(ids[:-passage_len] == ord("\n")) + 1
    rng = np.random.default_rng(seed)
    xs = []
    while len(xs) < 2 * n_passages:
        text, starts = texts[slugs[rng.integers(len(slugs))]]
        a = rng.choice(starts)
        passage = text[a:a + passage_len]
        shuffled = shuffle_words(passage, rng)
        if shuffled != passage:                              # else too few words to reorder: draw again
            xs += [encode_example([np.frombuffer(p, np.uint8)]) for p in (passage, shuffled)]
    return np.stack(xs), np.tile([1, 0], n_passages)        # (2 n, passage_len + 2), (2 n,)


# ---- pre-training, cached ------------------------------------------------------------------------
def pretraining_text(fold, n_folds=N_FOLDS):
    """The text of split `fold`'s training plays, one after another: all its model pre-trains on."""
    plays = _plays()
    return "\n".join(plays[s]["text"] for s in split(fold, n_folds)[0])


def pretrained_folder(fold, n_folds=N_FOLDS, config=PRETRAIN_CONFIG, recipe=None, progress=True, device="cpu"):
    """The folder of the model pre-trained (next-byte prediction) on the text of split `fold`'s
    training plays only; trained on first use (torch twin when installed, on `device`) and cached
    (`lib.pretrained.trained_folder`)."""
    from .pretrained import trained_folder

    ids = np.frombuffer(pretraining_text(fold, n_folds).encode("utf-8"), np.uint8).astype(np.uint16)  # bytes
    return trained_folder(f"finetune/pretrained-{fold}of{n_folds}", config, {**PRETRAIN, **(recipe or {})}, ids,
                          device=device, progress=progress)


def pretrained(fold, n_folds=N_FOLDS, twin="torch", **options):
    """The pre-trained model of split `fold` as a `lib.numpy_twin.GPT` or `lib.torch_twin.GPT`."""
    GPT = twin_module(twin).GPT                              # a bad twin name raises before any training
    return GPT.load(pretrained_folder(fold, n_folds, **options))


# ---- fine-tuning ---------------------------------------------------------------------------------
def finetune(model, head, x, labels, settings=FINETUNE, *, progress=True):
    """Train `model` and `head` (one twin) on x (N, T) and labels (N,) as `settings` (a
    `FinetuneSettings`) say, through `train_loop` with the twin's `finetune_step`. Returns the
    history: per step "loss" (L3), "cls_loss" (L2), "lm_loss" (L1), "lr"."""
    x, labels = np.asarray(x), np.asarray(labels)
    if x.ndim != 2 or labels.shape != (len(x),) or not len(x):
        raise ValueError(f"x must be (N, T) and labels (N,) with N >= 1, got {x.shape} and {labels.shape}")
    step = twin_module(twin_of(model), "finetune").finetune_step
    return train_loop(model, head, (x, labels), step, settings, "fine-tuning", progress=progress)


def train_loop(model, head, arrays, step, settings=FINETUNE, what="fine-tuning", *, progress=True):
    """Chapter 7's loop: `settings.steps` batches of rows of `arrays` (each (N, ...)) taken in turn
    from shuffled passes over the N examples, loss L3 = L2 + lm_weight * L1, AdamW with linear
    warmup over `warmup_frac` of the steps and cosine decay to 0. A fixed number of steps, not of
    passes, so that a small training set is seen more often and each run costs the same.
    step(model, head, optimizer, *batch, lm_weight, lr, grad_clip) is the twin's step on one batch
    and returns (L3, L2, L1). Returns the history: per step "loss", "cls_loss", "lm_loss", "lr"."""
    from .progress import READ_SECONDS, progress_bar
    from .schedule import lr_at

    s = settings
    batches = shuffled_batches(len(arrays[0]), s.steps, s.batch_size, s.seed)   # (steps, batch_size)
    optimizer = twin_module(twin_of(model), "finetune").make_optimizer(model, head, s.lr, s.weight_decay)
    # On the model's device once, before the loop: a GPU then never waits for a copy from the host.
    *arrays, batches = (as_model_ids(model, a) for a in (*arrays, batches))
    history = {"step": [], "loss": [], "cls_loss": [], "lm_loss": [], "lr": []}
    shown = -READ_SECONDS
    with progress_bar(s.steps, what, disable=not progress) as bar:
        for i, rows in enumerate(batches):
            lr_now = lr_at(i, s.lr, 0.0, max(1, int(s.warmup_frac * s.steps)), s.steps)
            losses = step(model, head, optimizer, *(a[rows] for a in arrays), s.lm_weight, lr_now, s.grad_clip)
            for key, value in zip(("step", "loss", "cls_loss", "lm_loss", "lr"), (i + 1, *losses, lr_now)):
                history[key].append(value)
            bar.update(1)
            # a read waits for the device
            if progress and (time.perf_counter() - shown >= READ_SECONDS or i == s.steps - 1):
                bar.set_postfix(loss=f"{float(losses[0]):.3f}", refresh=False)
                shown = time.perf_counter()
    for key in ("loss", "cls_loss", "lm_loss"):   # the torch twin's losses, read once at the end
        history[key] = [float(value) for value in history[key]]
    return history


def classifier(model, seed=0):
    """(model with the three special tokens added, a fresh ClassifierHead over LABELS), same twin."""
    twin = twin_module(twin_of(model), "finetune")
    return twin.add_tokens(model, N_SPECIAL, seed), twin.ClassifierHead(model.config.n_embd, len(LABELS), seed)


def accuracy(model, head, x, labels):
    """The fraction of rows of x (N, T) whose predicted class is their label (N,)."""
    return float(np.mean(twin_module(twin_of(model), "finetune").predict(model, head, x) == labels))


# ---- the experiment ----------------------------------------------------------------------------------
INITS = ("pretrained", "scratch")


def _settings(n_folds, sizes, config, pretrain, task, finetuning):
    """The experiment's settings as it runs them: the seeds of its trainings shifted by the course
    seed (`lib.cached.shifted`; the pre-training's shift happens in `trained_folder`, which is given
    the settings as written)."""
    pretrain = {**PRETRAIN, **(pretrain or {})}
    return dict(n_folds=n_folds, sizes=list(sizes), config=config.to_dict(),
                pretrain={**pretrain, "seed": shifted(pretrain["seed"])}, task={**TASK, **(task or {})},
                finetune=asdict(replace(finetuning, seed=shifted(finetuning.seed))), inits=INITS)


def experiment_file(n_folds=N_FOLDS, sizes=SIZES, config=PRETRAIN_CONFIG, pretrain=None, task=None,
                    finetuning=FINETUNE):
    """Where `word_order_experiment` caches its result for these settings (the file exists once
    it has run)."""
    plays = _plays()
    return digest_path("finetune/word_order_experiment", _settings(n_folds, sizes, config, pretrain, task, finetuning),
                       [plays[s]["text"] for s in sorted(plays)], suffix=".json")


def word_order_experiment(n_folds=N_FOLDS, sizes=SIZES, config=PRETRAIN_CONFIG, pretrain=None, task=None,
                          finetuning=FINETUNE, progress=True, device="cpu"):
    """For each split and each number of labelled examples in `sizes` (the first ones of the same
    training set), the test accuracy after fine-tuning from the split's pre-trained model and from
    a fresh model of the same shape (INITS), fine-tuned as `finetuning` (a `FinetuneSettings`)
    says. Runs with the torch twin on `device`; cached as JSON by its settings (`experiment_file`).

    Returns {"settings": ..., "rows": [{"split", "test_plays", "n_test", "pretrained": [accuracy
    per size], "scratch": [...]}, ...]}."""
    if not sizes or any(not isinstance(n, int) or n < 2 or n % 2 for n in sizes):
        raise ValueError(f"sizes must be even numbers of examples >= 2 (a passage and its shuffled twin), got {sizes!r}")
    settings = _settings(n_folds, sizes, config, pretrain, task, finetuning)
    path = experiment_file(n_folds, sizes, config, pretrain, task, finetuning)
    if path.is_file():
        return json.loads(path.read_text())
    from .torch_twin import GPT

    task, tuning = settings["task"], FinetuneSettings(**settings["finetune"])
    rows = []
    for fold in range(n_folds):
        train_slugs, test_slugs = split(fold, n_folds)
        x, y = word_order_examples(train_slugs, max(sizes) // 2, task["passage_len"], seed=fold)
        x_test, y_test = word_order_examples(test_slugs, task["test_passages"], task["passage_len"], seed=1000 + fold)
        row = dict(split=fold, test_plays=test_slugs, n_test=len(x_test))
        for init in INITS:
            row[init] = []
            for n in sizes:
                start = (pretrained(fold, n_folds, config=config, recipe=pretrain, progress=progress, device=device)
                         if init == "pretrained" else GPT(config, seed=settings["pretrain"]["seed"]))
                model, head = classifier(start.to(device), seed=tuning.seed)
                head.to(device)
                finetune(model, head, x[:n], y[:n], tuning, progress=progress)
                row[init].append(accuracy(model, head, x_test, y_test))
        rows.append(row)
    write_atomic(path, json.dumps({"settings": settings, "rows": rows}, indent=1))
    return json.loads(path.read_text())                      # as a later call reads it


def accuracy_table(result):
    """(len(INITS), splits, sizes) array of test accuracies from a `word_order_experiment` result."""
    return np.array([[row[init] for row in result["rows"]] for init in INITS])


def format_table(result):
    """The accuracies as text: one row per training-set size, each split's accuracy and the mean,
    for each of INITS."""
    table = accuracy_table(result)                           # (inits, splits, sizes)
    splits = table.shape[1]
    lines = [f"{'examples':>8s}" + "".join(f"  {init + ' (per split, mean)':>{7 * splits + 7}s}" for init in INITS)]
    for j, n in enumerate(result["settings"]["sizes"]):
        cells = ["".join(f"{a:7.3f}" for a in table[i, :, j]) + f"{table[i, :, j].mean():7.3f}"
                 for i in range(len(INITS))]
        lines.append(f"{n:8d}" + "".join(f"  {cell}" for cell in cells))
    return "\n".join(lines)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lib.finetune", description=(
        "Run chapter 7's word-order experiment (a pre-training per split, then fine-tuning from the pre-trained "
        "model and from scratch on each training-set size) or read it from the cache, and print its table of "
        "test accuracies."))
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    args = parser.parse_args(argv)
    print(format_table(word_order_experiment(device=args.device)))


if __name__ == "__main__":
    main()
