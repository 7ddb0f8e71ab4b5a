"""Beyond GPT-2 (chapter 8): RMSNorm, RoPE, SwiGLU, GQA/MQA and bias=False as GPTConfig options.

Checked: both twins against each other, numpy's hand-written gradients against torch autograd,
both twins against transformers' LlamaForCausalLM (an independent implementation of the same
block), the KV-cache path, parameter and cache sizes by formula, and bad configurations.

Tolerances are those of tests/test_model.py, for the same reasons: logits max abs difference
<= 1e-4 in float32 (measured rounding differences are ~1e-6 at these sizes); gradients per
tensor ||g_numpy - g_torch|| / ||g_torch|| <= 1e-4 in float32, <= 1e-8 in float64.
"""
import numpy as np
import pytest
import torch

import lib
from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig, param_counts, param_shapes
from lib.numpy_twin import modern as nm
from lib.torch_twin import modern as tm

LOGIT_ATOL = 1e-4

MODERN = dict(norm="rmsnorm", position="rope", mlp="swiglu", n_kv_head=2, bias=False)
OPTIONS = {   # each option alone, then all of them together (LLaMA's block)
    "rmsnorm": dict(norm="rmsnorm"), "rope": dict(position="rope"), "swiglu": dict(mlp="swiglu"),
    "gqa": dict(n_kv_head=2), "mqa": dict(n_kv_head=1), "no_bias": dict(bias=False),
    "mlp_hidden": dict(mlp_hidden=40), "llama": MODERN,
    "sinusoidal": dict(position="sinusoidal"), "alibi": dict(position="alibi"),   # tests/test_positions.py has more
}


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=97, n_ctx=16, n_layer=2, n_head=4, n_embd=32), **kw})


def logits_torch(model, idx, **kw):
    with torch.no_grad():
        return model(torch.as_tensor(idx), **kw).numpy()


# ---- configuration -----------------------------------------------------------------------------
def test_defaults_are_gpt2_and_old_dicts_still_load():
    old = dict(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, n_embd=768, activation="gelu",
               layer_norm_eps=1e-5)                          # a config.json written before these fields
    cfg = GPTConfig.from_dict(old)
    assert cfg == GPTConfig.gpt2()
    assert (cfg.norm, cfg.position, cfg.mlp, cfg.kv_heads, cfg.hidden_dim, cfg.bias) == \
        ("layernorm", "learned", "mlp", 12, 3072, True)
    modern = tiny(**MODERN, mlp_hidden=88, rope_base=500.0)
    assert GPTConfig.from_dict(modern.to_dict()) == modern


def test_bad_configs_raise_clear_errors():
    with pytest.raises(ValueError, match="n_head=4 is not divisible by n_kv_head=3"):
        tiny(n_kv_head=3)
    with pytest.raises(ValueError, match="n_head=4 is not divisible by n_kv_head=8"):
        tiny(n_kv_head=8)
    with pytest.raises(ValueError, match=r"position='rope' needs an even head size.*36 / 12 = 3"):
        tiny(n_embd=36, n_head=12, position="rope")
    tiny(n_embd=36, n_head=12)                               # odd head sizes are fine without RoPE
    with pytest.raises(ValueError, match=r"norm='batchnorm'; expected one of \('layernorm', 'rmsnorm'\)"):
        tiny(norm="batchnorm")
    with pytest.raises(ValueError, match=r"position='t5'; expected one of"):
        tiny(position="t5")
    with pytest.raises(ValueError, match=r"mlp='geglu'; expected one of \('mlp', 'swiglu'\)"):
        tiny(mlp="geglu")
    with pytest.raises(ValueError, match="n_kv_head must be a positive integer, got 0"):
        tiny(n_kv_head=0)
    with pytest.raises(ValueError, match="mlp_hidden must be a positive integer, got 2.5"):
        tiny(mlp_hidden=2.5)
    with pytest.raises(ValueError, match="rope_base must be > 1, got 0"):
        tiny(rope_base=0)
    with pytest.raises(ValueError, match="bias must be True or False, got 'no'"):
        tiny(bias="no")


def test_hidden_dim_defaults():
    assert tiny().hidden_dim == 4 * 32
    assert tiny(mlp="swiglu").hidden_dim == 128            # 8/3 * 32 = 85.3, up to a multiple of 64
    assert GPTConfig.small(mlp="swiglu").hidden_dim == 384  # 8/3 * 128 = 341.3 -> 384
    assert tiny(mlp="swiglu", mlp_hidden=85).hidden_dim == 85


# ---- sizes by formula ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", OPTIONS)
def test_parameters_match_formula_shapes_and_both_twins(name):
    cfg = tiny(**OPTIONS[name])
    expected = param_counts(cfg)["total"]
    assert sum(int(np.prod(s)) for s in param_shapes(cfg).values()) == expected
    numpy_model, torch_model = nt.GPT(cfg), tt.GPT(cfg)
    assert numpy_model.num_params() == torch_model.num_params() == expected
    names = list(param_shapes(cfg))
    assert [n for n, _ in numpy_model.named_parameters()] == [n for n, _ in torch_model.named_parameters()] == names
    for (n, p), (_, q) in zip(numpy_model.named_parameters(), torch_model.named_parameters()):
        assert p.shape == tuple(q.shape) == param_shapes(cfg)[n]
        np.testing.assert_array_equal(p, q.detach().numpy(), err_msg=n)   # same seed, same weights


def test_what_each_option_removes_or_adds():
    C, H, D = 32, 4, 8
    base = set(param_shapes(tiny()))
    assert "wpe.weight" in base
    assert not [p for p in ("rope", "sinusoidal", "alibi") if "wpe.weight" in param_shapes(tiny(position=p))]
    assert {n for n in base if "ln" in n and n.endswith("bias")} - set(param_shapes(tiny(norm="rmsnorm"))) == \
        {n for n in base if "ln" in n and n.endswith("bias")}
    assert not [n for n in param_shapes(tiny(bias=False)) if n.endswith("bias") and "ln" not in n]
    assert param_shapes(tiny(n_kv_head=1))["h.0.attn.c_attn.weight"] == ((H + 2) * D, C)   # C queries, 1 k, 1 v head
    assert param_shapes(tiny(mlp="swiglu", mlp_hidden=40))["h.1.mlp.c_gate.weight"] == (40, C)


def test_llama_7b_parameter_count():
    """LLaMA-7B's shape: 32 layers, 4,096 wide, 32 heads, SwiGLU 11,008, vocab 32,000, untied head."""
    cfg = GPTConfig(vocab_size=32000, n_ctx=2048, n_layer=32, n_head=32, n_embd=4096, norm="rmsnorm",
                    position="rope", mlp="swiglu", mlp_hidden=11008, bias=False)
    counts = param_counts(cfg)
    assert counts["per_block"] == 4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096 == 202_383_360
    assert counts["total if untied"] == 6_738_415_616


def test_kv_cache_bytes_with_shared_heads():
    gpt2 = GPTConfig.gpt2()
    assert lib.kv_cache_bytes(gpt2, 1) == 18_432 * 4                          # MHA, unchanged
    assert lib.kv_cache_bytes(GPTConfig.gpt2(n_kv_head=4), 1) == 18_432 * 4 // 3  # GQA: 12 / 4 = 3 times less
    assert lib.kv_cache_bytes(GPTConfig.gpt2(n_kv_head=1), 1024) == 2 * 12 * 64 * 1024 * 4  # MQA: one head
    for twin in (nt, tt):
        cache = twin.KVCache(tiny(n_kv_head=2), batch=3)
        assert tuple(cache.k[0].shape) == tuple(cache.v[1].shape) == (3, 2, 16, 8)


# ---- the twins agree --------------------------------------------------------------------------
@pytest.mark.parametrize("name", OPTIONS)
def test_twins_same_logits(name):
    cfg = tiny(**OPTIONS[name])
    idx = np.random.default_rng(1).integers(0, cfg.vocab_size, (3, cfg.n_ctx))
    a = nt.GPT(cfg).forward(idx)
    assert np.abs(a - logits_torch(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL


def test_attention_and_hidden_with_gqa_and_rope():
    cfg = tiny(**MODERN)
    idx = np.random.default_rng(2).integers(0, cfg.vocab_size, (2, 10))
    logits, hidden, atts = nt.GPT(cfg).forward_outputs(idx, return_attention=True)
    with torch.no_grad():
        logits_t, hidden_t, atts_t = tt.GPT(cfg).forward_outputs(torch.as_tensor(idx), return_attention=True)
    assert atts[0].shape == tuple(atts_t[0].shape) == (2, 4, 10, 10)           # one map per query head
    np.testing.assert_allclose(atts[1].sum(-1), 1.0, atol=1e-5)
    for a, b in zip(atts, atts_t):
        assert np.abs(a - b.numpy()).max() <= 1e-5
    assert np.abs(hidden - hidden_t.numpy()).max() <= LOGIT_ATOL
    assert np.abs(logits_t.numpy() - logits_torch(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL  # explicit == SDPA


def grads_both(cfg, dtype, idx):
    """numpy's hand-written gradients and torch autograd's, for loss = sum(logits * G)."""
    numpy_model = nt.GPT(cfg).astype(dtype)
    torch_model = tt.GPT(cfg).to(torch.float64 if dtype == np.float64 else torch.float32)
    logits = numpy_model.forward(idx)
    G = np.random.default_rng(5).standard_normal(logits.shape).astype(dtype)
    numpy_model.zero_grad()
    numpy_model.backward(G)
    (torch_model(torch.as_tensor(idx)) * torch.as_tensor(G)).sum().backward()
    return numpy_model.grads, {n: p.grad.numpy() for n, p in torch_model.named_parameters()}


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-8)])
@pytest.mark.parametrize("name", OPTIONS)
def test_numpy_gradients_match_torch_autograd(name, dtype, tol):
    cfg = tiny(**OPTIONS[name])
    idx = np.random.default_rng(6).integers(0, cfg.vocab_size, (4, cfg.n_ctx))
    g_numpy, g_torch = grads_both(cfg, dtype, idx)
    assert list(g_numpy) == list(g_torch) == list(param_shapes(cfg))
    for n in g_torch:
        rel = np.linalg.norm(g_numpy[n] - g_torch[n]) / np.linalg.norm(g_torch[n])
        assert rel <= tol, f"{n}: relative gradient error {rel:.2e} > {tol}"


# ---- against transformers' LLaMA ---------------------------------------------------------------------
def llama_state(hf, cfg):
    """transformers' LlamaForCausalLM weights under the course's names: q, k, v fused into c_attn
    (rows: queries, then keys, then values, as our split reads them); gate/up/down -> c_gate/c_fc/c_proj."""
    sd = {k.removeprefix("model."): v.detach().numpy() for k, v in hf.state_dict().items()}
    state = {"wte.weight": sd["embed_tokens.weight"], "ln_f.weight": sd["norm.weight"]}
    for i in range(cfg.n_layer):
        p = f"layers.{i}."
        state.update({
            f"h.{i}.ln_1.weight": sd[p + "input_layernorm.weight"],
            f"h.{i}.attn.c_attn.weight": np.concatenate([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]),
            f"h.{i}.attn.c_proj.weight": sd[p + "self_attn.o_proj.weight"],
            f"h.{i}.ln_2.weight": sd[p + "post_attention_layernorm.weight"],
            f"h.{i}.mlp.c_gate.weight": sd[p + "mlp.gate_proj.weight"],
            f"h.{i}.mlp.c_fc.weight": sd[p + "mlp.up_proj.weight"],
            f"h.{i}.mlp.c_proj.weight": sd[p + "mlp.down_proj.weight"],
        })
    return state


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_both_twins_match_transformers_llama(n_kv_head):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = tiny(n_ctx=32, mlp_hidden=72, rope_base=500.0, **{**MODERN, "n_kv_head": n_kv_head})
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, intermediate_size=cfg.hidden_dim,
        num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head, num_key_value_heads=n_kv_head,
        max_position_embeddings=cfg.n_ctx, rms_norm_eps=cfg.layer_norm_eps, rope_theta=cfg.rope_base,
        tie_word_embeddings=True, attention_bias=False, mlp_bias=False)).eval()
    with torch.no_grad():    # gains away from 1, so a norm that ignored its weight would show
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    idx = np.random.default_rng(4).integers(0, cfg.vocab_size, (2, cfg.n_ctx))
    with torch.no_grad():
        expected = hf(torch.as_tensor(idx)).logits.numpy()
    numpy_model, torch_model = nt.GPT(cfg), tt.GPT(cfg)
    numpy_model.load_state_dict(llama_state(hf, cfg))
    torch_model.load_state_dict(llama_state(hf, cfg))
    assert np.abs(numpy_model.forward(idx) - expected).max() <= LOGIT_ATOL
    assert np.abs(logits_torch(torch_model, idx) - expected).max() <= LOGIT_ATOL


# ---- RoPE ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_rope_scores_depend_only_on_the_offset(twin):
    """q turned to position m, k to position n: q_m . k_n is the same for every (m, n) with the
    same m - n, and changes with m - n. float64, so 1e-10 is rounding only."""
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((1, 1, 1, 16)), rng.standard_normal((1, 1, 1, 16))
    module = nm if twin == "numpy" else tm

    def at(x, position):
        if twin == "numpy":
            return nm.apply_rope(x, *nm.rope_cos_sin(position, 1, 16, 10000.0, np.float64))
        cos, sin = tm.rope_cos_sin(position, 1, 16, 10000.0, torch.float64)
        return module.apply_rope(torch.as_tensor(x), cos, sin).numpy()

    def score(m, n):
        return float((at(q, m) * at(k, n)).sum())
    for offset in (0, 1, 5, 40):
        scores = [score(n + offset, n) for n in (0, 3, 17, 200)]
        np.testing.assert_allclose(scores, scores[0], rtol=0, atol=1e-10)
    assert abs(score(5, 0) - score(6, 0)) > 1e-3
    np.testing.assert_allclose(score(0, 0), float((q * k).sum()), atol=1e-12)   # position 0: no turn


def test_rope_keeps_lengths_and_backward_is_the_transpose():
    rng = np.random.default_rng(8)
    x, dy = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 5, 8))
    cos, sin = nm.rope_cos_sin(4, 5, 8, 10000.0, np.float64)
    y = nm.apply_rope(x, cos, sin)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    np.testing.assert_allclose((dy * y).sum(), (nm.apply_rope_backward(dy, cos, sin) * x).sum(), rtol=1e-12)


# ---- KV cache and generation --------------------------------------------------------------------------
@pytest.mark.parametrize("twin", ["numpy", "torch"])
@pytest.mark.parametrize("name", ["rope", "gqa", "mqa", "llama"])
def test_kv_cache_forward_equals_full_forward(twin, name):
    """RoPE positions continue from the cache's length; GQA caches G heads, not H."""
    cfg = tiny(**OPTIONS[name])
    idx = np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 12))
    chunks = [(0, 5), (5, 9), (9, 10), (10, 11), (11, 12)]
    if twin == "numpy":
        model, cache = nt.GPT(cfg), nt.KVCache(cfg, batch=2)
        full = model.forward(idx)
        parts = [model.forward(idx[:, a:b], kv_cache=cache) for a, b in chunks]
    else:
        model, cache = tt.GPT(cfg), tt.KVCache(cfg, batch=2)
        full = logits_torch(model, idx)
        parts = [logits_torch(model, idx[:, a:b], kv_cache=cache) for a, b in chunks]
    assert cache.length == 12 and tuple(cache.k[0].shape) == (2, cfg.kv_heads, cfg.n_ctx, cfg.head_dim)
    assert np.abs(np.concatenate(parts, axis=1) - full).max() <= LOGIT_ATOL


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_greedy_generation_same_with_and_without_cache(twin):
    """Past n_ctx the cached stream refills; the tokens must not change either way."""
    cfg = tiny(**MODERN)
    prompt = np.random.default_rng(9).integers(0, cfg.vocab_size, (2, 5))
    model = (nt if twin == "numpy" else tt).GPT(cfg, seed=2)
    if twin == "torch":
        prompt = torch.as_tensor(prompt)
    cached = model.generate(prompt, 20, temperature=0)
    plain = model.generate(prompt, 20, temperature=0, use_cache=False)
    assert tuple(cached.shape) == (2, 25)
    np.testing.assert_array_equal(np.asarray(cached), np.asarray(plain))


# ---- equivalences ----------------------------------------------------------------------------------------
def test_n_kv_head_equal_to_n_head_is_plain_attention():
    idx = np.random.default_rng(10).integers(0, 97, (2, 16))
    np.testing.assert_array_equal(nt.GPT(tiny(n_kv_head=4)).forward(idx), nt.GPT(tiny()).forward(idx))


def test_gqa_is_mha_with_repeated_key_value_heads():
    """A GQA model equals an MHA model whose k and v weight rows are each group's, repeated."""
    gqa, mha = nt.GPT(tiny(n_kv_head=2)), nt.GPT(tiny())
    state = gqa.state_dict()
    wide = dict(state)
    for i in range(2):
        for kind in ("weight", "bias"):
            w = state[f"h.{i}.attn.c_attn.{kind}"]
            q, k, v = np.split(w, [32, 32 + 16])                     # 4 query heads, 2 k heads, 2 v heads of 8
            rep = [np.repeat(x.reshape(2, 8, *x.shape[1:]), 2, axis=0).reshape(32, *x.shape[1:]) for x in (k, v)]
            wide[f"h.{i}.attn.c_attn.{kind}"] = np.concatenate([q, *rep])
    mha.load_state_dict(wide)
    idx = np.random.default_rng(11).integers(0, 97, (2, 16))
    assert np.abs(gqa.forward(idx) - mha.forward(idx)).max() <= 1e-5


# ---- files ------------------------------------------------------------------------------------------------
def test_checkpoints_of_modern_configs_between_twins(tmp_path):
    cfg = tiny(**MODERN)
    idx = np.random.default_rng(12).integers(0, cfg.vocab_size, (2, 8))
    nt.GPT(cfg, seed=5).save(tmp_path / "a")
    torch_model = tt.GPT.load(tmp_path / "a")
    assert torch_model.config == cfg
    assert np.abs(logits_torch(torch_model, idx) - nt.GPT(cfg, seed=5).forward(idx)).max() <= LOGIT_ATOL


def test_no_gpt2_file_for_a_modern_config(tmp_path):
    from lib.weights import save_hf_gpt2
    cfg = tiny(position="rope")
    with pytest.raises(ValueError, match="needs GPT-2's architecture.*'position': 'rope'"):
        save_hf_gpt2(tmp_path, cfg, nt.GPT(cfg).state_dict())
    assert not any(tmp_path.iterdir())
