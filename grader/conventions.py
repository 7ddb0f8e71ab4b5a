"""How each exercise's tests call the student's definitions: the drivers, copied into the sandbox beside the runner.

A hidden test names its driver (`Test.driver`, default "call"); grader/runner.py looks it up in
DRIVERS, inside the sandbox, and calls `driver(definition, args, kwargs)` with the student's
function or class and the test's decoded inputs. What the driver returns is encoded and sent
back as the test's answer. Adding an exercise whose answer is used in a particular way (a
class driven step by step, a function that updates its arguments in place) means adding a
driver here, never editing the sandbox or the runner. This module runs inside the sandbox,
next to hostile code: it imports numpy only, and judges nothing.
"""
import numpy as np


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
    graded = getattr(fn, "__globals__", {})
    own = graded.get("layernorm_backward")

    def layernorm_backward(d, norm_cache, weight):
        for seen, *gradients in table:
            if np.shape(d) == seen.shape and np.allclose(d, seen, rtol=1e-9, atol=1e-12):
                return tuple(np.array(g, copy=True) for g in gradients)
        return own(d, norm_cache, weight)

    graded["layernorm_backward"] = layernorm_backward
    try:
        dx = _copy(fn(dy, cache, block, **kwargs))
        once = {name: np.array(g, copy=True) for name, g in block.named_grads()}
        fn(dy, cache, block, **kwargs)
    finally:
        graded["layernorm_backward"] = own
    return [dx, once, dict(block.named_grads())]


def drive_accumulate(fn, args, kwargs):
    """A backward function that adds into `grads` (its last argument, {name: array}), called twice
    on the same `grads`, as gradient accumulation calls it. Returns [what the first call returned,
    {name: gradient} after one call, after two]."""
    *inputs, grads = args
    returned = _copy(fn(*inputs, grads, **kwargs))
    once = {name: np.array(g, copy=True) for name, g in grads.items()}
    fn(*inputs, grads, **kwargs)
    return [returned, once, dict(grads)]


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


DRIVERS = {"call": drive_call, "kvcache": drive_kvcache, "block_backward": drive_block_backward,
           "accumulate": drive_accumulate,
           "adamw": drive_adamw}
