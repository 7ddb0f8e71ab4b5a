"""Exercise 6.3, the capstone: your GPT-2 from your own pieces loads GPT-2's weights, trains and decodes."""
from build_notebooks import check, code, graded, md, setup, task, uses


STUB = '''
import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from lib.config import GPTConfig


def load_gpt2(folder):
    """A Hugging Face GPT-2 folder (config.json, model.safetensors) -> (config, params):
    a GPTConfig and the weights in 4.4's layout, float32. Keys may carry the prefix
    "transformer."; the published file's mask buffers (".attn.bias",
    ".attn.masked_bias") are not weights; an lm_head.weight that differs from
    wte.weight: ValueError."""
    raise NotImplementedError("exercise 6.3: write load_gpt2")


def loss_and_grads(params, config, x, y):
    """x, y (B, T) token ids -> (loss, grads): the mean cross-entropy of your model's
    logits for targets y, a float, and its gradient for every weight, {name: array}
    shaped like params, new at each call."""
    raise NotImplementedError("exercise 6.3: write loss_and_grads")


def train(params, config, train_ids, val_ids, settings):
    """Train params in place as exercise 5.3's train_loop trains a model, with one
    micro-batch per step, settings a TrainConfig. -> history, a dict of lists:
    "step", "train_loss", "lr", "grad_norm", "eval_step", "eval_train_loss",
    "val_loss"."""
    raise NotImplementedError("exercise 6.3: write train")


def forward_cached(idx, params, config, cache):
    """idx (B, T): the next T ids of each sequence, after the cache.length positions
    that cache (your 6.1 KVCache) holds. -> logits (B, T, V). Stores the new keys
    and values and adds T to cache.length. Past n_ctx positions: ValueError."""
    raise NotImplementedError("exercise 6.3: write forward_cached")


def generate(params, config, idx, max_new_tokens, rng, temperature=0.0, top_k=None,
             top_p=None, use_cache=True):
    """idx (B, T) ids -> (B, T + max_new_tokens) ids: each new token drawn by your 6.2
    sample from the logits of the last position. use_cache: forward_cached with a
    KVCache, else your gpt_forward over the whole sequence at every step. More than
    n_ctx positions in all: ValueError."""
    raise NotImplementedError("exercise 6.3: write generate")
'''

ANSWER = '''
import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from lib.config import GPTConfig

BUFFERS = (".attn.bias", ".attn.masked_bias")     # the causal mask, stored in the file


def load_gpt2(folder):
    """A Hugging Face GPT-2 folder (config.json, model.safetensors) -> (config, params):
    a GPTConfig and the weights in 4.4's layout, float32. Keys may carry the prefix
    "transformer."; the published file's mask buffers (".attn.bias",
    ".attn.masked_bias") are not weights; an lm_head.weight that differs from
    wte.weight: ValueError."""
    folder = Path(folder)
    hf = json.loads((folder / "config.json").read_text())
    config = GPTConfig(vocab_size=hf["vocab_size"], n_ctx=hf["n_positions"],
                       n_layer=hf["n_layer"], n_head=hf["n_head"], n_embd=hf["n_embd"])
    params = {}
    for key, value in load_file(str(folder / "model.safetensors")).items():
        name = key.removeprefix("transformer.")
        if not name.endswith(BUFFERS):
            params[name] = value.astype(np.float32)
    head = params.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(head, params["wte.weight"]):
        raise ValueError(f"{folder}: lm_head.weight differs from wte.weight, and "
                         f"GPT-2's head is tied to the embedding")
    return config, params


def zeros_like(params):
    """{name: zeros shaped like params[name]}: gradients, AdamW's moments."""
    return {name: np.zeros_like(p) for name, p in params.items()}


def loss_and_grads(params, config, x, y):
    """x, y (B, T) token ids -> (loss, grads): the mean cross-entropy of your model's
    logits for targets y, a float, and its gradient for every weight, {name: array}
    shaped like params, new at each call."""
    logits, cache = parts.gpt_forward(x, params, config, parts)         # (B, T, V)
    loss, dlogits = parts.cross_entropy(logits, y)
    grads = zeros_like(params)
    parts.gpt_backward(dlogits, cache, params, config, grads, parts)
    return loss, grads


def mean_loss(params, config, batches):
    """The mean loss over [(x, y), ...], forward passes only."""
    losses = [parts.cross_entropy(parts.gpt_forward(x, params, config, parts)[0], y)[0]
              for x, y in batches]
    return float(np.mean(losses))


def clip(grads, max_norm):
    """Scale every gradient by one factor so that their global norm is at most max_norm
    (0: no clipping). -> the global norm before clipping"""
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    if max_norm and norm > max_norm:
        for g in grads.values():
            g *= max_norm / (norm + 1e-6)
    return norm


def train(params, config, train_ids, val_ids, settings):
    """Train params in place as exercise 5.3's train_loop trains a model, with one
    micro-batch per step, settings a TrainConfig. -> history, a dict of lists:
    "step", "train_loss", "lr", "grad_norm", "eval_step", "eval_train_loss",
    "val_loss"."""
    s = settings
    B, T = s.batch_size, s.block_size or config.n_ctx
    rng = np.random.default_rng(s.seed)                 # the training batches
    eval_rng = np.random.default_rng(s.seed + 1)        # the evaluation batches, once
    fixed = {name: [parts.get_batch(ids, B, T, eval_rng) for _ in range(s.eval_iters)]
             for name, ids in (("train", train_ids), ("val", val_ids))}
    exp_avg, exp_avg_sq = zeros_like(params), zeros_like(params)      # AdamW's moments
    history = {key: [] for key in ("step", "train_loss", "lr", "grad_norm", "eval_step",
                                   "eval_train_loss", "val_loss")}
    for step in range(s.max_iters + 1):
        if step % s.eval_interval == 0 or step == s.max_iters:
            history["eval_step"].append(step)
            history["eval_train_loss"].append(mean_loss(params, config, fixed["train"]))
            history["val_loss"].append(mean_loss(params, config, fixed["val"]))
        if step == s.max_iters:
            break
        x, y = parts.get_batch(train_ids, B, T, rng)                    # (B, T) each
        loss, grads = loss_and_grads(params, config, x, y)
        norm = clip(grads, s.grad_clip)
        lr = parts.lr_at(step, s.lr, s.min_lr, s.warmup_iters, s.max_iters)
        parts.adamw_step(params, grads, exp_avg, exp_avg_sq, step + 1, lr, s.betas,
                         weight_decay=s.weight_decay)
        history["step"].append(step + 1)
        history["train_loss"].append(loss)
        history["lr"].append(lr)
        history["grad_norm"].append(norm)
    return history


def split_heads(a, n_head):
    """(B, T, C) -> (B, H, T, D)."""
    B, T, C = a.shape
    return a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)


def attention_cached(x, p, n_head, cache, layer):
    """3.1's attention for the new positions x (B, T, C), which also see the keys and
    values of the cache.length positions before them."""
    B, T, C = x.shape
    start = cache.length                                # where the new positions begin
    qkv = x @ p["attn.c_attn.weight"] + p["attn.c_attn.bias"]           # (B, T, 3C)
    q, k, v = (split_heads(a, n_head) for a in np.split(qkv, 3, axis=-1))
    k, v = cache.update(layer, k, v)                    # (B, H, start + T, D) each
    scores = (q @ k.swapaxes(-1, -2)) / math.sqrt(C // n_head)   # (B, H, T, start + T)
    # the new position start + i sees keys 0 .. start + i
    future = np.arange(start + T)[None, :] > start + np.arange(T)[:, None]
    scores[..., future] = -np.inf                       # weight 0
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)                      # (B, H, T, S)
    y = (weights @ v).transpose(0, 2, 1, 3).reshape(B, T, C)            # (B, T, C)
    return y @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"]


def block_cached(x, p, n_head, cache, layer):
    """4.4's block_forward for the new positions, attention through the cache."""
    a, _ = parts.layernorm_forward(x, p["ln_1.weight"], p["ln_1.bias"])
    h = x + attention_cached(a, p, n_head, cache, layer)
    m, _ = parts.layernorm_forward(h, p["ln_2.weight"], p["ln_2.bias"])
    g = parts.gelu_tanh(m @ p["mlp.c_fc.weight"] + p["mlp.c_fc.bias"])  # (B, T, 4C)
    return h + g @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]


def forward_cached(idx, params, config, cache):
    """idx (B, T): the next T ids of each sequence, after the cache.length positions
    that cache (your 6.1 KVCache) holds. -> logits (B, T, V). Stores the new keys
    and values and adds T to cache.length. Past n_ctx positions: ValueError."""
    start, T = cache.length, idx.shape[1]
    if start + T > config.n_ctx:
        raise ValueError(f"{start} cached positions and {T} new ones exceed the "
                         f"context of {config.n_ctx}")
    wte = params["wte.weight"]
    x = parts.embed_forward(idx, wte, params["wpe.weight"][start:])     # (B, T, C)
    for layer in range(config.n_layer):
        prefix = f"h.{layer}."
        p = {n.removeprefix(prefix): a for n, a in params.items()
             if n.startswith(prefix)}           # the block's weights, short names
        x = block_cached(x, p, config.n_head, cache, layer)
    hidden, _ = parts.layernorm_forward(x, params["ln_f.weight"], params["ln_f.bias"])
    cache.length += T
    return parts.head_forward(hidden, wte)                              # (B, T, V)


def generate(params, config, idx, max_new_tokens, rng, temperature=0.0, top_k=None,
             top_p=None, use_cache=True):
    """idx (B, T) ids -> (B, T + max_new_tokens) ids: each new token drawn by your 6.2
    sample from the logits of the last position. use_cache: forward_cached with a
    KVCache, else your gpt_forward over the whole sequence at every step. More than
    n_ctx positions in all: ValueError."""
    idx = np.asarray(idx)
    if idx.shape[1] + max_new_tokens > config.n_ctx:
        raise ValueError(f"{idx.shape[1]} + {max_new_tokens} new tokens exceed the "
                         f"context of {config.n_ctx}")
    if use_cache:
        cache = parts.KVCache(config, idx.shape[0], dtype=params["wte.weight"].dtype)
        logits = forward_cached(idx, params, config, cache)             # (B, T, V)
    for i in range(max_new_tokens):
        if not use_cache:                               # the whole sequence again
            logits, _ = parts.gpt_forward(idx, params, config, parts)
        new = parts.sample(logits[:, -1], rng, temperature, top_k, top_p)   # (B,)
        idx = np.concatenate([idx, np.asarray(new)[:, None]], axis=1)
        if use_cache and i < max_new_tokens - 1:        # only the new token goes in
            logits = forward_cached(idx[:, -1:], params, config, cache)
    return idx
'''

CELLS = [
    md(r"""
    # Exercise 6.3: Your GPT-2

    This is the course's capstone, after [chapter 6](../chapters/06_decoding.ipynb) and its
    exercises. Every piece of GPT-2 is now yours: the embeddings and the tied head (2.1),
    attention (3.1), GELU (4.1), LayerNorm's backward (4.3), the block and the whole model
    (4.4), the loss, the learning-rate schedule and AdamW (5.1), the batches (5.3), the KV
    cache (6.1) and sampling (6.2). Here they become one model that does the three things
    GPT-2 does: it **loads GPT-2's weights** and computes the same logits as `transformers`,
    it **trains** on Shakespeare, and it **decodes** with your cache and your sampling. No
    line of lib's model runs.

    **What is graded.** The cell tagged `graded:ch6_your_gpt2`, in three stages, each with
    its own tests and points: loading (`load_gpt2`), training (`loss_and_grads`, `train`),
    decoding (`forward_cached`, `generate`). Your functions call your earlier pieces through
    `parts`, and the grader builds `parts` the way this notebook does, from the graded cells
    of your own notebooks of those exercises: hand them in with this one (in the same
    folder), as they are. So a mistake in an earlier piece costs points here too: only a
    model that is yours from end to end passes every stage. In the sandbox every lib function
    that answers a piece (lib's model, attention, LayerNorm, GELU, loss, AdamW, schedule,
    batches, cache, sampling, its GPT-2 loader) raises an error. A test marked *edge* (an
    error check, or a value a trivial answer also gets right) counts only once every other
    test of the same function passes.
    """),
    setup(),
    md(r"""
    ## Your pieces

    As in exercise 4.4, `lib.handin.gather` reads your notebooks of the earlier exercises and
    runs their graded cells: nothing is retyped. In Colab, upload your notebooks into the
    session's files and pass `folder="/content"`.
    """),
    code('''
    import numpy as np

    import lib.numpy_twin as nt
    from lib.config import GPTConfig, TrainConfig
    from lib.handin import ROOT, gather
    from lib.weights import save_hf_gpt2, to_gpt2_layout

    PIECES = {"ch2_embeddings": ["embed_forward", "embed_backward",
                                 "head_forward", "head_backward"],
              "ch3_attention": ["causal_self_attention"],
              "ch4_gelu": ["gelu_tanh", "gelu_tanh_grad"],
              "ch4_backward": ["layernorm_backward"],
              "ch4_gpt": ["layernorm_forward", "attention_backward", "block_forward",
                          "block_backward", "gpt_forward", "gpt_backward"],
              "ch5_optimizer": ["cross_entropy", "lr_at", "adamw_step"],
              "ch5_training_loop": ["get_batch"],
              "ch6_kv_cache": ["KVCache"],
              "ch6_top_k_top_p": ["sample"]}
    '''),
    task('''
    parts = gather(PIECES)            # your functions, from your notebooks in exercises/
    ''', '''
    parts = gather(PIECES, folder=ROOT / "solutions")   # the solved notebooks
    '''),
    md(r"""
    Before you build on your pieces, they are checked against lib's on a small float64 model
    of lib (2 blocks, 2 heads, 8 wide, random weights), the reference of every check below:
    a piece that fails here is the one to fix first, in its own notebook.
    """),
    code('''
    from lib.checks import expect_close, expect_equal, expect_raises, expect_shape
    from lib.numpy_twin.train import cross_entropy

    config = GPTConfig(vocab_size=16, n_ctx=12, n_layer=2, n_head=2, n_embd=8)
    model = nt.GPT(config, seed=4, dtype=np.float64)
    rng = np.random.default_rng(44)
    for _, weight in model.named_parameters():
        weight += rng.normal(0, 0.3, weight.shape)            # biases, gains off 0 and 1
    params = to_gpt2_layout(config, model.named_parameters())  # 4.4's layout
    idx = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])       # (B, T) = (2, 5)
    '''),
    uses('''
    from lib.checks import expect_accumulates, expect_grad
    from lib.numpy_twin.model import gelu, gelu_backward

    x = rng.normal(0, 1, (2, 5, 8))                           # (B, T, C)
    dx = rng.normal(0, 1, (2, 5, 8))                          # a gradient reaching x
    L = rng.normal(0, 1, (2, 5, 16))                          # (B, T, V): dlogits
    wte, wpe = params["wte.weight"], params["wpe.weight"]
    block = model.h[0]
    positions = np.tile(np.arange(5), (2, 1))                 # (B, T)


    def lib_grads(backward):
        model.zero_grad()                                     # lib's, in params' layout
        backward()
        return to_gpt2_layout(config, model.named_grads())


    expect_close("2.1's embed_forward against lib", parts.embed_forward(idx, wte, wpe),
                 wte[idx] + wpe[:5], rtol=1e-12)
    table = {"wte": np.zeros_like(wte), "wpe": np.zeros_like(wpe)}
    parts.embed_backward(dx, idx, table)
    want = lib_grads(lambda: (model.wte.backward(dx, idx),
                              model.wpe.backward(dx, positions)))
    for key in ("wte", "wpe"):
        expect_close(f"2.1's embed_backward: {key} against lib", table[key],
                     want[f"{key}.weight"], rtol=1e-12, atol=1e-14)
    expect_close("2.1's head_forward against lib", parts.head_forward(x, wte),
                 model.lm_head(x), rtol=1e-10, atol=1e-12)
    table = {"wte": np.zeros_like(wte), "wpe": np.zeros_like(wpe)}
    dhidden = parts.head_backward(L, x, wte, table)
    expect_grad("2.1's head_backward: dhidden", lambda h: (L * model.lm_head(h)).sum(),
                lambda h: dhidden, x, axes="btc")
    expect_grad("2.1's head_backward: wte",
                lambda w: (L * parts.head_forward(x, w)).sum(), lambda w: table["wte"],
                wte.copy())
    for name, backward in (("embed_backward", lambda t: parts.embed_backward(dx, idx, t)),
                           ("head_backward", lambda t: parts.head_backward(L, x, wte, t))):
        table = {"wte": np.zeros_like(wte), "wpe": np.zeros_like(wpe)}
        expect_accumulates(f"2.1's {name} called twice", lambda: backward(table),
                           lambda: table)
    attn = [params[f"h.0.attn.{n}"]
            for n in ("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias")]
    expect_close("3.1's causal_self_attention against lib",
                 parts.causal_self_attention(x, *attn, 2), block.attn.forward(x)[0],
                 rtol=1e-10, atol=1e-12, axes="btc")
    expect_close("4.1's gelu_tanh against lib", parts.gelu_tanh(x), gelu(x), rtol=1e-12)
    expect_close("4.1's gelu_tanh_grad against lib", parts.gelu_tanh_grad(x),
                 gelu_backward(np.ones_like(x), x), rtol=1e-10, atol=1e-12)
    _, ln_cache = block.ln_1.forward(x)
    block.ln_1.zero_grad()
    want = (block.ln_1.backward(dx, ln_cache), block.ln_1.grads["weight"],
            block.ln_1.grads["bias"])
    got = parts.layernorm_backward(dx, ln_cache, block.ln_1.weight)
    for name, g, w in zip(("dx", "dweight", "dbias"), got, want):
        expect_close(f"4.3's layernorm_backward: {name} against lib", g, w, rtol=1e-10,
                     atol=1e-12)
    y, _ = parts.layernorm_forward(x, block.ln_1.weight, block.ln_1.bias)
    expect_close("4.4's layernorm_forward against lib", y, block.ln_1.forward(x)[0],
                 rtol=1e-10, atol=1e-12, axes="btc")
    want = lib_grads(lambda: block.attn.backward(dx, block.attn.forward(x)[1]))
    got = parts.attention_backward(dx, x, *attn, 2)
    for name, grad in zip(("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"),
                          got[1:]):
        expect_close(f"4.4's attention_backward: {name} against lib", grad,
                     want[f"h.0.attn.{name}"], rtol=1e-9, atol=1e-12)
    out, block_cache = parts.block_forward(x, params, 0, 2, parts)
    expect_close("4.4's block_forward against lib", out, block.forward(x)[0],
                 rtol=1e-10, atol=1e-12, axes="btc")
    grads = {name: np.zeros_like(p) for name, p in params.items()}
    parts.block_backward(dx, block_cache, params, 0, 2, grads, parts)
    want = lib_grads(lambda: block.backward(dx, block.forward(x)[1]))
    for name in (n for n in params if n.startswith("h.0.")):
        expect_close(f"4.4's block_backward: {name} against lib", grads[name], want[name],
                     rtol=1e-9, atol=1e-12)
    '''),
    uses('''
    logits, cache = parts.gpt_forward(idx, params, config, parts)
    expect_close("4.4's gpt_forward against lib's GPT", logits, model.forward(idx),
                 rtol=1e-10, atol=1e-12, axes="btv")
    expect_close("5.1's cross_entropy against lib's", parts.cross_entropy(logits, idx)[1],
                 cross_entropy(logits, idx)[1], rtol=1e-10, atol=1e-14, axes="btv")
    S = rng.normal(0, 1, logits.shape)        # (B, T, V): dlogits of sum(S * logits)
    grads = {name: np.zeros_like(p) for name, p in params.items()}
    parts.gpt_backward(S, cache, params, config, grads, parts)
    model.zero_grad()
    model.forward(idx)
    model.backward(S)
    want = to_gpt2_layout(config, model.named_grads())
    for name, grad in grads.items():
        expect_close(f"4.4's gpt_backward: {name} against lib", grad,
                     want[name], rtol=1e-8, atol=1e-12)
    kv = parts.KVCache(config, 2, dtype=np.float64)
    k = rng.normal(0, 1, (2, 2, 3, 4))                        # (B, H, T, D)
    kv.update(0, k, k)
    kv.length += 3
    keys, _ = kv.update(0, k[:, :, :1], k[:, :, :1])
    expect_close("6.1's KVCache: the keys after 3 positions and 1", keys,
                 np.concatenate([k, k[:, :, :1]], axis=2), rtol=0)
    expect_equal("6.2's sample at temperature 0: the argmax",
                 parts.sample(logits[:, -1], rng, 0.0), logits[:, -1].argmax(-1))
    '''),
    uses('''
    from lib.data import get_batch
    from lib.numpy_twin.train import AdamW
    from lib.sampling import filtered_probs
    from lib.schedule import lr_at

    expect_close("5.1's cross_entropy: the loss against lib's",
                 parts.cross_entropy(logits, idx)[0], cross_entropy(logits, idx)[0],
                 rtol=1e-12)
    expect_close("5.1's lr_at against lib's, steps 0 to 11",
                 np.array([parts.lr_at(s, 1e-2, 1e-3, 3, 10) for s in range(12)]),
                 np.array([lr_at(s, 1e-2, 1e-3, 3, 10) for s in range(12)]), rtol=1e-12)
    names = ("h.0.attn.c_attn.weight", "h.0.ln_1.weight")     # decayed, and not
    mine = {n: params[n].copy() for n in names}
    libs = {n: params[n].copy() for n in names}
    m, v = ({n: np.zeros_like(p) for n, p in mine.items()} for _ in range(2))
    lib_adamw = AdamW(libs.items(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    for t in (1, 2, 3):
        g = {n: rng.normal(0, 1, p.shape) for n, p in mine.items()}
        parts.adamw_step(mine, g, m, v, t, 1e-2, (0.9, 0.95), 1e-8, 0.1)
        lib_adamw.step(g)
    for n in names:
        expect_close(f"5.1's adamw_step: {n} after 3 steps against lib's AdamW", mine[n],
                     libs[n], rtol=1e-10, atol=1e-12)
    data = np.arange(100) % 16
    got = parts.get_batch(data, 4, 6, np.random.default_rng(2))
    want = get_batch(data, 4, 6, np.random.default_rng(2))
    for name, g, w in zip("xy", got, want):
        expect_equal(f"5.3's get_batch: {name} against lib's (same Generator)", g, w,
                     axes="bt")
    # 4,000 draws from one row: their frequencies against lib's probabilities
    tied = np.log(np.array([[0.4, 0.2, 0.2, 0.1, 0.06, 0.04]]))       # (1, 6)
    apart = np.log(np.array([[0.4, 0.25, 0.15, 0.1, 0.06, 0.04]]))    # (1, 6)
    for row, temperature, top_k, top_p in ((tied, 1.0, 2, None), (apart, 1.0, None, 0.75),
                                           (apart, 0.5, None, 0.75), (apart, 2.0, 3, None)):
        drawn = parts.sample(np.repeat(row, 4000, axis=0), np.random.default_rng(6),
                             temperature, top_k=top_k, top_p=top_p)
        expect_close(f"6.2's sample(temperature={temperature}, top_k={top_k}, "
                     f"top_p={top_p}): the frequencies of 4,000 draws against lib's",
                     np.bincount(drawn, minlength=6) / 4000,
                     filtered_probs(row, temperature, top_k, top_p)[0], rtol=0, atol=0.04)
    '''),
    md(r"""
    ## What to write

    Five functions in the graded cell, each calling your pieces as `parts.name(...)` (4.4's
    functions take `parts` as their last argument: `parts.gpt_forward(idx, params, config,
    parts)`). The weights are 4.4's `params`: GPT-2's checkpoint names and `(in, out)`
    matrices.

    1. **Loading.** `load_gpt2(folder)` reads a folder as `transformers` writes it
       (`config.json` and `model.safetensors`; `safetensors.numpy.load_file` reads the
       second) into a `GPTConfig` and `params`. The published weights' file (section 1
       loads it) has keys without the `transformer.` prefix and stores each layer's
       causal mask beside the weights; what `save_pretrained` writes has the
       prefix and no masks. The result to reach: your `gpt_forward` on the loaded weights
       gives `transformers`' logits within $10^{-4}$.
    2. **Training.** `loss_and_grads(params, config, x, y)` is one forward and backward
       pass. `train(params, config, train_ids, val_ids, settings)` is exercise 5.3's
       `train_loop` for your model: the same batches from the same seeds (the training
       batches from `np.random.default_rng(seed)`, the evaluation batches drawn once,
       first thing, from `default_rng(seed + 1)`: `eval_iters` of the training ids, then
       as many of the validation ids), the same clipping, your `lr_at` for the rate of
       each step and your `adamw_step` (its moments start at zero, its step count at 1).
       The losses on the evaluation batches are measured at step 0, every `eval_interval`
       steps and after the last; the history has 5.3's seven lists. The result to reach:
       lib's `train` on lib's model with the same settings gives the same losses, step for
       step.
    3. **Decoding.** `forward_cached(idx, params, config, cache)` runs only the new
       positions through the model: their queries meet the keys and values of every
       position so far, which your `KVCache.update` returns. `generate` draws each new
       token with your `sample`. The result to reach: with the cache and without, greedy
       decoding gives the same tokens.

    :::{admonition} Hint: the positions and the mask of the new tokens
    :class: dropdown
    With `start = cache.length` positions stored, the new tokens sit at positions
    `start, ..., start + T - 1`: their position embeddings are the rows
    `wpe[start:start + T]`, so `parts.embed_forward(idx, wte, wpe[start:])` adds the
    right ones. The scores are `(T, start + T)` per head, and the new token `i` sees the
    keys `0 .. start + i`: key `j` is masked where `j > start + i`.
    :::

    **Rules.** numpy only, float64 and float32 in the hidden tests. Keep `parts = gather(...)`
    out of the graded cell: while grading, your functions find `parts` ready, built from the
    notebooks you hand in.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Two folders hold the small model's weights, one in each of the two layouts. One cell per
    property; a check that fails names the function to look at.
    """),
    code('''
    import tempfile
    from pathlib import Path

    from safetensors.numpy import save_file

    folders = Path(tempfile.mkdtemp())
    saved = folders / "saved"                                 # as save_pretrained writes
    save_hf_gpt2(saved, config, model.state_dict())
    published = folders / "published"                         # as the published file
    published.mkdir()
    (published / "config.json").write_text((saved / "config.json").read_text())
    mask = np.tril(np.ones((1, 1, 12, 12), np.float32))
    save_file({**params, **{f"h.{i}.attn.bias": mask for i in range(2)}},
              str(published / "model.safetensors"))
    '''),
    check('''
    for folder in (saved, published):
        got_config, got = load_gpt2(folder)
        expect_equal(f"load_gpt2({folder.name}): the config", got_config.to_dict(),
                     config.to_dict())
        expect_equal(f"load_gpt2({folder.name}): the names", sorted(got), sorted(params))
        for name, weight in got.items():
            expect_shape(f"load_gpt2({folder.name}): {name}", weight,
                         params[name].shape, np.float32)
            expect_close(f"load_gpt2({folder.name}): {name}", weight,
                         params[name].astype(np.float32), rtol=1e-6)
        logits, _ = parts.gpt_forward(idx, got, got_config, parts)
        expect_close(f"your model on load_gpt2({folder.name})'s weights: lib's logits",
                     logits, model.forward(idx).astype(np.float32), rtol=1e-4, atol=1e-4,
                     axes="btv")
    '''),
    check('''
    untied = folders / "untied"                               # a head of its own
    untied.mkdir()
    (untied / "config.json").write_text((saved / "config.json").read_text())
    save_file({**params, "lm_head.weight": params["wte.weight"] + 1},
              str(untied / "model.safetensors"))
    expect_raises("load_gpt2 with an lm_head unlike wte", ValueError, load_gpt2, untied)
    '''),
    check('''
    x, y = idx[:, :-1], idx[:, 1:]                            # (2, 4) each
    loss, grads = loss_and_grads(params, config, x, y)
    model.zero_grad()
    want, dlogits = cross_entropy(model.forward(x), y)                 # lib's
    model.backward(dlogits)
    want_grads = to_gpt2_layout(config, model.named_grads())
    expect_close("loss_and_grads: the loss", loss, want, rtol=1e-10)
    for name, grad in grads.items():
        expect_close(f"loss_and_grads: {name}", grad, want_grads[name],
                     rtol=1e-8, atol=1e-12)
    '''),
    check('''
    once = {name: g.copy() for name, g in loss_and_grads(params, config, x, y)[1].items()}
    again = loss_and_grads(params, config, x, y)[1]
    for name in once:
        expect_close(f"loss_and_grads called twice: {name} (new arrays each call?)",
                     again[name], once[name], rtol=1e-12)
    '''),
    code('''
    from lib.train import train as lib_train

    ids = np.random.default_rng(5).integers(0, 16, 400)      # a random "text" of 16 ids
    settings = TrainConfig(max_iters=6, batch_size=4, lr=1e-2, min_lr=1e-3,
                           warmup_iters=2, eval_interval=3, eval_iters=2, grad_clip=0.5,
                           weight_decay=0.1, betas=(0.9, 0.95), seed=3)
    lib_model = nt.GPT(config, seed=4, dtype=np.float64)
    lib_model.load_state_dict(model.state_dict())
    want = lib_train(lib_model, ids[:300], ids[300:], settings, progress=False)
    '''),
    check('''
    trained = {name: p.copy() for name, p in params.items()}
    history = train(trained, config, ids[:300], ids[300:], settings)
    expect_equal("train: the history's steps", history["step"], want["step"])
    expect_equal("train: the evaluation steps", history["eval_step"], want["eval_step"])
    expect_close("train: the learning rates", np.array(history["lr"]),
                 np.array(want["lr"]), rtol=1e-12)
    expect_close("train: the training losses, step by step",
                 np.array(history["train_loss"]), np.array(want["train_loss"]), rtol=1e-8)
    for key in ("grad_norm", "eval_train_loss", "val_loss"):
        expect_close(f"train: history[{key!r}]", np.array(history[key]),
                     np.array(want[key]), rtol=1e-8)
    lib_weights = to_gpt2_layout(config, lib_model.named_parameters())
    for name, weight in trained.items():
        expect_close(f"train: {name} after training, against lib's",
                     weight, lib_weights[name], rtol=1e-7, atol=1e-10)
    '''),
    check('''
    cache = parts.KVCache(config, 2, dtype=np.float64)
    full = model.forward(idx)                                 # (2, 5, 16)
    for start, end in ((0, 3), (3, 4), (4, 5)):               # a prompt, then one by one
        logits = forward_cached(idx[:, start:end], params, config, cache)
        expect_close(f"forward_cached: the logits of positions {start}..{end - 1}",
                     logits, full[:, start:end], rtol=1e-9, atol=1e-12, axes="btv")
        expect_equal(f"forward_cached: cache.length after position {end - 1}",
                     cache.length, end)
    '''),
    check('''
    # a prompt whose greedy tokens change in both rows if the new tokens' positions are
    # counted from 0 (wpe[0] for each) instead of from cache.length
    prompt = np.array([[15, 13], [11, 13]])                   # (B, T) = (2, 2)
    cached = generate(params, config, prompt, 8, np.random.default_rng(0))
    uncached = generate(params, config, prompt, 8, np.random.default_rng(0),
                        use_cache=False)
    want = prompt
    for _ in range(8):                                        # greedy with lib's model
        want = np.concatenate([want, model.forward(want)[:, -1:].argmax(-1)], axis=1)
    expect_equal("generate: greedy, with the cache", cached, want, axes="bt")
    expect_equal("generate: greedy, without the cache", uncached, want, axes="bt")
    '''),
    check('''
    drawn = generate(params, config, prompt, 8, np.random.default_rng(1),
                     temperature=1.0, top_k=3)
    expect_equal("generate: the prompt is kept", drawn[:, :2], prompt, axes="bt")
    for t in range(2, 10):
        logits = model.forward(drawn[:, :t])[:, -1]           # (B, V)
        kth = np.sort(logits, axis=-1)[:, -3]                 # the 3rd largest
        chosen = logits[np.arange(2), drawn[:, t]]
        expect_equal(f"generate(top_k=3): token {t} among the 3 most likely",
                     bool((chosen >= kth).all()), True)
    '''),
    md(r"""
    ## 1. GPT-2's weights in your model

    Offline, `transformers` makes a GPT-2 Small of random weights and saves it as it saves
    GPT-2 (`save_pretrained`); your `load_gpt2` reads it back and your model computes its
    logits. The cell after it loads the published weights wherever they can be had, and your
    model writes text with them: on a machine that is online (Colab or your own) it downloads
    them from Hugging Face (about 550 MB, kept in Hugging Face's cache for the next run);
    offline, set `GPT2_FOLDER` to a folder on your machine that holds them (`config.json` and
    `model.safetensors`, as `save_pretrained` or a download writes them). Offline and with no
    folder named, it says so and skips them.
    """),
    uses('''
    import time

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lib.tokenizer import gpt2_tiktoken

    torch.manual_seed(0)
    small = GPT2LMHeadModel(GPT2Config()).eval()              # 124M, random weights
    small.save_pretrained(folders / "gpt2-random")
    start = time.perf_counter()
    gpt2_config, gpt2_params = load_gpt2(folders / "gpt2-random")
    enc = gpt2_tiktoken()
    ids = np.array([enc.encode("Shall I compare thee to a summer's day?")])
    logits, _ = parts.gpt_forward(ids, gpt2_params, gpt2_config, parts)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        want = small(torch.tensor(ids)).logits.numpy()
    expect_close("your GPT-2 Small against transformers' logits", logits, want,
                 rtol=1e-4, atol=1e-4, axes="btv")
    n = sum(p.size for p in gpt2_params.values())
    print(f"{n:,} weights loaded, logits of {ids.shape[1]} tokens in {seconds:.1f} s; "
          f"largest difference {np.abs(logits - want).max():.1e}")
    '''),
    uses('''
    import socket

    GPT2_FOLDER = None      # or a folder with GPT-2's config.json and model.safetensors


    def online(host="huggingface.co"):
        try:
            socket.create_connection((host, 443), timeout=3).close()
            return True
        except OSError:
            return False


    folder = GPT2_FOLDER
    if folder is None and online():
        from huggingface_hub import snapshot_download

        folder = snapshot_download("gpt2", allow_patterns=["config.json",
                                                           "model.safetensors"])
    if folder is not None:
        gpt2_config, gpt2_params = load_gpt2(folder)
        prompt = np.array([enc.encode("The meaning of life is")])
        out = generate(gpt2_params, gpt2_config, prompt, 40, np.random.default_rng(0),
                       temperature=0.8, top_p=0.9)
        print(enc.decode(out[0].tolist()))
    else:
        print("offline, and GPT2_FOLDER names no folder: the published weights are skipped")
    '''),
    md(r"""
    ## 2. Your GPT-2 learns Shakespeare

    The small preset (4 blocks, 4 heads, 128 wide, 64 bytes of context) from lib's seeded
    initial weights, trained by your `train` on the course's Shakespeare, a byte per token:
    600 steps of 8 windows, a shorter run than chapter 5's 2,000 steps of 12. It is the
    notebook's long cell, minutes rather than seconds: with the course's own solutions as the
    pieces it takes about two minutes on two idle CPU cores (the test suite's run), and many
    times that on cores that other work shares; a learner's own pieces took 11.3 minutes in a
    trial. lib's model is about three times faster, partly
    because its attention keeps the weights for the backward pass, where 4.4's
    `attention_backward` computes the forward again. The cell prints how long yours took.
    The validation loss starts near
    $\ln 256 \approx 5.5$ nats per byte (a uniform guess over the bytes) and must end below
    2.3, which the cell asserts; the figure shows your losses.
    """),
    uses('''
    import matplotlib.pyplot as plt

    from lib.data import load_corpus

    train_ids, val_ids = load_corpus("shakespeare", "byte")
    small_config = GPTConfig.small()
    weights = to_gpt2_layout(small_config, nt.GPT(small_config, seed=1337).state_dict())
    recipe = TrainConfig.small(max_iters=600, batch_size=8, warmup_iters=60,
                               eval_interval=100, eval_iters=10)
    start = time.perf_counter()
    history = train(weights, small_config, train_ids, val_ids, recipe)
    minutes = (time.perf_counter() - start) / 60
    final = history["val_loss"][-1]
    print(f"{recipe.max_iters} steps in {minutes:.1f} min; validation loss "
          f"{history['val_loss'][0]:.2f} -> {final:.2f} nats per byte")
    assert final < 2.3, f"validation loss {final:.3f}, expected below 2.3"

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(history["step"], history["train_loss"], lw=0.8, label="training batch")
    ax.plot(history["eval_step"], history["val_loss"], "o-", label="validation")
    ax.set(xlabel="step", ylabel="loss (nats per byte)", title="Your GPT-2 on Shakespeare")
    ax.legend()
    plt.show()
    '''),
    md(r"""
    ## 3. Your GPT-2 writes

    Greedy decoding with your cache and without it gives the same bytes; the cache does one
    position's work per new token instead of the whole sequence's. Then text drawn with
    top-k and top-p.
    """),
    uses('''
    from lib.tokenizer import BPETokenizer

    tok = BPETokenizer()                                      # no merges: a byte a token
    prompt = np.array([tok.encode("ROMEO:\\n")])
    timings = {}
    for use_cache in (True, False):
        start = time.perf_counter()
        out = generate(weights, small_config, prompt, 56, np.random.default_rng(0),
                       use_cache=use_cache)
        timings[use_cache] = (time.perf_counter() - start, out)
    (fast, cached), (slow, uncached) = timings[True], timings[False]
    expect_equal("greedy bytes with and without your cache", cached, uncached, axes="bt")
    print(f"with the cache {fast:.2f} s, without {slow:.2f} s ({slow / fast:.1f}x)")
    print(tok.decode(cached[0].tolist()))
    '''),
    uses('''
    out = generate(weights, small_config, np.repeat(prompt, 3, axis=0), 56,
                   np.random.default_rng(7), temperature=0.9, top_k=20, top_p=0.95)
    for row in out:
        print(tok.decode(row.tolist()), end="\\n---\\n")
    '''),
    md("""
    ## Going further

    - Time one training step of your model against lib's (`lib.numpy_twin.GPT`) on the small
      preset. Which of your functions takes the most time? (`cProfile` says.)
    - Your `forward_cached` recomputes nothing, yet `generate` with the cache still slows
      down as the text grows. Why? Chapter 6 measures it.
    """),
]
