"""Position choices beyond learned and RoPE, evaluation past n_ctx, RoPE scaling, sliding windows.

Checked in both twins and between them: sinusoidal positions, ALiBi (slopes against the paper's
values, the bias, the KV-cache path), extrapolate=True past n_ctx (and the error learned positions
give there), position interpolation and NTK-aware scaling of RoPE's tables, the sliding-window
mask and the rolling KV cache (its size, and its tokens against the full cache's and against a
forward over the whole sequence). numpy's gradients are checked against torch autograd in float64
with scores made large, so that the softmax saturates and the masks' -inf entries matter.
Also: the configs cached before these options existed keep their dict, and so their cache key.

Tolerances are those of tests/test_model.py: logits max abs difference <= 1e-4 in float32,
gradients per tensor relative error <= 1e-8 in float64.
"""
import hashlib
import json

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig, kv_cache_bytes, param_shapes
from lib.numpy_twin import model as nm
from lib.pretrained import MODERN_SMALL
from lib.torch_twin import model as tm

LOGIT_ATOL = 1e-4
TWINS = {"numpy": nt, "torch": tt}


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=97, n_ctx=16, n_layer=2, n_head=4, n_embd=32), **kw})


def sharp(model, scale=12.0):
    """The model with its c_attn weights multiplied by `scale`: scores in the tens, a peaked softmax,
    so that what the positions do to the scores shows in the logits."""
    model.load_state_dict({n: w * scale if "c_attn" in n else w for n, w in model.state_dict_numpy().items()})
    return model


def logits_of(model, idx, **kw):
    """Logits as a numpy array, from either twin's model."""
    if isinstance(model, nt.GPT):
        return model.forward(np.asarray(idx), **kw)
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(idx)), **kw).numpy()


# ---- cache keys: the configs cached before these options keep their dict --------------------------------
def config_digest(config):
    """sha256 of the config's dict as lib.pretrained.trained_folder serialises it (keys in order)."""
    return hashlib.sha256(json.dumps(config.to_dict()).encode()).hexdigest()


def test_configs_at_the_new_defaults_keep_their_cache_keys():
    """Digests computed from the code before sliding_window, rope_scaling and rope_factor existed."""
    assert config_digest(GPTConfig.small()) == "84da2bbfd80128952c14a9d198a3cc0f0ab57166f19d0d66124ec9d6ed1cbd51"
    assert config_digest(MODERN_SMALL) == "74256546e17d98412ae8f2652c0bdd2deeb852ec38535da7b059efc94a4e7975"
    assert config_digest(GPTConfig.gpt2()) == "f2bdebb624ac9fbd1cbb5832144772aa2a380c3c42930d84e021d4c66907a2d8"
    assert list(GPTConfig.small().to_dict())[-1] == "bias"


@pytest.mark.parametrize("options", [dict(sliding_window=4), dict(position="rope", rope_scaling="ntk", rope_factor=4.0),
                                     dict(position="alibi"), dict(position="sinusoidal", sliding_window=16)])
def test_configs_with_the_new_options_round_trip(options):
    cfg = tiny(**options)
    assert GPTConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert set(options) <= set(cfg.to_dict())


@pytest.mark.parametrize("options,message", [
    (dict(sliding_window=0), "sliding_window must be a positive integer, got 0"),
    (dict(position="rope", rope_scaling="yarn"), "rope_scaling='yarn'; expected None, 'interpolation' or 'ntk'"),
    (dict(rope_scaling="ntk", rope_factor=2.0), "rope_scaling='ntk' scales RoPE's angles; expected position='rope'"),
    (dict(position="rope", rope_scaling="ntk", rope_factor=0.5), "rope_factor must be a number >= 1, got 0.5"),
    (dict(position="rope", rope_factor=2.0), "rope_factor=2.0 needs rope_scaling ('interpolation' or 'ntk'), got None"),
    (dict(position="sinusoidal", n_embd=33, n_head=3), "position='sinusoidal' needs an even n_embd"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(ValueError) as error:
        tiny(**options)
    assert message in str(error.value) and "\n" not in str(error.value)


# ---- sinusoidal positions -------------------------------------------------------------------------------
@pytest.mark.parametrize("twin", TWINS)
def test_sinusoidal_table_is_the_formula_at_any_position(twin):
    C, start = 32, 1000                                       # far past any n_ctx: a formula has every row
    if twin == "numpy":
        table = nt.sinusoidal_positions(start, 3, C, np.float64)
    else:
        table = tt.sinusoidal_positions(start, 3, C, torch.float64).numpy()
    p, i = np.arange(start, start + 3)[:, None], np.arange(C // 2)[None, :]
    np.testing.assert_allclose(table[:, 0::2], np.sin(p / 10000 ** (2 * i / C)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(table[:, 1::2], np.cos(p / 10000 ** (2 * i / C)), rtol=0, atol=1e-12)
    first = (nt.sinusoidal_positions(0, 1, C, np.float64) if twin == "numpy"
             else tt.sinusoidal_positions(0, 1, C, torch.float64).numpy())
    np.testing.assert_array_equal(first[0], np.tile([0.0, 1.0], C // 2))   # position 0: sin 0, cos 0


def test_sinusoidal_model_has_no_position_weights_and_adds_the_table():
    cfg = tiny(position="sinusoidal")
    assert "wpe.weight" not in param_shapes(cfg)
    model = nt.GPT(cfg)
    assert model.wpe is None and tt.GPT(cfg).wpe is None
    assert [n for n, _ in model.named_parameters()] == list(param_shapes(cfg))
    idx = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 9))
    assert np.abs(model.forward(idx) - logits_of(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL
    shuffled = idx[:, ::-1].copy()                            # positions matter: the same tokens reversed differ
    assert np.abs(model.forward(shuffled)[:, -1] - model.forward(idx)[:, -1]).max() > 1e-3


# ---- ALiBi ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("twin", TWINS)
def test_alibi_slopes_are_the_papers(twin):
    """Press et al. 2022: 8 heads have 1/2, 1/4, ..., 1/256; for H not a power of two, the slopes of
    the largest power of two below H, then the odd-numbered ones of twice as many heads."""
    slopes = nt.alibi_slopes if twin == "numpy" else (lambda H: tt.alibi_slopes(H).numpy())
    np.testing.assert_array_equal(slopes(8), [1 / 2 ** h for h in range(1, 9)])
    np.testing.assert_array_equal(slopes(4), [1 / 4, 1 / 16, 1 / 64, 1 / 256])
    np.testing.assert_allclose(slopes(16), [2 ** -(h / 2) for h in range(1, 17)], rtol=1e-15)
    np.testing.assert_allclose(slopes(12), [1 / 2 ** h for h in range(1, 9)] + [2 ** -(h / 2) for h in (1, 3, 5, 7)],
                               rtol=1e-15)
    np.testing.assert_allclose(slopes(6), [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8], rtol=1e-15)


def test_alibi_bias_is_minus_slope_times_distance_in_both_twins():
    slopes = nt.alibi_slopes(4)
    bias = nt.alibi_bias(3, 5, slopes, np.float64)          # 3 queries at positions 5, 6, 7; keys 0 .. 7
    assert bias.shape == (4, 3, 8)
    for h in range(4):
        for i in range(3):
            np.testing.assert_array_equal(bias[h, i], -slopes[h] * (5 + i - np.arange(8)))
    np.testing.assert_array_equal(bias, tt.alibi_bias(3, 5, tt.alibi_slopes(4), torch.float64).numpy())


def test_alibi_attention_prefers_near_keys_and_the_twins_agree():
    cfg = tiny(position="alibi", n_kv_head=2)
    idx = np.zeros((1, 12), np.int64)                         # one token repeated: only the bias tells keys apart
    _, _, atts = nt.GPT(cfg).forward_outputs(idx, return_attention=True)
    with torch.no_grad():
        atts_t = tt.GPT(cfg).forward_outputs(torch.as_tensor(idx), return_attention=True).attentions
    row = atts[0][0, :, -1]                                   # (H, 12): the last query's weights
    assert np.all(np.diff(row, axis=-1) > 0)                  # nearer keys weigh more, in every head
    assert np.all(np.triu(atts[1][0, 0], k=1) == 0)
    for a, b in zip(atts, atts_t):
        assert np.abs(a - b.numpy()).max() <= 1e-5


# ---- the KV cache with each option: chunks and single tokens equal one forward -----------------------------
CACHED = {"sinusoidal": dict(position="sinusoidal"), "alibi": dict(position="alibi"),
          "alibi_gqa": dict(position="alibi", n_kv_head=2), "window": dict(sliding_window=3),
          "alibi_window": dict(position="alibi", sliding_window=4),
          "rope_ntk_window": dict(position="rope", rope_scaling="ntk", rope_factor=2.0, sliding_window=5)}


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("name", CACHED)
def test_kv_cache_forward_equals_full_forward(twin, name):
    cfg = tiny(**CACHED[name])
    module = TWINS[twin]
    idx = np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 14))
    model = module.GPT(cfg)
    full = logits_of(model, idx)
    chunks = [(0, 5), (5, 9), (9, 10), (10, 11), (11, 14)]
    caches = [module.KVCache(cfg, batch=2)]
    if cfg.sliding_window is not None:
        caches.append(module.RollingKVCache(cfg, batch=2))
    for cache in caches:
        parts = [logits_of(model, idx[:, a:b], kv_cache=cache) for a, b in chunks]
        assert cache.length == 14
        assert np.abs(np.concatenate(parts, axis=1) - full).max() <= LOGIT_ATOL, type(cache).__name__


# ---- past the training length ------------------------------------------------------------------------------
@pytest.mark.parametrize("twin", TWINS)
def test_learned_positions_refuse_positions_past_n_ctx_even_when_asked(twin):
    model = TWINS[twin].GPT(tiny())
    idx = np.zeros((1, 17), np.int64)
    for extrapolate in (False, True):
        with pytest.raises(ValueError, match=r"^sequence of 17 positions \(17 new\) does not fit the context: expected "
                                             r"1 to n_ctx=16 \(learned positions have wpe rows for 0 to 15 only\)$"):
            logits_of(model, idx, extrapolate=extrapolate)


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_formula_positions_go_past_n_ctx_when_asked(twin, position):
    cfg = tiny(position=position)
    model = TWINS[twin].GPT(cfg)
    idx = np.random.default_rng(4).integers(0, cfg.vocab_size, (2, 40))
    with pytest.raises(ValueError, match=rf"expected 1 to n_ctx=16, or extrapolate=True to evaluate "
                                         rf"position='{position}' past it$"):
        logits_of(model, idx)
    long = logits_of(model, idx, extrapolate=True)
    assert long.shape == (2, 40, cfg.vocab_size) and np.isfinite(long).all()
    assert np.abs(long[:, :16] - logits_of(model, idx[:, :16])).max() <= LOGIT_ATOL   # causal: the start is as before
    other = logits_of(TWINS["torch" if twin == "numpy" else "numpy"].GPT(cfg), idx, extrapolate=True)
    assert np.abs(long - other).max() <= LOGIT_ATOL
    cache = TWINS[twin].KVCache(cfg, batch=2, positions=40)   # a cache made for the longer sequence
    parts = [logits_of(model, idx[:, a:b], kv_cache=cache, extrapolate=True) for a, b in ((0, 30), (30, 40))]
    assert np.abs(np.concatenate(parts, axis=1) - long).max() <= LOGIT_ATOL
    with pytest.raises(ValueError, match=r"does not fit the KV cache: expected at most 40"):
        logits_of(model, idx[:, :1], kv_cache=cache, extrapolate=True)


# ---- RoPE scaling -----------------------------------------------------------------------------------------
def cos_sin(twin, start, T, D, **scaling):
    if twin == "numpy":
        return nt.rope_cos_sin(start, T, D, 10000.0, np.float64, **scaling)
    return tuple(x.numpy() for x in tt.rope_cos_sin(start, T, D, 10000.0, torch.float64, **scaling))


@pytest.mark.parametrize("twin", TWINS)
def test_interpolation_turns_position_s_p_as_p_was(twin):
    for s in (2, 4):
        stretched = cos_sin(twin, 0, 64 * s, 16, scaling="interpolation", factor=s)
        plain = cos_sin(twin, 0, 64, 16)
        for a, b in zip(stretched, plain):
            np.testing.assert_array_equal(a[::s], b)           # exactly: (s p) / s is p in floating point


@pytest.mark.parametrize("twin", TWINS)
def test_ntk_scaling_keeps_the_fastest_pair_and_slows_the_slowest_by_s(twin):
    D, s = 16, 4.0
    angle = {}
    for name, scaling in (("plain", {}), ("ntk", dict(scaling="ntk", factor=s))):
        cos, sin = cos_sin(twin, 1, 1, D, **scaling)          # position 1: the angles are the frequencies
        angle[name] = np.arctan2(sin[0], cos[0])              # (D/2,)
    np.testing.assert_allclose(angle["ntk"][0], angle["plain"][0], rtol=1e-14)
    np.testing.assert_allclose(angle["ntk"][-1], angle["plain"][-1] / s, rtol=1e-12)
    assert np.all(angle["ntk"][1:] < angle["plain"][1:])


@pytest.mark.parametrize("scaling", ["interpolation", "ntk"])
def test_scaled_rope_models_agree_between_twins(scaling):
    cfg = tiny(position="rope", rope_scaling=scaling, rope_factor=2.0)
    idx = np.random.default_rng(5).integers(0, cfg.vocab_size, (2, 32))
    a = logits_of(sharp(nt.GPT(cfg)), idx, extrapolate=True)
    assert np.abs(a - logits_of(sharp(tt.GPT(cfg)), idx, extrapolate=True)).max() <= LOGIT_ATOL
    assert np.abs(a - logits_of(sharp(nt.GPT(tiny(position="rope"))), idx, extrapolate=True)).max() > 1e-3


# ---- sliding-window mask ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("start,T,W", [(0, 6, 2), (4, 3, 3), (0, 5, 9)])
def test_window_mask_shows_each_query_its_last_w_keys(start, T, W):
    mask = nm.causal_mask(T, start, np.float64) + nt.window_mask(T, start, W, np.float64)
    assert mask.shape == (T, start + T)
    for i in range(T):
        seen = np.flatnonzero(mask[i] == 0)
        np.testing.assert_array_equal(seen, np.arange(max(0, start + i - W + 1), start + i + 1))
    np.testing.assert_array_equal(mask, (tm.causal_mask(T, start, torch.float64)
                                         + tt.window_mask(T, start, W, torch.float64)).numpy())


def test_a_window_as_long_as_the_context_changes_nothing():
    idx = np.random.default_rng(6).integers(0, 97, (2, 16))
    np.testing.assert_array_equal(nt.GPT(tiny(sliding_window=16)).forward(idx), nt.GPT(tiny()).forward(idx))
    assert np.abs(nt.GPT(tiny(sliding_window=4)).forward(idx) - nt.GPT(tiny()).forward(idx)).max() > 1e-3


# ---- numpy's gradients against torch autograd, float64, saturated scores ------------------------------------
GRADIENTS = {"sinusoidal": dict(position="sinusoidal"), "alibi": dict(position="alibi"),
             "window": dict(sliding_window=3),
             "alibi_gqa_window": dict(position="alibi", n_kv_head=2, sliding_window=5),
             "rope_interpolation": dict(position="rope", rope_scaling="interpolation", rope_factor=2.0),
             "rope_ntk_window": dict(position="rope", rope_scaling="ntk", rope_factor=3.0, sliding_window=4)}


@pytest.mark.parametrize("name", GRADIENTS)
def test_numpy_gradients_match_torch_autograd_float64(name):
    cfg = tiny(**GRADIENTS[name])
    hard = sharp(nt.GPT(cfg, seed=3), 30.0).state_dict()      # scores in the tens: a saturated softmax
    numpy_model = nt.GPT(cfg).astype(np.float64)
    numpy_model.load_state_dict(hard)
    torch_model = tt.GPT(cfg).double()
    torch_model.load_state_dict({n: w.astype(np.float64) for n, w in hard.items()})
    idx = np.random.default_rng(7).integers(0, cfg.vocab_size, (3, cfg.n_ctx))
    logits = numpy_model.forward(idx)
    att = numpy_model.forward_outputs(idx, return_attention=True).attentions[0]
    assert att[:, :, 6:].max() > 0.99                         # rows past the sixth with almost all weight on one key
    G = np.random.default_rng(8).standard_normal(logits.shape)
    numpy_model.zero_grad()
    numpy_model.forward(idx)
    numpy_model.backward(G)
    (torch_model(torch.as_tensor(idx)) * torch.as_tensor(G)).sum().backward()
    g_torch = {n: p.grad.numpy() for n, p in torch_model.named_parameters()}
    assert list(numpy_model.grads) == list(g_torch)
    for n, g in numpy_model.grads.items():
        rel = np.linalg.norm(g - g_torch[n]) / np.linalg.norm(g_torch[n])
        assert rel <= 1e-8, f"{n}: relative gradient error {rel:.2e}"


# ---- the rolling KV cache in generation ----------------------------------------------------------------------
def greedy_without_cache(model, prompt, n):
    """Greedy tokens from a forward over the whole sequence at every step (no cache, no cropping)."""
    seq = np.asarray(prompt)
    for _ in range(n):
        nxt = logits_of(model, seq, extrapolate=True)[:, -1].argmax(-1)
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
    return seq


def as_prompt(twin, prompt):
    return prompt if twin == "numpy" else torch.as_tensor(prompt)


@pytest.mark.parametrize("twin", TWINS)
def test_rolling_cache_stops_growing_at_the_window(twin):
    cfg = tiny(position="rope", sliding_window=4)
    model = TWINS[twin].GPT(cfg, seed=1)
    stream = model.stream(as_prompt(twin, np.zeros((2, 3), np.int64)), 30, temperature=0)
    assert isinstance(stream.cache, TWINS[twin].RollingKVCache)
    sizes = []
    for _ in stream:
        sizes.append({tuple(x.shape) for x in stream.cache.k + stream.cache.v})
    assert sizes[0] == {(2, 4, 3, 8)} and sizes[1] == {(2, 4, 4, 8)}
    assert all(s == {(2, 4, 4, 8)} for s in sizes[1:])        # 30 tokens past a 16-token context, still W
    assert stream.cache.length == 3 + 29 and stream.refills == 0


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rope", "alibi"])
def test_rolling_cache_tokens_equal_the_full_caches_within_the_window(twin, position):
    """While every token is made from at most W positions the window hides nothing: the same tokens
    as the same weights without a window, decoded with the plain cache."""
    W, module = 8, TWINS[twin]
    windowed = module.GPT(tiny(position=position, sliding_window=W), seed=2)
    plain = module.GPT(tiny(position=position), seed=2)
    prompt = as_prompt(twin, np.random.default_rng(9).integers(0, 97, (2, 3)))
    a = np.asarray(windowed.generate(prompt, W - 2, temperature=0))      # the last token made from 3 + 5 = W
    b = np.asarray(plain.generate(prompt, W - 2, temperature=0))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("twin", TWINS)
@pytest.mark.parametrize("position", ["sinusoidal", "rope", "alibi"])
def test_rolling_cache_tokens_equal_a_windowed_forward_over_the_whole_sequence(twin, position):
    """Past W (and past n_ctx = 16) the rolling cache's tokens are those of a forward without any
    cache over the whole sequence, with the window mask."""
    cfg = tiny(position=position, sliding_window=5, n_layer=3)
    module = TWINS[twin]
    model = module.GPT(cfg, seed=4)
    prompt = np.random.default_rng(10).integers(0, 97, (2, 6))
    cached = np.asarray(model.generate(as_prompt(twin, prompt), 20, temperature=0))   # 26 > n_ctx
    np.testing.assert_array_equal(cached, greedy_without_cache(model, prompt, 20))
    assert np.abs(logits_of(module.GPT(tiny(position=position, n_layer=3), seed=4), cached, extrapolate=True)
                  - logits_of(model, cached, extrapolate=True)).max() > 1e-3   # the window did hide keys


@pytest.mark.parametrize("twin", TWINS)
def test_rolling_cache_with_learned_positions_refills_at_n_ctx(twin):
    model = TWINS[twin].GPT(tiny(sliding_window=4), seed=5)
    stream = model.stream(as_prompt(twin, np.zeros((1, 10), np.int64)), 12, temperature=0)
    tokens = [np.asarray(t) for t in stream]
    assert len(tokens) == 12 and stream.refills == 1 and stream.cache.length <= 16


def test_kv_cache_bytes_stop_at_the_window():
    cfg = GPTConfig.gpt2(sliding_window=256)
    assert kv_cache_bytes(cfg, 100) == kv_cache_bytes(GPTConfig.gpt2(), 100)
    assert kv_cache_bytes(cfg, 10_000) == kv_cache_bytes(cfg, 256) == kv_cache_bytes(GPTConfig.gpt2(), 256)


def test_rolling_cache_needs_a_window():
    for module in TWINS.values():
        with pytest.raises(ValueError, match="RollingKVCache needs a config with a sliding_window"):
            module.RollingKVCache(tiny(), batch=1)


# ---- chapter 8's experiment: what it measures ------------------------------------------------------------
def test_loss_per_position_is_the_mean_cross_entropy_at_each_position_past_n_ctx():
    from lib.positions_experiment import eval_windows, loss_per_position
    val = np.random.default_rng(7).integers(0, 97, 500)
    windows = eval_windows(val, span=24, n=3)                 # (3, 25): 24 inputs and their next ids
    assert windows.shape == (3, 25) and windows[0, 0] == val[0] and windows[-1, -1] == val[-1]
    model = tt.GPT(tiny(position="alibi"))                   # n_ctx 16: positions 16 .. 23 extrapolate
    losses = loss_per_position(model, windows, 24)
    logits = model.forward(torch.as_tensor(windows[:, :24]), extrapolate=True)   # (3, 24, V)
    picked = torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(windows[:, 1:, None]))  # (3, 24, 1)
    np.testing.assert_allclose(losses, -picked[..., 0].mean(0).detach().numpy(), rtol=1e-5)
