"""Hidden tests of exercise 5.3 (the training loop): batches, a step with gradient accumulation
and clipping, evaluation, and the loop around them.

The reference is lib itself: `lib.data.get_batch`, `train_step` and `estimate_loss` of
`lib.numpy_twin.train`, and `lib.train.train`, whose loop the exercise mirrors (the same batches
for the same seed), so that a student's loop is compared with lib's step by step. The model is a
numpy-twin GPT of 1 layer, 8 wide, over 32 ids with a context of 8, in float64; its training ids
lie in [0, 16) and its validation ids in [16, 32), so that an evaluation's batches tell which
split they came from.
- get_batch: exact ids (int64) for a seeded Generator, from uint16 and int64 arrays. Ids of
  exactly block_size + 1 tokens hold one window, which a constant answer gets right: an edge test.
- train_step: driven by `train_step` (grader/drivers.py), one call per step on one model with
  a recording SGD optimizer: what it returned, the loss within 1e-9 and the norm (before
  clipping) within 1e-9 relative, and the gradients each step gave optimizer.step(), once per
  step, within 1e-5 relative + 1e-12 (a clip by max_norm / norm instead of torch's
  max_norm / (norm + 1e-6) differs by about 1e-6 / norm). Several steps in a row catch a step
  that keeps the previous step's gradients.
- estimate_loss: driven by `estimate_loss`, between a backward pass and its step, on a model
  with dropout 0.2: the mean of the batches' losses in evaluation mode within 1e-9 relative; an
  edge test (a function that does nothing passes it) that the gradients and weights are left
  exactly as they were and the model is back in training mode.
- train_loop: driven by `train_loop`. With stand-ins for the graded train_step and estimate_loss
  (they record their calls and return numbers made from the batches), four tests per
  configuration grade the loop apart from them: the evaluation steps, each step's learning rate
  and max_norm, the batches (each step's global batch split into micro-batches, the fixed
  evaluation batches), and the history holding what the calls returned. One test trains for
  real with lib's AdamW and compares the whole history with lib.train.train's, within 1e-8
  relative (float64: only the order of the sums differs).
lib's clip_grad_norm is not blocked: chapter 5 shows it, open, before this exercise, so blocking
it would make that page show this exercise's answer. A student may call it; what is graded is
where the step clips (after the micro-batches, before the update, on the global norm) and which
norm it returns. Exercise 5.1's cross_entropy, lr_at and AdamW are lib's to use here.
"""
import math

import numpy as np

from grader.drivers import drive_estimate_loss, drive_train_step
from grader.spec import Exercise, Model, Rng, Test, Verdict
from lib.numpy_twin.train import grad_norm

EXERCISE = Exercise(
    notebook="ch5_training_loop", title="The training loop",
    functions=("get_batch", "train_step", "estimate_loss", "train_loop"),
    blocked=("lib.data:get_batch", "lib.data:BatchSampler", "lib.numpy_twin.train:train_step",
             "lib.numpy_twin.train:estimate_loss", "lib.train:train", "lib.train:evaluate_loss",
             "lib.finetune:train_loop"),
)

TINY = dict(vocab_size=32, n_ctx=8, n_layer=1, n_head=2, n_embd=8)
HISTORY_KEYS = ("step", "train_loss", "lr", "grad_norm", "eval_step", "eval_train_loss", "val_loss")


def _lib_get_batch(ids, batch_size, block_size, rng):
    from lib.data import get_batch
    return get_batch(ids, batch_size, block_size, rng)


def _lib_train_step(model, micro_batches, optimizer, max_norm):
    from lib.numpy_twin.train import train_step as lib_step
    return lib_step(model, optimizer, micro_batches, optimizer.lr, max_norm)


def _lib_estimate_loss(model, batches):
    from lib.numpy_twin.train import estimate_loss as lib_estimate
    return lib_estimate(model, batches)


def _lib_train_loop(model, optimizer, train_ids, val_ids, config):
    """lib.train.train, which builds the same AdamW as the one the loop is given."""
    from lib.train import train
    return train(model, train_ids, val_ids, config, progress=False)


REFERENCE = {"get_batch": _lib_get_batch, "train_step": _lib_train_step, "estimate_loss": _lib_estimate_loss,
             "train_loop": _lib_train_loop}


def _model(marker):
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    return GPT(GPTConfig(**marker.config), seed=marker.seed, dtype=np.dtype(marker.dtype))


def _number(got):
    if isinstance(got, np.ndarray) and got.shape == () and np.issubdtype(got.dtype, np.number):
        got = float(got)
    return got if isinstance(got, (int, float)) and not isinstance(got, bool) else None


def _close_number(got, want, rtol):
    got = _number(got)
    return got is not None and math.isfinite(got) and abs(got - want) <= rtol * abs(want) + 1e-12


# ---- get_batch ---------------------------------------------------------------------------------------
def windows(expected):
    want_x, want_y = (np.asarray(a) for a in expected)

    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            return False, "expected a pair (x, y)"
        for name, value, want in (("x", got[0], want_x), ("y", got[1], want_y)):
            if not isinstance(value, np.ndarray) or value.shape != want.shape:
                return Verdict(False, f"{name}: not an array of shape (batch_size, block_size)",
                               f"expected {want.shape}")
            if value.dtype != np.int64:
                return False, f"{name}: dtype {value.dtype}; return int64 ids (uint16 arithmetic wraps around)"
            if not np.array_equal(value, want):
                b = int(np.argwhere(value != want)[0][0])
                return False, (f"{name}: window {b} differs from the one the Generator's draw gives (one call, "
                               f"rng.integers(0, len(ids) - block_size, size=batch_size), for the starts)")
        return True, "the same windows"
    return check


def _get_batch_tests():
    rng = np.random.default_rng(53)
    cases = {"1,000 uint16 ids, 4 windows of 8": (rng.integers(0, 256, 1000).astype(np.uint16), 4, 8, 1),
             "50,000 uint16 ids, 16 windows of 32": (rng.integers(0, 256, 50_000).astype(np.uint16), 16, 32, 2),
             "20 int64 ids, 6 windows of 1": (rng.integers(0, 50, 20), 6, 1, 3),
             "ids of block_size + 2 tokens, 12 windows (both starts drawn)": (np.arange(12, dtype=np.uint16), 12, 10, 4)}
    out = [Test(f"get_batch: {label}", "get_batch", (ids, B, T, Rng(seed)),
                windows(_lib_get_batch(ids, B, T, np.random.default_rng(seed))), points=2)
           for label, (ids, B, T, seed) in cases.items()]
    ids = np.arange(9, dtype=np.uint16)
    out.append(Test("get_batch: ids of exactly block_size + 1 tokens", "get_batch", (ids, 3, 8, Rng(5)),
                    windows(_lib_get_batch(ids, 3, 8, np.random.default_rng(5))), edge=True))
    return out


# ---- train_step --------------------------------------------------------------------------------------
def stepped(expected, counts, max_norm):
    """Check for the train_step driver: per step [returned (loss, norm), [grads of each optimizer.step()]]."""
    def check(got):
        if not isinstance(got, list) or len(got) != len(expected):
            return False, "the steps could not be read back"
        for i, ((returned, seen), (want_returned, want_seen), k) in enumerate(zip(got, expected, counts)):
            at = f"step {i + 1} ({k} micro-batches)"
            if not isinstance(returned, list) or len(returned) != 2:
                return False, f"{at}: train_step must return (loss, norm)"
            if not isinstance(seen, list) or len(seen) != 1:
                calls = len(seen) if isinstance(seen, list) else "?"
                return False, f"{at}: optimizer.step was called {calls} times; once per train_step"
            grads, want = seen[0], want_seen[0]
            if not isinstance(grads, dict) or set(grads) != set(want) or \
                    any(not isinstance(g, np.ndarray) or g.shape != want[n].shape for n, g in grads.items()):
                return False, f"{at}: optimizer.step got something other than the model's gradients"
            if max_norm and grad_norm(grads) > max_norm * (1 + 1e-5):
                return False, (f"{at}: the optimizer got gradients of global norm {grad_norm(grads):.4g} > max_norm "
                               f"= {max_norm}: clip on the norm of all the gradients taken together")
            if not all(np.allclose(grads[n], want[n], rtol=1e-5, atol=1e-12) for n in want):
                ratio = grad_norm(grads) / max(grad_norm(want), 1e-300)
                if k > 1 and abs(ratio - k) < 1e-3 * k:
                    return False, (f"{at}: the gradient is {k}x the full batch's: each micro-batch's gradient must "
                                   f"be divided by the number of micro-batches")
                if not max_norm and ratio < 1e-3:
                    return False, f"{at}: max_norm = 0 must turn clipping off, not scale the gradients to 0"
                if i > 0 and abs(ratio - 1) > 1e-3:
                    return False, (f"{at}: not this step's gradient (the previous step's gradients kept? zero them "
                                   f"at the start of each step)")
                return False, f"{at}: the gradients given to optimizer.step are not those of the micro-batches' mean loss"
            if not _close_number(returned[1], want_returned[1], 1e-9):
                return False, f"{at}: the returned norm is not the global norm of the gradients before clipping"
            if not _close_number(returned[0], want_returned[0], 1e-9):
                return False, f"{at}: the returned loss is not the mean loss over the micro-batches"
        return True, "the same steps"
    return check


def _train_step_tests():
    rng = np.random.default_rng(530)
    model = Model(TINY, seed=3, dtype="float64")
    out = []

    def micro(n, b):                                         # n micro-batches of b windows
        ids = rng.integers(0, 32, 400)
        x, y = _lib_get_batch(ids, n * b, 8, rng)
        return [[x[i:i + b], y[i:i + b]] for i in range(0, n * b, b)]

    cases = {"4 micro-batches of 2 windows, no clipping (max_norm = 0)": ([micro(4, 2)], 0.0, 0.0, 3),
             "1 micro-batch of 8 windows, max_norm far above the norm": ([micro(1, 8)], 100.0, 0.0, 2),
             "2 micro-batches of 3 windows, clipped to max_norm = 0.05": ([micro(2, 3)], 0.05, 0.0, 3),
             "3 steps in a row of 2 micro-batches, SGD at lr 0.5, max_norm 1.0": ([micro(2, 2) for _ in range(3)],
                                                                                1.0, 0.5, 2),
             "2 steps of 5 micro-batches of 1 window, max_norm = 0.1": ([micro(5, 1), micro(5, 1)], 0.1, 0.3, 2)}
    for label, (steps, max_norm, lr, points) in cases.items():
        expected = drive_train_step(_lib_train_step, (_model(model), steps, max_norm, lr), {})
        out.append(Test(f"train_step: {label}", "train_step", (model, steps, max_norm, lr),
                        stepped(expected, [len(s) for s in steps], max_norm), driver="train_step", points=points))
    return out


# ---- estimate_loss -----------------------------------------------------------------------------------
def evaluated(expected, mode_only=False):
    """Check for the estimate_loss driver: [returned, grads before, grads after, params after, training]."""
    want_loss, _, _, want_params, _ = expected

    def check(got):
        if not isinstance(got, list) or len(got) != 5:
            return False, "the result could not be read"
        loss, before, after, params, training = got
        if mode_only:
            if not isinstance(before, dict) or not isinstance(after, dict) or set(before) != set(after) or \
                    any(not np.array_equal(before[n], after[n]) for n in before):
                return False, "the gradients changed: evaluation must not run a backward pass or zero them"
            if not isinstance(params, dict) or set(params) != set(want_params) or \
                    any(not np.array_equal(params[n], want_params[n]) for n in want_params):
                return False, "the weights changed: evaluation must not take a step"
            if training is not True:
                return False, "the model is left in evaluation mode: put it back in the mode it was in"
            return True, "gradients, weights and mode as they were"
        if _number(loss) is None:
            return False, f"expected a number, got {type(loss).__name__}"
        if not _close_number(loss, want_loss, 1e-9):
            return False, ("not the mean loss of the batches in evaluation mode (no dropout: model.eval(), "
                           "or lib.dropout.eval_mode)")
        return True, "the evaluation-mode loss"
    return check


def _estimate_loss_tests():
    rng = np.random.default_rng(531)
    model = Model({**TINY, "dropout": 0.2}, seed=4, dtype="float64")
    ids = rng.integers(0, 32, 500)
    x, _ = _lib_get_batch(ids, 2, 8, rng)
    dlogits = rng.standard_normal((2, 8, 32))
    out = []
    cases = {"3 batches of 2 windows, dropout 0.2": [list(_lib_get_batch(ids, 2, 8, rng)) for _ in range(3)],
             "1 batch of 5 windows of 6, dropout 0.2": [list(_lib_get_batch(ids, 5, 6, rng))]}
    for label, batches in cases.items():
        args = (model, batches, x, dlogits)
        expected = drive_estimate_loss(_lib_estimate_loss, (_model(model), *args[1:]), {})
        out.append(Test(f"estimate_loss: {label}", "estimate_loss", args, evaluated(expected), driver="estimate_loss",
                        points=3))
    out.append(Test("estimate_loss: the gradients, the weights and the mode are left as they were", "estimate_loss",
                    args, evaluated(expected, mode_only=True), driver="estimate_loss", points=2,
                    edge=True))
    return out


# ---- train_loop --------------------------------------------------------------------------------------
def _split(ids_rng):
    """Training ids in [0, 16), validation ids in [16, 32)."""
    return ids_rng.integers(0, 16, 600).astype(np.uint16), ids_rng.integers(16, 32, 200).astype(np.uint16)


LOOPS = {
    "12 steps of 2 micro-batches of 2, evaluations every 5": dict(
        max_iters=12, batch_size=2, grad_accum=2, block_size=None, lr=1e-2, min_lr=1e-3, warmup_iters=3,
        weight_decay=0.1, betas=[0.9, 0.99], grad_clip=0.5, eval_interval=5, eval_iters=2, seed=7),
    "10 steps of 3 windows of 6, no clipping, evaluations every 5": dict(
        max_iters=10, batch_size=3, grad_accum=1, block_size=6, lr=3e-3, min_lr=3e-4, warmup_iters=0,
        weight_decay=0.0, betas=[0.9, 0.95], grad_clip=0.0, eval_interval=5, eval_iters=1, seed=11),
}


def _loop_plan(fields, train_ids, val_ids):
    """What lib's loop does for these settings: evaluation steps, learning rates, batches."""
    from lib.schedule import lr_at
    c = dict(fields)
    T = c["block_size"] or TINY["n_ctx"]
    B, k, n = c["batch_size"], c["grad_accum"], c["max_iters"]
    rng, eval_rng = np.random.default_rng(c["seed"]), np.random.default_rng(c["seed"] + 1)
    batches = [_lib_get_batch(train_ids, B * k, T, rng) for _ in range(n)]
    evals = {name: [_lib_get_batch(ids, B, T, eval_rng)[0] for _ in range(c["eval_iters"])]
             for name, ids in (("train", train_ids), ("val", val_ids))}
    return dict(eval_steps=sorted({0, n, *range(0, n, c["eval_interval"])}), batches=batches, evals=evals,
                lrs=[lr_at(s, c["lr"], c["min_lr"], c["warmup_iters"], n) for s in range(n)], k=k, B=B, T=T,
                max_norm=c["grad_clip"], n=n)


def _read_loop(got):
    """(history, step calls, evaluation calls) of the train_loop driver's answer, or a message."""
    if not isinstance(got, list) or len(got) != 3 or not isinstance(got[0], dict):
        return "train_loop must return the history, a dict of lists"
    history, steps, evaluations = got
    missing = [key for key in HISTORY_KEYS if not isinstance(history.get(key), list)]
    if missing:
        return f"the history has no list {missing[0]!r}"
    return history, steps, evaluations


def _split_of(xs):
    """'train' or 'val' for an evaluation call's batches (the two splits' ids do not overlap)."""
    top = max((int(np.max(x)) for x in xs if isinstance(x, np.ndarray) and x.size), default=-1)
    return "train" if 0 <= top < 16 else "val"


def loop_check(plan, aspect):
    def check(got):
        read = _read_loop(got)
        if isinstance(read, str):
            return False, read
        history, steps, evaluations = read
        if aspect == "evaluations":
            if history["eval_step"] != plan["eval_steps"]:
                return False, (f"history['eval_step'] is {history['eval_step'][:20]}: evaluate at step 0, every "
                               f"eval_interval steps and after the last step")
            if len(evaluations) != 2 * len(plan["eval_steps"]):
                return False, f"estimate_loss was called {len(evaluations)} times: twice per evaluation, once per split"
            return True, "evaluations at the right steps"
        if len(steps) != plan["n"]:
            return False, f"train_step was called {len(steps)} times: once per step, max_iters in all"
        if aspect == "rates":
            for i, (lr, max_norm, *_) in enumerate(steps):
                if not _close_number(lr, plan["lrs"][i], 1e-12):
                    return False, f"step {i + 1}: optimizer.lr is not lr_at(step) (steps counted from 0)"
                if _number(max_norm) != plan["max_norm"]:
                    return False, f"step {i + 1}: max_norm is not the config's grad_clip"
            return True, "the schedule's rate and grad_clip at every step"
        if aspect == "batches":
            for i, (_, _, xs, ys, *_) in enumerate(steps):
                if len(xs) != plan["k"] or any(np.shape(x) != (plan["B"], plan["T"]) for x in xs + ys):
                    return False, (f"step {i + 1}: expected grad_accum micro-batches of (batch_size, block_size) "
                                   f"windows")
                x, y = plan["batches"][i]
                if not (np.array_equal(np.concatenate(xs), x) and np.array_equal(np.concatenate(ys), y)):
                    return False, (f"step {i + 1}: not the batch of batch_size * grad_accum windows that "
                                   f"get_batch draws next from np.random.default_rng(seed), cut in order")
            for j, (xs, _, _) in enumerate(evaluations):
                if len(xs) != len(plan["evals"]["train"]) or not any(
                        all(np.array_equal(a, b) for a, b in zip(xs, plan["evals"][split])) for split in ("train", "val")):
                    return False, (f"estimate_loss call {j + 1}: not the fixed evaluation batches (eval_iters "
                                   f"batches of each split, drawn once from np.random.default_rng(seed + 1))")
            return True, "the same batches"
        returned = {"train_loss": [s[4] for s in steps], "grad_norm": [s[5] for s in steps], "lr": [s[0] for s in steps],
                    "step": list(range(1, plan["n"] + 1))}
        for split, key in (("train", "eval_train_loss"), ("val", "val_loss")):
            returned[key] = [loss for xs, _, loss in evaluations if _split_of(xs) == split]
        for key, want in returned.items():
            values = history[key]
            if len(values) != len(want) or not all(_close_number(v, w, 1e-12) for v, w in zip(values, want)):
                return False, f"history[{key!r}] does not hold what the loop's calls returned, in order"
        return True, "the history records every step and evaluation"
    return check


def lib_history(expected):
    def check(got):
        read = _read_loop(got)
        if isinstance(read, str):
            return False, read
        history = read[0]
        for key in HISTORY_KEYS:
            values, want = history[key], expected[key]
            if len(values) != len(want):
                return False, f"history[{key!r}] has {len(values)} entries, not as many as lib's train records"
            for i, (v, w) in enumerate(zip(values, want)):
                if not _close_number(v, w, 1e-8):
                    return False, f"history[{key!r}] differs from lib's train from entry {i} on"
        return True, "lib's history, step by step"
    return check


def _train_loop_tests():
    from lib.config import TrainConfig
    train_ids, val_ids = _split(np.random.default_rng(532))
    model = Model(TINY, seed=5, dtype="float64")
    out = []
    for label, fields in LOOPS.items():
        plan = _loop_plan(fields, train_ids, val_ids)
        for aspect, what in (("evaluations", "evaluation steps"), ("rates", "learning rate and max_norm per step"),
                             ("batches", "the batches"), ("history", "the history")):
            out.append(Test(f"train_loop, {what}: {label}", "train_loop", (model, train_ids, val_ids, fields, True),
                            loop_check(plan, aspect), driver="train_loop", points=2))
    fields = LOOPS["12 steps of 2 micro-batches of 2, evaluations every 5"]
    config = TrainConfig(**{**fields, "betas": tuple(fields["betas"])})
    expected = _lib_train_loop(_model(model), None, train_ids, val_ids, config)
    out.append(Test("train_loop trains as lib's train does: 12 steps with AdamW", "train_loop",
                    (model, train_ids, val_ids, fields, False), lib_history(expected), driver="train_loop", points=3))
    return out


def tests():
    return _get_batch_tests() + _train_step_tests() + _estimate_loss_tests() + _train_loop_tests()
