"""The drivers: how each exercise's tests call the student's definitions (copied into the sandbox beside the runner).

A hidden test names its driver (`Test.driver`, default "call"); grader/runner.py looks it up in
DRIVERS, inside the sandbox, and calls `driver(definition, args, kwargs)` with the student's
function or class and the test's decoded inputs. What the driver returns is encoded and sent
back as the test's answer. Adding an exercise whose answer is used in a particular way (a
class driven step by step, a function that updates its arguments in place) means adding a
driver here, never editing the sandbox or the runner. This module runs inside the sandbox,
next to hostile code: it imports numpy, and lib's copy in the sandbox where a driver builds
lib's objects (exercise 5.3's TrainConfig and AdamW, as the runner's input markers build
models), and it judges nothing.
"""
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np


def _accumulating(call, grads):
    """call() twice without zeroing, as gradient accumulation calls a backward; grads() gives the
    {name: gradient} it adds into. Returns [what the first call returned, {name: gradient} after
    one call, after two]."""
    returned = _copy(call())
    once = {name: np.array(g, copy=True) for name, g in grads().items()}
    call()
    return [returned, once, dict(grads())]


@contextmanager
def _swapped(fn, stand_ins: dict):
    """The graded cells' globals (fn's) named in stand_ins replaced by them while the block runs,
    then given back, whatever the graded code did meanwhile."""
    graded = getattr(fn, "__globals__", {})
    saved = {name: graded.get(name) for name in stand_ins}
    graded.update(stand_ins)
    try:
        yield
    finally:
        graded.update(saved)


def drive_call(fn, args, kwargs):
    """Call the function and return what it returns."""
    return fn(*args, **kwargs)


def drive_kvcache(cls, args, kwargs):
    """Exercise 6.1's cache class, used the way the model uses it: `cls(config, batch, dtype=...)`,
    then per chunk of new positions `update(layer, k, v)` for every layer, then `length += T`
    (GPT.forward advances the length). Returns every (k, v) that update gave back, copied."""
    config, batch, dtype, chunks = args
    cache = cls(config, batch, dtype=np.dtype(dtype))
    seen = []
    for k_all, v_all in chunks:                              # each (L, B, H, T, D)
        for layer in range(k_all.shape[0]):
            k, v = cache.update(layer, k_all[layer], v_all[layer])
            seen += [np.array(k, copy=True), np.array(v, copy=True)]
        cache.length += k_all.shape[3]
    return seen


class _CountedModel:
    """A model whose forward calls are recorded (the positions each is given); everything else
    is the model's own."""

    def __init__(self, model):
        self._model, self.positions = model, []

    def forward(self, idx, *args, **kwargs):
        self.positions.append(int(np.shape(idx)[1]))
        return self._model.forward(idx, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


def drive_counted(fn, args, kwargs):
    """Exercise 6.1's generator `fn(model, idx, max_new_tokens)` on a model that records how many
    positions each call of its forward is given. Returns [what fn returned, those counts]."""
    model, *rest = args
    counted = _CountedModel(model)
    return [_copy(fn(counted, *rest, **kwargs)), counted.positions]


def _copy(value):
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def drive_block_backward(fn, args, kwargs):
    """Exercise 4.3's backward through a block, called as GPT.backward calls Block.backward:
    the block's forward on x gives the cache, then `fn(dy, cache, block)` returns dx and adds the
    parameters' gradients into the layers' `grads`; then it is called again without zeroing, as
    gradient accumulation calls it. While it runs, the graded cells' `layernorm_backward` answers
    the calls listed in `table` ([dy, dx, dweight, dbias] each, the grader's) with their
    gradients and passes any other call to the student's own, so that the block's wiring is graded
    apart from LayerNorm's backward. Returns [dx, {name: gradient} after one call, after two]."""
    model, layer, x, dy, table = args
    block = model.h[layer]
    block.zero_grad()
    _, cache = block.forward(x)
    own = getattr(fn, "__globals__", {}).get("layernorm_backward")

    def layernorm_backward(d, norm_cache, weight):
        for seen, *gradients in table:
            if np.shape(d) == seen.shape and np.allclose(d, seen, rtol=1e-9, atol=1e-12):
                return tuple(np.array(g, copy=True) for g in gradients)
        return own(d, norm_cache, weight)

    with _swapped(fn, {"layernorm_backward": layernorm_backward}):
        return _accumulating(lambda: fn(dy, cache, block, **kwargs), lambda: dict(block.named_grads()))


def drive_accumulate(fn, args, kwargs):
    """A backward function that adds into `grads` (its last argument, {name: array}), called twice
    on the same `grads`, as gradient accumulation calls it. Returns [what the first call returned,
    {name: gradient} after one call, after two]."""
    *inputs, grads = args
    return _accumulating(lambda: fn(*inputs, grads, **kwargs), lambda: grads)


def drive_adamw(fn, args, kwargs):
    """Exercise 5.1's AdamW step, one step per learning rate in `lrs`, on the loss
    sum(scale * (p - target)^2) / 2 of each parameter (gradient scale * (p - target)), with the
    moments starting at 0. Returns each parameter after every step: {name: (steps, *shape)}."""
    params, targets, scales, lrs = args
    exp_avg = {name: np.zeros_like(p) for name, p in params.items()}
    exp_avg_sq = {name: np.zeros_like(p) for name, p in params.items()}
    seen = {name: [] for name in params}
    for step, lr in enumerate(lrs, start=1):
        grads = {name: scales[name] * (p - targets[name]) for name, p in params.items()}
        fn(params, grads, exp_avg, exp_avg_sq, step, lr, **kwargs)
        for name in seen:
            seen[name].append(np.array(params[name], copy=True))
    return {name: np.stack(values) for name, values in seen.items()}


# ---- exercise 4.4's stand-ins: the earlier pieces, computed live or answered from masked tables ----------
FINGERPRINT = 4                 # random projections that tell an input apart, far too few to rebuild it


def fingerprint(x, seed):
    """x's fingerprint: FINGERPRINT projections of its values on random unit vectors (drawn from
    seed and x's size), which tell the input a right wiring passes from any other and do not
    give it back."""
    x = np.asarray(x, np.float64).ravel()
    p = np.random.default_rng([seed, x.size]).standard_normal((FINGERPRINT, x.size))
    return (p / np.linalg.norm(p, axis=1, keepdims=True)) @ x


def _mask(x, shape, seed):
    """A random linear function of x (drawn from seed) with values of x's scale, shaped `shape`."""
    x = np.asarray(x, np.float64).ravel()
    q = np.random.default_rng(seed).standard_normal((int(np.prod(shape)), x.size))
    return (q @ x).reshape(shape) / np.sqrt(max(x.size, 1))


def _shifted(value, x, seed, sign):
    """value with sign times a mask of x added to each float array in it (lists, tuples and
    dicts walked; each array's mask drawn from seed and its place in value)."""
    if isinstance(value, (list, tuple)):
        return [_shifted(v, x, [*seed, i], sign) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _shifted(value[k], x, [*seed, i], sign) for i, k in enumerate(sorted(value))}
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value + sign * _mask(x, value.shape, seed)
    return value


def answer_table(calls, seed, grads_at=None, fallback=False):
    """The table of a stand-in, built by the grader from the reference's calls [[input, result,
    {name: gradient it added}], ...]: each row holds the input's fingerprint and the result and
    gradients less a random linear function of the input, so that they are read back only by
    calling the stand-in with that input (a right wiring computes it); never the input itself.
    grads_at: where the call's grads argument is; fallback: other calls go to the student's own."""
    rows = [{"size": int(np.size(x)), "fingerprint": fingerprint(x, seed), "result": _shifted(result, x, [seed, k, 0], -1),
             "gradients": _shifted(added or {}, x, [seed, k, 1], -1)} for k, (x, result, added) in enumerate(calls)]
    return {"seed": seed, "calls": rows, "grads_at": grads_at, "fallback": fallback}


class _Answers:
    """A stand-in answering from an answer_table: a call whose first argument has a recorded
    fingerprint (same size, projections within 1e-9 of its scale) gets that row's result and
    gradients, unmasked with the argument itself, the gradients added into the call's grads
    argument (at `grads_at`), as a backward adds them. Another call goes to `own`, or raises a
    LookupError naming the function when there is none."""

    def __init__(self, name, table, own=None):
        self.name, self.table, self.own = name, table, own

    def __call__(self, *args, **kwargs):
        x = np.asarray(args[0], np.float64)
        seed, mine = self.table["seed"], fingerprint(x, self.table["seed"])
        tolerance = 1e-9 * np.linalg.norm(x) + 1e-12 * np.sqrt(x.size)
        for k, row in enumerate(self.table["calls"]):
            if row["size"] == x.size and np.abs(mine - row["fingerprint"]).max() <= tolerance:
                grads = args[self.table["grads_at"]] if row["gradients"] else {}
                for name, g in _shifted(row["gradients"], x, [seed, k, 1], +1).items():
                    grads[name] += g
                result = _shifted(row["result"], x, [seed, k, 0], +1)
                return tuple(result) if isinstance(result, list) else result
        if self.own is not None:
            return self.own(*args, **kwargs)
        raise LookupError(f"{self.name} was called with a {x.dtype} input of shape {x.shape} that the "
                          f"grader's model never passes it: check what your code gives {self.name}")


def _holding(layer, **arrays):
    """A layer of lib's numpy twin holding the caller's arrays as its parameters, gradients zeroed."""
    for name, a in arrays.items():
        setattr(layer, name, a)
    layer.zero_grad()
    return layer


def _live_parts():
    """4.4's cheap pieces, computed here with lib's numpy twin, so no table holds their values:
    2.1's embeddings and head, 4.1's GELU, 4.3's LayerNorm backward. Each exercise that they
    answer blocks these lib names in its own sandbox, so this module holds no answer of its own."""
    from lib.numpy_twin import model as twin

    def embed_forward(idx, wte, wpe):
        positions = np.arange(np.shape(idx)[1])[None]
        tokens, places = (_holding(twin.Embedding(1, 1), weight=w) for w in (wte, wpe))
        return tokens.forward(idx)[0] + places.forward(positions)[0]

    def embed_backward(dx, idx, grads):
        positions = np.arange(np.shape(idx)[1])[None]
        for name, ids, d in (("wte", idx, dx), ("wpe", positions, np.sum(dx, axis=0, keepdims=True))):
            layer = _holding(twin.Embedding(1, 1), weight=grads[name])
            layer.backward(d, ids)
            grads[name] += layer.grads["weight"]

    def head_forward(hidden, wte):
        return _holding(twin.Linear(1, 1, bias=False), weight=wte).forward(hidden)[0]

    def head_backward(dlogits, hidden, wte, grads):
        layer = _holding(twin.Linear(1, 1, bias=False), weight=wte)
        dhidden = layer.backward(dlogits, hidden)
        grads["wte"] += layer.grads["weight"]
        return dhidden

    def layernorm_backward(dy, cache, weight):
        layer = _holding(twin.LayerNorm(1), weight=weight, bias=np.zeros_like(weight))
        dx = layer.backward(dy, tuple(cache))
        return dx, layer.grads["weight"], layer.grads["bias"]

    return dict(embed_forward=embed_forward, embed_backward=embed_backward, head_forward=head_forward,
                head_backward=head_backward, layernorm_backward=layernorm_backward, gelu_tanh=twin.gelu,
                gelu_tanh_grad=lambda x: twin.gelu_backward(np.ones_like(x), x))


@contextmanager
def _parts_for(fn, tables):
    """`parts` for exercise 4.4 (the earlier exercises' functions: the cheap ones live, the
    others answered from their tables), with the graded cells' own functions in
    `tables["graded"]` answered from theirs while the block runs."""
    parts = SimpleNamespace(**_live_parts())
    for name, t in tables["parts"].items():
        setattr(parts, name, _Answers(f"parts.{name}", t))
    graded = getattr(fn, "__globals__", {})
    stand_ins = {name: _Answers(name, t, graded.get(name) if t.get("fallback") else None)
                 for name, t in tables.get("graded", {}).items()}
    with _swapped(fn, stand_ins):
        yield parts


def drive_parts(fn, args, kwargs):
    """Exercise 4.4's forward functions: `fn(*inputs, parts)` with `parts` (and, where the tables
    say, the graded cells' other functions) the grader's stand-ins (_parts_for), so that a mistake
    in an earlier exercise's function, or in another of 4.4's, costs only its own points. Returns
    the output (the first of what fn returns, the other being its cache)."""
    *inputs, tables = args
    with _parts_for(fn, tables) as parts:
        result = fn(*inputs, parts, **kwargs)
    return _copy(result[0] if isinstance(result, (tuple, list)) else result)


def drive_parts_backward(fn, args, kwargs):
    """Exercise 4.4's backward functions, as a training step calls them: the graded cells'
    forward (`forward`, called `forward(x, *rest, parts)`) gives the cache, then
    `fn(d, cache, *rest, grads, parts)` returns dx (or None) and adds into `grads`; then it is
    called again without zeroing, as gradient accumulation calls it. `parts` and the tables'
    graded functions are the grader's stand-ins, as in drive_parts. Returns [what the first call
    returned, {name: gradient} after one call, after two]."""
    forward, x, rest, d, grads, tables = args
    with _parts_for(fn, tables) as parts:
        _, cache = fn.__globals__[forward](x, *rest, parts)
        return _accumulating(lambda: fn(d, cache, *rest, grads, parts, **kwargs), lambda: grads)


class _RecordingSGD:
    """Exercise 5.3's optimizer in the grader's tests: plain SGD at `lr` (p -= lr * g) that keeps
    a copy of the gradients each `step(grads)` is given, so that a test sees what was clipped."""

    def __init__(self, model, lr):
        self.params, self.lr, self.seen = dict(model.named_parameters()), lr, []

    def step(self, grads):
        self.seen.append({name: np.array(g, copy=True) for name, g in grads.items()})
        for name, p in self.params.items():
            p -= self.lr * grads[name]


def drive_train_step(fn, args, kwargs):
    """Exercise 5.3's `train_step(model, micro_batches, optimizer, max_norm)`, one call per
    step on one model (training mode) with a recording SGD optimizer, so that a step that keeps
    the previous step's gradients shows. Returns per step [what it returned, the gradients of
    each optimizer.step() call it made]."""
    model, steps, max_norm, lr = args
    model.train()
    optimizer = _RecordingSGD(model, lr)
    out = []
    for micro_batches in steps:
        optimizer.seen = []
        returned = fn(model, [tuple(pair) for pair in micro_batches], optimizer, max_norm, **kwargs)
        out.append([_copy(returned), optimizer.seen])
    return out


def drive_estimate_loss(fn, args, kwargs):
    """Exercise 5.3's `estimate_loss(model, batches)`, called between a backward pass and the
    step that would follow it: the model in training mode holds the gradients of `dlogits` for
    the ids `x`. Returns [what it returned, the gradients before and after the call, the
    parameters after, whether the model is in training mode after]."""
    model, batches, x, dlogits = args
    model.train()
    model.zero_grad()
    model.forward(x)
    model.backward(dlogits)
    before = {name: np.array(g, copy=True) for name, g in model.named_grads()}
    returned = _copy(fn(model, [tuple(pair) for pair in batches], **kwargs))
    grads = {name: np.array(g, copy=True) for name, g in model.named_grads()}
    return [returned, before, grads, dict(model.named_parameters()), bool(model.training)]


def _made_from(arrays, base, modulus):
    """A number that identifies the ids it was made from (the stand-ins' returned losses)."""
    return base + float(sum(int(np.asarray(a, np.int64).sum()) for a in arrays) % modulus) / modulus


def drive_train_loop(fn, args, kwargs):
    """Exercise 5.3's `train_loop(model, optimizer, train_ids, val_ids, config)` with a
    `lib.config.TrainConfig(**fields)`. With `stand_ins`, the graded cells' `train_step` and
    `estimate_loss` are replaced while the loop runs by stand-ins that record how the loop calls
    them (the optimizer's lr, max_norm, the batches) and return numbers made from the batches,
    so that the loop's wiring is graded apart from them; the optimizer is the recording SGD.
    Without, the loop trains with lib's AdamW built as lib.train.train builds it. Returns
    [the history, per step call [lr, max_norm, xs, ys, loss, norm], per evaluation call
    [xs, ys, loss]]."""
    from lib.config import TrainConfig
    from lib.numpy_twin.train import AdamW

    model, train_ids, val_ids, fields, stand_ins = args
    config = TrainConfig(**{**fields, "betas": tuple(fields["betas"])})
    steps, evaluations = [], []

    def train_step(model, micro_batches, optimizer, max_norm):
        xs, ys = [np.array(x) for x, _ in micro_batches], [np.array(y) for _, y in micro_batches]
        loss, norm = _made_from(xs, 2.0, 1009), _made_from(ys, 0.5, 997)
        steps.append([float(optimizer.lr), max_norm, xs, ys, loss, norm])
        return loss, norm

    def estimate_loss(model, batches):
        xs, ys = [np.array(x) for x, _ in batches], [np.array(y) for _, y in batches]
        evaluations.append([xs, ys, _made_from(xs, 1.0, 983)])
        return evaluations[-1][2]

    model.train()
    if stand_ins:
        optimizer = _RecordingSGD(model, 0.0)
    else:
        optimizer = AdamW(model.named_parameters(), config.lr, config.betas, weight_decay=config.weight_decay)
    with _swapped(fn, {"train_step": train_step, "estimate_loss": estimate_loss} if stand_ins else {}):
        history = fn(model, optimizer, train_ids, val_ids, config, **kwargs)
    return [_copy(history), steps, evaluations]


# ---- exercise 6.3, the capstone ----------------------------------------------------------------------
CONFIG_FIELDS = ("vocab_size", "n_ctx", "n_layer", "n_head", "n_embd")


def _deep_copy(value):
    """A returned value with every array in it copied (tuples, lists and dicts walked)."""
    if isinstance(value, (list, tuple)):
        return [_deep_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    return _copy(value)


def _hf_folder(files):
    """A new folder under /tmp holding {"config.json": dict, "model.safetensors": {key: array}}."""
    import json
    import tempfile
    from pathlib import Path

    from safetensors.numpy import save_file

    folder = Path(tempfile.mkdtemp(prefix="gpt2-"))
    (folder / "config.json").write_text(json.dumps(files["config.json"]), encoding="utf-8")
    save_file(files["model.safetensors"], str(folder / "model.safetensors"))
    return folder


def drive_load(fn, args, kwargs):
    """Exercise 6.3's `load_gpt2(folder)` on a Hugging Face folder written from `files`.
    Returns [the returned config's fields, the returned params]."""
    files, = args
    config, params = fn(_hf_folder(files), **kwargs)
    return [{k: getattr(config, k) for k in CONFIG_FIELDS}, _deep_copy(dict(params))]


def drive_load_logits(fn, args, kwargs):
    """`load_gpt2(folder)` as in drive_load, then the logits of the student's own gpt_forward
    (the capstone's `parts`) on the loaded weights for the ids `idx`."""
    files, idx = args
    config, params = fn(_hf_folder(files), **kwargs)
    parts = fn.__globals__["parts"]
    return _copy(parts.gpt_forward(idx, params, config, parts)[0])


def drive_twice(fn, args, kwargs):
    """The function called twice with the same arguments, as a training loop calls it step after
    step. Returns [what the first call returned, what the second did], each copied at once."""
    first = _deep_copy(fn(*args, **kwargs))
    return [first, _deep_copy(fn(*args, **kwargs))]


def drive_train(fn, args, kwargs):
    """Exercise 6.3's `train(params, config, train_ids, val_ids, settings)` with
    `settings = lib.config.TrainConfig(**fields)`. Returns [the history, the params after]."""
    from lib.config import TrainConfig

    params, config, train_ids, val_ids, fields = args
    settings = TrainConfig(**{**fields, "betas": tuple(fields["betas"])})
    history = fn(params, config, train_ids, val_ids, settings, **kwargs)
    return [_deep_copy(history), params]


def drive_cached(fn, args, kwargs):
    """Exercise 6.3's `forward_cached(idx, params, config, cache)`, chunk after chunk of idx
    (`bounds`: [[start, end], ...]) on one cache, the student's own 6.1 KVCache (the capstone's
    `parts.KVCache(config, B, dtype=params' dtype)`). Returns per chunk [the logits,
    cache.length after]."""
    params, config, idx, bounds = args
    parts = fn.__globals__["parts"]
    cache = parts.KVCache(config, idx.shape[0], dtype=params["wte.weight"].dtype)
    out = []
    for start, end in bounds:
        logits = fn(idx[:, start:end], params, config, cache, **kwargs)
        out.append([_copy(logits), int(cache.length)])
    return out


DRIVERS = {"call": drive_call, "kvcache": drive_kvcache, "block_backward": drive_block_backward,
           "accumulate": drive_accumulate, "train_step": drive_train_step,
           "estimate_loss": drive_estimate_loss, "train_loop": drive_train_loop,
           "adamw": drive_adamw, "parts": drive_parts, "parts_backward": drive_parts_backward,
           "load": drive_load, "load_logits": drive_load_logits, "twice": drive_twice, "train": drive_train,
           "cached": drive_cached, "counted": drive_counted}
