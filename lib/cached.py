"""Every training the course caches, in one list, and the course seed that shifts them all.

The install step trains each of `RUNS` once (`python -m lib.cached`), so that no chapter pays
for it; `tools/claims.py` trains them again under other seeds, each in a cache folder of its
own, to check that what the chapters assert holds for any retraining, not just one.

`GPT2_COURSE_SEED` (a whole number, default 0) is added to the seed of every cached training:
the models' initialisation, their batches, dropout's masks, fine-tuning heads and new token
rows. The data (which plays, which passages, which test items) stays as it is. The shifted
seeds are part of each run's settings, so they are part of its cache key: another seed trains
models of its own beside the others, and seed 0 gives the settings as written.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

SEED_VARIABLE = "GPT2_COURSE_SEED"


def course_seed() -> int:
    """The whole number in GPT2_COURSE_SEED (0 when unset); ValueError naming the value otherwise."""
    text = os.environ.get(SEED_VARIABLE, "").strip() or "0"
    if not text.isdigit():
        raise ValueError(f"{SEED_VARIABLE} must be a whole number >= 0, got {text!r}")
    return int(text)


def shifted(seed: int) -> int:
    """A cached training's seed as this course seed runs it: `seed` + GPT2_COURSE_SEED."""
    return seed + course_seed()


def _small():
    from .pretrained import shakespeare_small_folder
    return shakespeare_small_folder()


def _modern():
    from .pretrained import modern_small_folder
    return modern_small_folder()


def _dropout():
    from .overfitting import dropout_runs
    return dropout_runs(progress=False)


def _finetune():
    from .finetune import word_order_experiment
    return word_order_experiment(progress=False)


def _positions():
    from .positions_experiment import experiment
    return experiment(progress=False)


def _gpt1():
    from .gpt1_experiment import all_runs
    return all_runs()


def _posttrain():
    from .posttrain.experiment import experiment
    return experiment(progress=False)


def _scale():
    from .scaling.ladder import emergence, isoflop, ladder
    return ladder(), isoflop(), emergence()


def _induction():
    from .scaling.induction import experiment
    return experiment(progress=False)


# (what, who reads it, the call that trains it once and then reads it from the cache), in the
# order they build on each other: chapter 9's experiment starts from the small model.
RUNS = (
    ("the small Shakespeare model (2,000 steps)", "chapters 3, 5, 6, 6b, 9, 10 and the widgets", _small),
    ("chapter 8's modern-block model (300 steps)", "chapter 6b", _modern),
    ("chapter 5's two dropout runs (500 steps each)", "chapter 5", _dropout),
    ("chapter 7's experiment (2 pre-trainings, 12 fine-tunings)", "chapter 7", _finetune),
    ("chapter 7's GPT-1 formats and ablations (16 + 13 fine-tunings, 1 pre-training)", "chapter 7", _gpt1),
    ("chapter 8's positions (5 pre-trainings, 2 fine-tunings at twice the context)", "chapter 8", _positions),
    ("chapter 9's experiment (instruction tuning, LoRA, three DPO runs)", "chapter 9", _posttrain),
    ("chapter 11's ladder of six sizes, its isoFLOP sweep and the ladder's task scores (21 runs)", "chapter 11",
     _scale),
    ("chapter 11's induction-head experiment (a 2-layer model and a 1-layer control, 4,000 steps each)", "chapter 11",
     _induction),
)


# The code that decides what these runs train and how: a change to any of it makes tools/claims.py's
# report stale (tests/test_claims.py), since the chapters' figures came from the code as it was.
CODE = ("lib/cached.py", "lib/pretrained.py", "lib/overfitting.py", "lib/finetune.py", "lib/gpt1_tasks.py",
        "lib/gpt1_experiment.py", "lib/positions_experiment.py", "lib/posttrain/experiment.py",
        "lib/posttrain/instructions.py", "lib/posttrain/loops.py", "lib/posttrain/scores.py",
        "lib/posttrain/template.py", "lib/train.py", "lib/schedule.py", "lib/settings.py", "lib/data.py",
        "lib/assets.py", "lib/config.py", "lib/dropout.py", "lib/torch_twin/train.py", "lib/torch_twin/gpu.py",
        "lib/torch_twin/finetune.py", "lib/torch_twin/gpt1_formats.py", "lib/torch_twin/posttrain.py",
        "lib/torch_twin/model.py", "lib/torch_twin/modern.py", "lib/scaling/ladder.py",
        "lib/scaling/induction.py")


def code_digest() -> str:
    """12 hex digits of sha256 over the files of CODE, in order."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for name in CODE:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def train_all(log=print):
    """Train (or find in the cache) every run of RUNS under the current course seed."""
    seed = course_seed()
    for what, readers, run in RUNS:
        start = time.perf_counter()
        run()
        log(f"cached: {what}, for {readers} (seed {seed}, {time.perf_counter() - start:.0f} s)")


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lib.cached", description=(
        "Train every model and experiment the chapters read from the course cache, once (each is then "
        f"read from the cache). {SEED_VARIABLE} shifts their seeds; GPT2_COURSE_CACHE names the cache."))
    parser.parse_args(argv)
    try:
        course_seed()
    except ValueError as error:
        print(f"python -m lib.cached: {error}", file=sys.stderr)
        return 2
    train_all(lambda line: print(f"install.sh: {line}", flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
