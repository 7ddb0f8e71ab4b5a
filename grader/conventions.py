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


def drive_block_backward(fn, args, kwargs):
    """Exercise 4.3's backward through a block, called as GPT.backward calls Block.backward:
    the block's forward on x gives the cache, then `fn(dy, cache, block)` returns dx and adds the
    parameters' gradients into the layers' `grads`. Returns [dx, {name: gradient}]."""
    model, layer, x, dy = args
    block = model.h[layer]
    block.zero_grad()
    _, cache = block.forward(x)
    dx = fn(dy, cache, block, **kwargs)
    return [dx, dict(block.named_grads())]


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
           "adamw": drive_adamw}
