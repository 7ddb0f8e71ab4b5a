"""Hidden tests of exercise 6.3, the capstone (your GPT-2 loads GPT-2's weights, trains and decodes).

The student's functions call their own earlier pieces (`parts`, built in the sandbox from the
graded cells of their notebooks of exercises 2.1 to 6.2, handed in with this one), and every lib
function that answers a piece is stubbed: only a model of the student's own passes.

Expected values: lib's numpy twin in float64, every weight random (biases and gains away from 0
and 1), its weights in GPT-2's checkpoint layout (lib.weights.to_gpt2_layout). Three stages,
each a group of tests in a sandbox of its own, so that a stage that crashes or times out costs
only its own points:
- loading (the group "main"): load_gpt2 on the two layouts a Hugging Face folder comes in
  (save_pretrained's, with the `transformer.` prefix and a tied lm_head.weight; the published
  file's, without the prefix, with each layer's mask buffers): the config, the names, float32
  weights equal to the file's; the logits of the student's gpt_forward on what it loaded, within
  1e-4 of lib's (float32 weights).
- train: loss_and_grads against lib's GPT.forward, cross_entropy and GPT.backward (1e-10
  relative, float64), called twice (the gradients are new at each call); train against
  lib.train.train with the same TrainConfig on the same model: every list of the history and
  every weight after (float64: 1e-8 relative, the order of the sums aside both compute the same).
- decode: forward_cached chunk after chunk (a prompt, then one position at a time) against the
  logits of lib's GPT.forward on the whole sequence, float64 and float32; generate, greedy with and
  without the cache, against greedy decoding with lib's model (exact ids), on a model and prompt
  where a cached decode that counts positions from 0 changes the tokens; sampling with top-k and
  top-p, 256 copies of one prompt: ids of the right shape, every drawn token one that
  lib.sampling.filtered_probs keeps at its prefix, and the first new tokens within 5 standard
  deviations of its frequencies (so that neither the prompt back nor greedy decoding passes).
Edge tests (count only once the function's other tests pass): an lm_head that differs from wte,
a context overrun in forward_cached and in generate (ValueError), gradients new at each call.
"""
import numpy as np

from grader.spec import Config, Exercise, Rng, Test, Verdict, close, equal, frequencies
from lib.config import GPTConfig, TrainConfig
from lib.numpy_twin import GPT
from lib.numpy_twin.train import cross_entropy
from lib.sampling import filtered_probs
from lib.train import train as lib_train
from lib.weights import _HF_CONV1D as CONV1D, load_hf_gpt2, to_gpt2_layout, to_hf_config

PIECES = {"ch2_embeddings": ("embed_forward", "embed_backward", "head_forward", "head_backward"),
          "ch3_attention": ("causal_self_attention",),
          "ch4_gelu": ("gelu_tanh", "gelu_tanh_grad"),
          "ch4_backward": ("layernorm_backward",),
          "ch4_gpt": ("layernorm_forward", "attention_backward", "block_forward", "block_backward",
                      "gpt_forward", "gpt_backward"),
          "ch5_optimizer": ("cross_entropy", "lr_at", "adamw_step"),
          "ch5_training_loop": ("get_batch",),
          "ch6_kv_cache": ("KVCache",),
          "ch6_top_k_top_p": ("sample",)}

EXERCISE = Exercise(
    notebook="ch6_your_gpt2", title="Your GPT-2",
    functions=("load_gpt2", "loss_and_grads", "train", "forward_cached", "generate"),
    # every lib function that answers a piece: the model and its layers, the loss, AdamW, the
    # schedule and the loop, the batches, the caches, sampling, the GPT-2 loader
    blocked=tuple(f"lib.numpy_twin.{m}:*" for m in ("model", "fast_decode", "flash", "generate", "train",
                                                   "modern", "quant", "finetune", "posttrain"))
    + ("lib.sampling:*", "lib.train:*", "lib.schedule:*", "lib.progress:*", "lib.history:*",
       "lib.data:get_batch", "lib.data:BatchSampler",
       "lib.weights:load_hf_gpt2", "lib.weights:hf_config"),
    groups={"main": 30.0, "train": 60.0, "decode": 30.0},      # main: the loading stage
    builds_on=PIECES,
)

LAYOUTS = {"2 heads, 16 wide": dict(vocab_size=24, n_ctx=12, n_layer=2, n_head=2, n_embd=16),
           "3 heads, 24 wide": dict(vocab_size=20, n_ctx=12, n_layer=2, n_head=3, n_embd=24)}
TIGHT = dict(rtol=1e-9, atol=1e-12)
SAMPLED_ROWS = 256          # copies of one prompt, whose first new tokens show the sampling's frequencies


# ---- lib's model, in the student's layout ------------------------------------------------------
def lib_model(fields, seed):
    """A float64 GPT of lib with every weight moved randomly off GPT-2's initialisation."""
    config = GPTConfig(**fields)
    model = GPT(config, seed=seed, dtype=np.float64)
    rng = np.random.default_rng(seed)
    for _, weight in model.named_parameters():
        weight += rng.normal(0, 0.3, weight.shape)
    return config, model


def model_of(config, params):
    """lib's float64 GPT holding the weights `params` (GPT-2's checkpoint layout)."""
    model = GPT(config, dtype=np.float64)
    model.load_state_dict({n: np.array(a.T if n.endswith(CONV1D) else a, np.float64) for n, a in params.items()})
    return model


# ---- the reference: the capstone's functions through lib ------------------------------------------------
HISTORY_KEYS = ("step", "train_loss", "lr", "grad_norm", "eval_step", "eval_train_loss", "val_loss")


def load_gpt2(folder):
    config, state = load_hf_gpt2(folder)
    return config, to_gpt2_layout(config, state)


def loss_and_grads(params, config, x, y):
    model = model_of(config, params)
    loss, dlogits = cross_entropy(model.forward(x), y)
    model.backward(dlogits)
    return loss, to_gpt2_layout(config, model.named_grads())


def train(params, config, train_ids, val_ids, settings):
    """lib's train on lib's model holding params, whose arrays then take the trained weights."""
    model = model_of(config, params)
    history = lib_train(model, train_ids, val_ids, settings, progress=False)
    for name, weight in to_gpt2_layout(config, model.named_parameters()).items():
        params[name][...] = weight
    return {k: history[k] for k in HISTORY_KEYS}


def forward_cached(idx, params, config, cache):
    """lib's forward with lib's cache (a lib KVCache, not the student's)."""
    return model_of(config, params).forward(idx, kv_cache=cache)


def generate(params, config, idx, max_new_tokens, rng, temperature=0.0, top_k=None, top_p=None, use_cache=True):
    return model_of(config, params).generate(idx, max_new_tokens, temperature=temperature, top_k=top_k,
                                             top_p=top_p, seed=int(rng.integers(2**31)), use_cache=use_cache)


REFERENCE = {"load_gpt2": load_gpt2, "loss_and_grads": loss_and_grads, "train": train,
             "forward_cached": forward_cached, "generate": generate}


# ---- checks ------------------------------------------------------------------------------------
def loaded(config, params):
    """Check drive_load's [config fields, params]: the config, the names, float32 weights equal
    to the file's."""
    want_config = {k: getattr(config, k) for k in ("vocab_size", "n_ctx", "n_layer", "n_head", "n_embd")}

    def check(got):
        fields, weights = got
        if fields != want_config:
            return Verdict(False, f"the config read is {fields}: not the file's", f"expected {want_config}")
        if not isinstance(weights, dict) or sorted(weights) != sorted(params):
            extra = sorted(set(weights) - set(params)) if isinstance(weights, dict) else []
            missing = sorted(set(params) - set(weights)) if isinstance(weights, dict) else []
            return Verdict(False, f"params' names are not 4.4's: {len(missing)} missing, extra {extra[:4]}",
                           f"missing {missing[:4]}")
        for name, want in params.items():
            verdict = close(want.astype(np.float32), rtol=1e-6, atol=0, dtype=np.float32)(weights[name])
            if not verdict[0]:
                return Verdict(False, f"{name}: {verdict[1]}")
        return Verdict(True, "the config and every weight as in the file")
    return check


def history_of(want):
    """Check drive_train's [history, params after] against lib's history and weights."""
    history, params = want

    def check(got):
        got_history, got_params = got
        if not isinstance(got_history, dict):
            return False, f"train returned {type(got_history).__name__}, not a dict of lists"
        for key, values in history.items():
            if key not in got_history:
                return False, f"the history has no {key!r}"
            if key in ("step", "eval_step"):
                verdict = equal(np.array(values))(np.asarray(got_history[key]))
            else:
                verdict = close(np.array(values), rtol=1e-8, atol=1e-12)(np.asarray(got_history[key], np.float64))
            if not verdict[0]:
                return Verdict(False, f"history[{key!r}]: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
        for name, want in params.items():
            verdict = close(want, rtol=1e-8, atol=1e-12)(got_params.get(name))
            if not verdict[0]:
                return Verdict(False, f"{name} after training: {verdict[1]}")
        return Verdict(True, "the same history and weights as lib's train")
    return check


def chunks_of(want, dtype, **tolerance):
    """Check drive_cached's [[logits, length], ...] against the full forward's logits: arrays
    of `dtype`, within `tolerance` (close's rtol and atol)."""
    def check(got):
        if not isinstance(got, list) or len(got) != len(want):
            return False, f"expected {len(want)} chunks, got {type(got).__name__}"
        for (logits, length), (want_logits, want_length) in zip(got, want):
            if length != want_length:
                return Verdict(False, f"cache.length is {length} after the positions up to {want_length - 1}",
                               f"expected {want_length}")
            verdict = close(want_logits, dtype=dtype, **tolerance)(logits)
            if not verdict[0]:
                return Verdict(False, f"the logits of positions {want_length - want_logits.shape[1]}.."
                                      f"{want_length - 1}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
        return Verdict(True, "every chunk's logits and the cache's length")
    return check


def drawn_from(model, prompt, n, top_k=None, top_p=None):
    """Check: ids of shape (B, T + n), the prompt kept, every new token one that filtered_probs
    keeps at its prefix (temperature 1), and, the prompt's rows being one prompt repeated, the
    first new tokens drawn with filtered_probs' frequencies (greedy decoding draws one token only)."""
    def check(got):
        if not isinstance(got, np.ndarray) or got.shape != (prompt.shape[0], prompt.shape[1] + n):
            return Verdict(False, f"got {type(got).__name__} of shape {np.shape(got)}: not each prompt with "
                                  f"max_new_tokens new ids", f"expected {(prompt.shape[0], prompt.shape[1] + n)}")
        if not np.issubdtype(got.dtype, np.integer) or not np.array_equal(got[:, :prompt.shape[1]], prompt):
            return False, "the prompt is not kept as the first ids (integers)"
        for t in range(prompt.shape[1], got.shape[1]):
            probs = filtered_probs(model.forward(got[:, :t])[:, -1], 1.0, top_k, top_p)    # (B, V)
            chosen = probs[np.arange(len(got)), np.clip(got[:, t], 0, probs.shape[1] - 1)]
            if ((got[:, t] < 0) | (got[:, t] >= probs.shape[1]) | (chosen == 0)).any():
                return False, f"position {t}: a token that top_k={top_k}, top_p={top_p} removes was drawn"
            if t == prompt.shape[1]:
                verdict = frequencies(probs)(got[:, t])
                if not verdict[0]:
                    return Verdict(False, f"the first new token of {len(got)} copies of one prompt: {verdict[1]} "
                                          f"(sample from the filtered probabilities)", *verdict[2:])
        return True, "every token among those kept, drawn with their probabilities"
    return check


# ---- the tests ---------------------------------------------------------------------------------
def _load_tests():
    tests = []
    config, model = lib_model(LAYOUTS["2 heads, 16 wide"], seed=61)
    params = to_gpt2_layout(config, model.named_parameters())
    saved = {"config.json": to_hf_config(config),
             "model.safetensors": {**{"transformer." + n: a for n, a in params.items()},
                                   "lm_head.weight": params["wte.weight"]}}
    mask = np.tril(np.ones((1, 1, config.n_ctx, config.n_ctx), np.float32))
    published = {"config.json": to_hf_config(config),
                 "model.safetensors": {**params, **{f"h.{i}.attn.{b}": mask for i in range(config.n_layer)
                                                    for b in ("bias", "masked_bias")}}}
    tests += [Test("load_gpt2: save_pretrained's layout (prefix, tied lm_head)", "load_gpt2", (saved,),
                   loaded(config, params), points=2, group="main", driver="load"),
              Test("load_gpt2: the published layout (no prefix, mask buffers)", "load_gpt2", (published,),
                   loaded(config, params), points=2, group="main", driver="load")]
    idx = np.random.default_rng(62).integers(0, config.vocab_size, (2, 9))
    want = model.forward(idx).astype(np.float32)
    tests.append(Test("your model on load_gpt2's weights: the logits within 1e-4", "load_gpt2",
                      (published, idx), close(want, rtol=1e-4, atol=1e-4), points=3, group="main",
                      driver="load_logits"))
    untied = {**saved, "model.safetensors": {**saved["model.safetensors"],
                                             "lm_head.weight": params["wte.weight"] + 1.0}}
    tests.append(Test("load_gpt2: an lm_head.weight unlike wte.weight (ValueError)", "load_gpt2", (untied,),
                      group="main", driver="load", expect_error="ValueError", edge=True))
    return tests


def _train_tests():
    tests = []
    for i, (layout, fields) in enumerate(LAYOUTS.items()):
        config, model = lib_model(fields, seed=63 + i)
        params = to_gpt2_layout(config, model.named_parameters())
        x, y = (np.random.default_rng(64 + i).integers(0, config.vocab_size, (2, 7)) for _ in range(2))
        want = loss_and_grads(params, config, x, y)

        def check(got, want=want):
            loss, grads = got
            verdict = close(np.array(want[0]), rtol=1e-10, atol=0)(np.asarray(loss, np.float64))
            if not verdict[0]:
                return Verdict(False, f"the loss: {verdict[1]}")
            if not isinstance(grads, dict) or sorted(grads) != sorted(want[1]):
                return False, "grads must hold one gradient per weight, under params' names"
            for name, g in want[1].items():
                verdict = close(g, rtol=1e-9, atol=1e-12)(grads[name])
                if not verdict[0]:
                    return Verdict(False, f"the gradient of {name}: {verdict[1]}")
            return Verdict(True, "the loss and every gradient")
        tests.append(Test(f"loss_and_grads: the loss and every gradient ({layout})", "loss_and_grads",
                          (params, Config(fields), x, y), check, points=2, group="train"))
        if i == 0:
            def same_twice(got, want=want):
                first, second = got
                for name in want[1]:
                    if not np.allclose(np.asarray(second[1][name]), np.asarray(first[1][name]), rtol=1e-12):
                        return False, f"a second call gives another gradient of {name}: keep none from the first"
                return True, "the same gradients at each call"
            tests.append(Test("loss_and_grads called twice: new gradients each call", "loss_and_grads",
                              (params, Config(fields), x, y), same_twice, group="train", driver="twice",
                              edge=True))
    ids = np.random.default_rng(66).integers(0, 24, 500)
    runs = {"clipped, 7 steps": dict(max_iters=7, batch_size=3, lr=1e-2, min_lr=1e-3, warmup_iters=2,
                                     eval_interval=3, eval_iters=2, grad_clip=0.3, weight_decay=0.1,
                                     betas=[0.9, 0.95], seed=5),
            "no clipping, 4 steps": dict(max_iters=4, batch_size=2, lr=3e-3, min_lr=3e-3, warmup_iters=1,
                                         eval_interval=2, eval_iters=1, grad_clip=0.0, weight_decay=0.0,
                                         betas=[0.8, 0.99], seed=9)}
    for j, (name, settings) in enumerate(runs.items()):
        config, model = lib_model(LAYOUTS["2 heads, 16 wide"], seed=67 + j)
        params = to_gpt2_layout(config, model.named_parameters())
        trained = {name: weight.copy() for name, weight in params.items()}
        history = train(trained, config, ids[:400], ids[400:],
                        TrainConfig(**{**settings, "betas": tuple(settings["betas"])}))
        want = [history, trained]
        tests.append(Test(f"train: lib's history and weights ({name})", "train",
                          (params, Config(LAYOUTS["2 heads, 16 wide"]), ids[:400], ids[400:], settings),
                          history_of(want), points=3, group="train", driver="train"))
    return tests


def _decode_tests():
    tests = []
    config, model = lib_model(LAYOUTS["3 heads, 24 wide"], seed=71)
    params = to_gpt2_layout(config, model.named_parameters())
    fields = LAYOUTS["3 heads, 24 wide"]
    idx = np.random.default_rng(72).integers(0, config.vocab_size, (2, 8))
    full = model.forward(idx)
    bounds = [[0, 4], [4, 5], [5, 6], [6, 8]]
    want = [[full[:, s:e], e] for s, e in bounds]
    tests.append(Test("forward_cached: a prompt, then new positions (float64)", "forward_cached",
                      (params, Config(fields), idx, bounds), chunks_of(want, np.float64, **TIGHT), points=2,
                      group="decode", driver="cached"))
    # float32: the reference computes in float64 from the same float32 weights; 1e-4 covers the
    # single-precision rounding of two blocks (the errors measured are ~1e-6)
    params32 = {n: a.astype(np.float32) for n, a in params.items()}
    full32 = model_of(config, params32).forward(idx)
    want32 = [[full32[:, s:e].astype(np.float32), e] for s, e in bounds]
    tests.append(Test("forward_cached: float32 weights", "forward_cached", (params32, Config(fields), idx, bounds),
                      chunks_of(want32, np.float32, rtol=1e-4, atol=1e-4), group="decode", driver="cached"))
    tests.append(Test("forward_cached: past n_ctx (ValueError)", "forward_cached",
                      (params, Config(fields), np.zeros((1, 13), np.int64), [[0, 13]]), group="decode",
                      driver="cached", expect_error="ValueError", edge=True))
    # generate: a model and prompt on which a cached decode that counts the new tokens' positions
    # from 0 (wpe[0] for every new token) changes the greedy tokens of both rows, and whose first
    # filtered distributions spread over 3 tokens or more (the likeliest under 0.5)
    config, model = lib_model(fields, seed=72)
    params = to_gpt2_layout(config, model.named_parameters())
    prompt = np.random.default_rng(73).integers(0, config.vocab_size, (2, 3))
    greedy = prompt
    for _ in range(7):
        greedy = np.concatenate([greedy, model.forward(greedy)[:, -1:].argmax(-1)], axis=1)
    copies = np.repeat(prompt[:1], SAMPLED_ROWS, axis=0)
    tests += [Test("generate: greedy with the cache, lib's tokens", "generate",
                   (params, Config(fields), prompt, 7, Rng(0)), equal(greedy), points=2, group="decode"),
              Test("generate: greedy without the cache, lib's tokens", "generate",
                   (params, Config(fields), prompt, 7, Rng(0)), equal(greedy), group="decode",
                   kwargs={"use_cache": False}),
              Test("generate: top_k=3, sampled among the 3 most likely", "generate",
                   (params, Config(fields), copies, 4, Rng(1)), drawn_from(model, copies, 4, top_k=3),
                   group="decode", kwargs={"temperature": 1.0, "top_k": 3}),
              Test("generate: top_p=0.6, sampled in the nucleus", "generate",
                   (params, Config(fields), copies, 4, Rng(2)), drawn_from(model, copies, 4, top_p=0.6),
                   group="decode", kwargs={"temperature": 1.0, "top_p": 0.6}),
              Test("generate: past n_ctx (ValueError)", "generate", (params, Config(fields), prompt, 10, Rng(0)),
                   group="decode", expect_error="ValueError", edge=True)]
    return tests


def tests():
    return _load_tests() + _train_tests() + _decode_tests()
