"""Chapter 5's measurement of what dropout does, trained once and cached (no framework here).

`dropout_runs()`: the small preset trained twice on a slice of the corpus small enough to
memorise, the first `SLICE` bytes of the training text (128 lines, the opening of A Midsummer
Night's Dream), once without dropout and once with GPT-1's 0.1, and validated on the whole
validation text. Each run trains once with `lib.pretrained.trained_folder` (the torch twin on
the CPU when torch is installed, about a minute on 2 cores), which caches it; install.sh runs
both, so that the chapter only reads their histories.
"""
from __future__ import annotations

from .config import GPTConfig
from .pretrained import RECIPE as SMALL_RECIPE
from .pretrained import trained_folder

SLICE = 4_000                 # training bytes: 500 steps of 12 x 64 bytes read them 96 times
DROPOUTS = (0.0, 0.1)         # without dropout, and GPT-1's rate
RECIPE = {**SMALL_RECIPE, "max_iters": 500, "warmup_iters": 50, "eval_interval": 50}


def dropout_runs(progress=True) -> dict[float, dict]:
    """{dropout: loss history} for each rate in DROPOUTS (see `lib.train.train` for the history's
    keys), each run trained on first use and cached."""
    from .data import load_corpus
    from .history import read_history

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    return {p: read_history(trained_folder(f"overfitting/dropout-{p}", GPTConfig.small(dropout=p), RECIPE,
                                           train_ids[:SLICE], val_ids, progress=progress))
            for p in DROPOUTS}
