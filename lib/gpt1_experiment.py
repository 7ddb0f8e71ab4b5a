"""GPT-1's four input formats measured on the plays, and its three ablations in miniature (chapter 7).

- `formats_experiment()`: for each format of `lib.gpt1_tasks` and each split of chapter 7
  (`lib.finetune.split`), which test items the model gets right after fine-tuning from the
  split's pre-trained model (chapter 7's, `lib.finetune.pretrained`) and from scratch
  (`format_runs`, one format).
- `lm_weight_ablation()`: the auxiliary loss's weight lambda in LM_WEIGHTS, with a small and a
  large number of labels (GPT-1's Table 5 asks whether L1 helps, and when).
- `layers_ablation()`: the first k of the L blocks from the pre-trained model, the rest fresh,
  k = 0..L (GPT-1's Figure 2, left); the embeddings and the final norm come from it for every k.
- `zero_shot_curve()`: one pre-training of split 0's model again, as `pretrained` trains it,
  its checkpoints at ZERO_SHOT_STEPS scored on every format's test items with no fine-tuning at
  all, by likelihood (GPT-1's Figure 2, right; `zero_shot_right`).

Every result is the list of test items each run got right (1) or wrong (0), so that runs on the
same items compare with McNemar's exact test (`lib.evaluate.mcnemar`) and each accuracy has its
Wilson interval (`lib.evaluate.wilson_interval`). Each is cached as JSON in
`$GPT2_COURSE_CACHE/gpt1/`, named by a digest of its settings and of the plays' text.
"""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np

from .assets import digest_path
from .atomic import write_atomic
from .cached import shifted
from .finetune import FINETUNE, INITS, N_FOLDS, PRETRAIN, PRETRAIN_CONFIG, _plays, pretrained, split, special_ids
from .gpt1_tasks import FORMATS, SEQUENCES, finetune_format, format_model, task_examples

TOKENS_PER_STEP = 16                 # sequences per batch: batch_size = 16 // SEQUENCES[format]
FORMAT_FINETUNE = replace(FINETUNE, steps=128)
DRAWS = dict(train=256, test=200)    # draws per split (2 rows each for the two-way formats)
ABLATION = dict(format="classification", split=0, labels=(32, 512))   # the ablations' task, split, sizes
LM_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
ZERO_SHOT_STEPS = (0, 100, 200, 400, 600)
NEUTRAL = np.array([ord("\n")])      # the context a line is scored after for its gain: nothing before


def format_settings(fmt, settings=FORMAT_FINETUNE):
    """The fine-tuning of format `fmt`: TOKENS_PER_STEP sequences a step, the seed shifted by the
    course seed (`lib.cached.shifted`)."""
    return replace(settings, batch_size=TOKENS_PER_STEP // SEQUENCES[fmt], seed=shifted(settings.seed))


def _cached(name, settings, compute):
    """compute()'s JSON result, cached under gpt1/`name` by the settings and the plays' text."""
    plays = _plays()
    path = digest_path(f"gpt1/{name}", settings, [plays[s]["text"] for s in sorted(plays)], suffix=".json")
    if not path.is_file():
        write_atomic(path, json.dumps({"settings": settings, **compute()}))
    return json.loads(path.read_text())


def _data(fmt, fold, draws=DRAWS):
    """(train, test) `Examples` of format `fmt` on split `fold`'s plays."""
    train_slugs, test_slugs = split(fold)
    return (task_examples(fmt, train_slugs, draws["train"], seed=fold),
            task_examples(fmt, test_slugs, draws["test"], seed=1000 + fold))


def right_answers(model, head, examples):
    """[1 or 0 per test row]: whether the model's highest score is the row's label."""
    from .twins import twin_module, twin_of

    twin = twin_module(twin_of(model), "gpt1_formats")
    predicted = twin.predict_format(model, head, examples.x, examples.extract, examples.format == "choice")
    return [int(p) for p in predicted == examples.labels]


def _start(init, fold):
    """The model a run starts from: the split's pre-trained model or a fresh one of its shape."""
    from .torch_twin import GPT

    return pretrained(fold, progress=False) if init == "pretrained" else GPT(PRETRAIN_CONFIG, seed=shifted(PRETRAIN["seed"]))


def _tuned_right(start, fmt, train, test, settings, n_rows=None):
    model, head = format_model(start, fmt, seed=settings.seed)
    rows = slice(None, n_rows)                               # the first rows: a smaller set is part of a larger
    finetune_format(model, head, train._replace(x=train.x[rows], extract=train.extract[rows],
                                                labels=train.labels[rows]), settings, progress=False)
    return right_answers(model, head, test)


# ---- the four formats -------------------------------------------------------------------------------
def format_runs(fmt):
    """{"runs": [{"format", "split", "init", "right": [1 or 0 per test row]}, ...]} for format
    `fmt`, every split and init (INITS), cached (one file per format)."""
    settings = dict(format=fmt, draws=DRAWS, finetune=asdict(format_settings(fmt)), n_folds=N_FOLDS,
                    pretrain_seed=shifted(PRETRAIN["seed"]), inits=INITS)

    def compute():
        runs = []
        for fold in range(N_FOLDS):
            train, test = _data(fmt, fold)
            for init in INITS:
                right = _tuned_right(_start(init, fold), fmt, train, test, format_settings(fmt))
                runs.append(dict(format=fmt, split=fold, init=init, right=right))
        return {"runs": runs}
    return _cached("formats", settings, compute)


def formats_experiment():
    """{"runs": [...]}: `format_runs` of every format, together."""
    return {"runs": [run for fmt in FORMATS for run in format_runs(fmt)["runs"]]}


# ---- the ablations -----------------------------------------------------------------------------------
def lm_weight_ablation():
    """{"runs": [{"labels", "lm_weight", "right"}, ...]}: ABLATION's task fine-tuned from the
    pre-trained model with each lambda of LM_WEIGHTS on each number of labelled rows, cached."""
    fmt, fold = ABLATION["format"], ABLATION["split"]
    settings = dict(ablation=ABLATION, draws=DRAWS, lm_weights=LM_WEIGHTS, finetune=asdict(format_settings(fmt)))

    def compute():
        train, test = _data(fmt, fold)
        return {"runs": [dict(labels=n, lm_weight=w, right=_tuned_right(
            pretrained(fold, progress=False), fmt, train, test, replace(format_settings(fmt), lm_weight=w), n))
            for n in ABLATION["labels"] for w in LM_WEIGHTS]}
    return _cached("lm_weight", settings, compute)


def transfer_layers(pre, k, seed):
    """A model of `pre`'s shape (torch twin): its first k blocks, embeddings and final
    norm are `pre`'s, its other blocks fresh (initialised with `seed`)."""
    from .torch_twin import GPT

    L = pre.config.n_layer
    if not isinstance(k, int) or not 0 <= k <= L:
        raise ValueError(f"k must be an integer from 0 to n_layer={L}, got {k!r}")
    state = pre.state_dict_numpy()
    fresh = GPT(pre.config, seed).state_dict_numpy()
    blocks = tuple(f"h.{i}." for i in range(k, L))           # the blocks that start fresh
    model = GPT(pre.config)
    model.load_state_dict({n: fresh[n] if n.startswith(blocks) else w for n, w in state.items()})
    return model


def layers_ablation():
    """{"runs": [{"k", "right"}, ...]}: ABLATION's task on its largest number of labels,
    fine-tuned from `transfer_layers(pre-trained, k)` for k = 0..L, cached."""
    fmt, fold = ABLATION["format"], ABLATION["split"]
    settings = dict(ablation=ABLATION, draws=DRAWS, finetune=asdict(format_settings(fmt)),
                    n_layer=PRETRAIN_CONFIG.n_layer, fresh_seed=shifted(PRETRAIN["seed"]))

    def compute():
        train, test = _data(fmt, fold)
        pre = pretrained(fold, progress=False)
        return {"runs": [dict(k=k, right=_tuned_right(transfer_layers(pre, k, settings["fresh_seed"]), fmt, train,
                                                      test, format_settings(fmt), max(ABLATION["labels"])))
                         for k in range(PRETRAIN_CONFIG.n_layer + 1)]}
    return _cached("layers", settings, compute)


# ---- zero-shot over pre-training ---------------------------------------------------------------------
def _segments(seq):
    """The text segments of one [start] a [delim] b [extract] sequence (its PAD cut off)."""
    _, delim, classify = special_ids()
    body = seq[1:list(seq).index(classify)]                  # a [delim] b, or a
    cut = np.flatnonzero(body == delim)
    return [body[:cut[0]], body[cut[0] + 1:]] if len(cut) else [body]


def zero_shot_right(model, examples):
    """[1 or 0 per draw]: the format's task answered by the language model alone (no
    special tokens, no head), by likelihood, as chapter 6b scores (`log_likelihoods`).
    - classification: of a passage as written and shuffled, the one of higher log p;
    - pairs, similarity: of the draw's two second lines, the one whose log-likelihood
      the first line raises more, its gain log p(b | a newline) - log p(b | newline);
    - choice: the choice of highest gain."""
    from .evaluate import log_likelihoods

    fmt, x, _, labels = examples
    segs = [[_segments(seq) for seq in example] for example in x]   # [a, b?] per sequence
    if fmt == "classification":
        sums, _ = log_likelihoods(model, [(NEUTRAL, s[0][0]) for s in segs])
        return [int(a > b) for a, b in zip(sums[0::2], sums[1::2])]   # as written, shuffled
    pairs = [(a, b) for row in segs for a, b in (row if fmt == "choice" else row[:1])]
    after, _ = log_likelihoods(model, [(np.concatenate([a, NEUTRAL]), b) for a, b in pairs])
    alone, _ = log_likelihoods(model, [(NEUTRAL, b) for _, b in pairs])
    gain = after - alone
    if fmt == "choice":
        return [int(g.argmax() == y) for g, y in zip(gain.reshape(len(x), -1), labels)]
    return [int(a > b) for a, b in zip(gain[0::2], gain[1::2])]   # label 1, then label 0


def zero_shot_curve():
    """{"steps": ZERO_SHOT_STEPS, "right": {format: [[1 or 0 per draw] per step]}}: split 0's model
    pre-trained again as `lib.finetune.pretrained` trains it, scored at each step of ZERO_SHOT_STEPS
    on every format's test draws, cached."""
    recipe = {**PRETRAIN, "seed": shifted(PRETRAIN["seed"]), "callback_every": min(ZERO_SHOT_STEPS[1:])}
    settings = dict(steps=ZERO_SHOT_STEPS, recipe=recipe, config=PRETRAIN_CONFIG.to_dict(), draws=DRAWS["test"])

    def compute():
        from .config import TrainConfig
        from .finetune import pretraining_text
        from .torch_twin import GPT
        from .train import train

        tests = {fmt: _data(fmt, 0)[1] for fmt in FORMATS}
        model = GPT(PRETRAIN_CONFIG, seed=recipe["seed"])
        right = {fmt: [zero_shot_right(model, tests[fmt])] for fmt in FORMATS}

        def score(step, history):
            if step in ZERO_SHOT_STEPS:
                for fmt in FORMATS:
                    right[fmt].append(zero_shot_right(model, tests[fmt]))
        ids = np.frombuffer(pretraining_text(0).encode("utf-8"), np.uint8).astype(np.uint16)
        train(model, ids, None, TrainConfig(**recipe), callback=score, progress=False)
        return {"steps": list(ZERO_SHOT_STEPS), "right": right}
    return _cached("zero_shot", settings, compute)


def all_runs():
    """Every result of this module, trained once (the install step: `lib.cached.RUNS`)."""
    return formats_experiment(), lm_weight_ablation(), layers_ablation(), zero_shot_curve()
