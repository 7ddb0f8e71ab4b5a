"""The two twins against each other, against transformers' GPT-2 and against torch autograd.

Tolerances (float32 on the CPU):
- logits: max abs difference <= 1e-4. Both twins do the same float32 arithmetic in a different
  order (BLAS blocking, fused kernels); over 12 blocks the rounding differences we measure are
  about 4e-6, so 1e-4 leaves room for other BLAS builds while still catching any real bug
  (a wrong constant or a missing bias moves logits by >= 1e-2).
- gradients: per tensor ||g_numpy - g_torch|| / ||g_torch|| <= 1e-4 in float32 (rounding of
  sums over B*T positions), <= 1e-8 in float64 (where the two should agree to ~1e-13).
"""
import importlib
import inspect
import json
import pkgutil

import numpy as np
import pytest
import torch

import lib
from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import CHOICES, GPTConfig, param_counts, param_shapes
from lib.numpy_twin.model import gelu_backward, relu_backward

LOGIT_ATOL = 1e-4


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=97, n_ctx=16, n_layer=2, n_head=4, n_embd=32), **kw})


def logits_torch(model, idx):
    with torch.no_grad():
        return model(torch.as_tensor(idx)).numpy()


@pytest.fixture(scope="module")
def gpt2_pair():
    cfg = GPTConfig.gpt2()
    return nt.GPT(cfg, seed=1), tt.GPT(cfg, seed=1)


# ---- parameter counts --------------------------------------------------------------------------
def test_gpt2_parameter_count_is_124_439_808(gpt2_pair):
    counts = param_counts(GPTConfig.gpt2())
    assert counts["total"] == 124_439_808
    assert counts["wte"] == 38_597_376 and counts["wpe"] == 786_432
    assert counts["per_block"] == 7_087_872 and counts["ln_f"] == 1_536
    assert counts["total if untied"] == 163_037_184
    numpy_model, torch_model = gpt2_pair
    assert numpy_model.num_params() == torch_model.num_params() == 124_439_808


def test_gpt2_medium_parameter_count():
    assert param_counts(GPTConfig.gpt2_medium())["total"] == 354_823_168


@pytest.mark.parametrize("cfg", [GPTConfig.small(), tiny(activation="relu"), tiny(n_layer=3, n_embd=48, n_head=3)])
def test_num_params_matches_formula_and_shapes(cfg):
    expected = param_counts(cfg)["total"]
    assert nt.GPT(cfg).num_params() == tt.GPT(cfg).num_params() == expected
    assert sum(int(np.prod(s)) for s in param_shapes(cfg).values()) == expected


# ---- the twins mirror each other ---------------------------------------------------------------
# Exported by one twin only, and why: chapter 10 writes FlashAttention's tiles and online softmax
# in numpy to show the idea; the torch twin's model already calls the fused kernel of the same
# idea, F.scaled_dot_product_attention, so a torch copy would only wrap that call.
NUMPY_ONLY_EXPORTS = ["flash_attention"]


def test_twins_export_the_same_names():
    assert [n for n in nt.__all__ if n not in NUMPY_ONLY_EXPORTS] == tt.__all__
    assert not set(NUMPY_ONLY_EXPORTS) & set(dir(tt))
    numpy_names = [n for n, _ in nt.GPT(tiny()).named_parameters()]
    torch_names = [n for n, _ in tt.GPT(tiny()).named_parameters()]
    assert numpy_names == torch_names == list(param_shapes(tiny()))


# What only one twin has, and why. numpy writes every backward pass (`backward`, `*_backward`;
# torch: autograd), keeps the
# gradients and dropout's generator on the model (torch: each parameter's .grad, torch's
# generator) and builds a model in a dtype (torch: .to()); torch places tensors on a device and
# chooses how often generation reads it.
ONE_SIDED = {
    "numpy": {"backward", "grads", "seed_dropout", "Dropout.__init__(seed)", "GPT.__init__(dtype)"},
    "torch": {"KVCache.__init__(device)", "RollingKVCache.__init__(device)", "CausalSelfAttention.score_bias(device)",
              "ModernAttention.score_bias(device)", "Stream.__init__(sample_on_device)", "Stream.__init__(check_every)"},
}


def own_methods(cls):
    """{name: parameter names} of the methods, properties and __init__ a class defines itself."""
    methods = {}
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if getattr(function, "hooked", False):
            continue    # torch.optim wraps an inherited step() on the class at its first instance
        if callable(function):
            names = list(inspect.signature(function).parameters)
            methods[name] = names if isinstance(member, staticmethod) else names[1:]   # no self, cls
    return methods


def mirror_drifts(numpy_cls, torch_cls):
    """What one twin's class has that the other's lacks: a method, or a parameter of a method.
    A method one class inherits from torch (nn.Module, torch.optim.Optimizer) counts as had."""
    a, b = own_methods(numpy_cls), own_methods(torch_cls)
    drifts = []
    for name in sorted(set(a) | set(b)):
        for twin, mine, other, other_cls in (("numpy", a, b, torch_cls), ("torch", b, a, numpy_cls)):
            if name in mine and name not in other and not hasattr(other_cls, name) \
                    and name not in ONE_SIDED[twin] and not (twin == "numpy" and name.endswith("backward")):
                drifts.append(f"{twin} only: {numpy_cls.__name__}.{name}")
        if name in a and name in b:
            for twin, mine, other in (("numpy", a, b), ("torch", b, a)):
                drifts += [f"{twin} only: {numpy_cls.__name__}.{name}({p})" for p in mine[name]
                           if p not in other[name] and f"{numpy_cls.__name__}.{name}({p})" not in ONE_SIDED[twin]]
            if [p for p in a[name] if p in b[name]] != [p for p in b[name] if p in a[name]]:
                drifts.append(f"order: {numpy_cls.__name__}.{name} {a[name]} vs {b[name]}")
    return drifts


def test_twins_classes_define_the_same_methods_with_the_same_parameters():
    """Every module both twins have; in it, every class both define (torch's classes taken from
    torch itself, such as Linear = nn.Linear, stand for their own numpy twins)."""
    modules = sorted({m.name for m in pkgutil.iter_modules(nt.__path__)}
                     & {m.name for m in pkgutil.iter_modules(tt.__path__)})
    assert {"model", "modern", "generate", "train", "finetune"} <= set(modules)
    drifts, compared = [], 0
    for module in modules:
        a, b = (importlib.import_module(f"{twin.__name__}.{module}") for twin in (nt, tt))
        for name, numpy_cls in vars(a).items():
            torch_cls = getattr(b, name, None)
            if inspect.isclass(numpy_cls) and numpy_cls.__module__ == a.__name__ \
                    and inspect.isclass(torch_cls) and torch_cls.__module__ == b.__name__:
                drifts += [f"{module}: {d}" for d in mirror_drifts(numpy_cls, torch_cls)]
                compared += 1
    assert compared >= 10
    assert not drifts, "the twins drift apart:\n" + "\n".join(drifts)


def test_same_seed_same_weights_and_init_scale():
    cfg = tiny(n_layer=4)
    a, b = nt.GPT(cfg, seed=3), tt.GPT(cfg, seed=3)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p, q.detach().numpy(), err_msg=name)
    assert not np.array_equal(a.wte.weight, nt.GPT(cfg, seed=4).wte.weight)
    big = nt.GPT(GPTConfig.small(n_layer=8), seed=0)
    assert abs(big.wte.weight.std() - 0.02) < 1e-3
    assert abs(big.h[0].attn.c_proj.weight.std() - 0.02 / np.sqrt(16)) < 1e-3   # 1/sqrt(2 n_layer)
    assert abs(big.h[0].mlp.c_fc.weight.std() - 0.02) < 1e-3


# ---- logits ------------------------------------------------------------------------------------------
def test_twins_same_logits_at_124m(gpt2_pair):
    numpy_model, torch_model = gpt2_pair
    idx = np.random.default_rng(0).integers(0, 50257, (2, 64))
    a, b = numpy_model.forward(idx), logits_torch(torch_model, idx)
    assert a.shape == (2, 64, 50257) and a.dtype == np.float32
    assert np.abs(a - b).max() <= LOGIT_ATOL


@pytest.mark.parametrize("activation", ["gelu", "gelu_exact", "relu"])
def test_twins_same_logits_each_activation(activation):
    cfg = tiny(activation=activation)
    idx = np.random.default_rng(1).integers(0, cfg.vocab_size, (3, cfg.n_ctx))
    assert np.abs(nt.GPT(cfg).forward(idx) - logits_torch(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL


def test_attention_and_hidden_outputs():
    cfg = tiny()
    idx = np.random.default_rng(2).integers(0, cfg.vocab_size, (2, 10))
    logits, hidden, atts = nt.GPT(cfg).forward_outputs(idx, return_attention=True)
    with torch.no_grad():
        logits_t, hidden_t, atts_t = tt.GPT(cfg).forward_outputs(torch.as_tensor(idx), return_attention=True)
    assert len(atts) == len(atts_t) == cfg.n_layer
    assert atts[0].shape == tuple(atts_t[0].shape) == (2, cfg.n_head, 10, 10)
    np.testing.assert_allclose(atts[0].sum(-1), 1.0, atol=1e-5)           # rows are distributions
    assert np.all(np.triu(atts[1][0, 0], k=1) == 0)                       # nothing from the future
    for a, b in zip(atts, atts_t):
        assert np.abs(a - b.numpy()).max() <= 1e-5
    assert np.abs(hidden - hidden_t.numpy()).max() <= LOGIT_ATOL
    assert np.abs(logits_t.numpy() - logits_torch(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL  # explicit path == SDPA
    torch_model = tt.GPT(cfg)
    assert torch_model.forward_outputs(torch.as_tensor(idx)).attentions is None
    assert nt.GPT(cfg).forward_outputs(idx).attentions is None
    assert not any(block.attn.keep_attention for block in torch_model.h)   # forward is SDPA's again


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_kv_cache_forward_equals_full_forward(twin):
    cfg = tiny()
    idx = np.random.default_rng(3).integers(0, cfg.vocab_size, (2, 12))
    if twin == "numpy":
        model = nt.GPT(cfg)
        full = model.forward(idx)
        cache = nt.KVCache(cfg, batch=2)
        parts = [model.forward(idx[:, :5], kv_cache=cache), model.forward(idx[:, 5:9], kv_cache=cache)]
        parts += [model.forward(idx[:, t:t + 1], kv_cache=cache) for t in range(9, 12)]
    else:
        model = tt.GPT(cfg)
        full = logits_torch(model, idx)
        cache, x = tt.KVCache(cfg, batch=2), torch.as_tensor(idx)
        with torch.no_grad():
            parts = [model(x[:, :5], kv_cache=cache), model(x[:, 5:9], kv_cache=cache)]
            parts += [model(x[:, t:t + 1], kv_cache=cache) for t in range(9, 12)]
        parts = [p.numpy() for p in parts]
    assert cache.length == 12
    assert np.abs(np.concatenate(parts, axis=1) - full).max() <= LOGIT_ATOL


# ---- against transformers' GPT-2 -----------------------------------------------------------------
def hf_model(cfg: GPTConfig, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    hf_cfg = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.n_ctx, n_embd=cfg.n_embd,
                        n_layer=cfg.n_layer, n_head=cfg.n_head, activation_function="gelu_new",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hf_cfg).eval()
    with torch.no_grad():   # non-zero biases and LayerNorm params, so a dropped one would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.05 * torch.randn_like(p))
    return model


def as_published_layout(folder, n_layer):
    """Re-key a save_pretrained file the way the published GPT-2 file is keyed: no
    `transformer.` prefix, no lm_head, plus the causal-mask buffers h.N.attn.bias/masked_bias."""
    from safetensors.numpy import load_file, save_file
    state = load_file(str(folder / "model.safetensors"))
    n_ctx = json.loads((folder / "config.json").read_text())["n_positions"]
    out = {k.removeprefix("transformer."): v for k, v in state.items() if k != "lm_head.weight"}
    for i in range(n_layer):
        out[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, n_ctx, n_ctx), np.float32))
        out[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    save_file(out, str(folder / "model.safetensors"))
    return out


@pytest.mark.parametrize("layout", ["save_pretrained", "published"])
@pytest.mark.parametrize("cfg", [tiny(n_ctx=32), GPTConfig.gpt2()], ids=["tiny", "gpt2"])
def test_both_twins_match_transformers(tmp_path, cfg, layout):
    if cfg.n_layer == 12 and layout == "save_pretrained":
        pytest.skip("the full-size model is checked once, in the published layout (the harder one)")
    hf = hf_model(cfg)
    hf.save_pretrained(tmp_path)
    if layout == "published":
        keys = as_published_layout(tmp_path, cfg.n_layer)
        assert "h.0.attn.bias" in keys and "transformer.wte.weight" not in keys
    idx = np.random.default_rng(4).integers(0, cfg.vocab_size, (2, min(64, cfg.n_ctx)))
    with torch.no_grad():
        expected = hf(torch.as_tensor(idx)).logits.numpy()
    numpy_model, torch_model = nt.GPT.from_pretrained(tmp_path), tt.GPT.from_pretrained(tmp_path)
    assert numpy_model.config == torch_model.config == cfg
    assert np.abs(numpy_model.forward(idx) - expected).max() <= LOGIT_ATOL
    assert np.abs(logits_torch(torch_model, idx) - expected).max() <= LOGIT_ATOL


# ---- gradients -----------------------------------------------------------------------------------------
def grads_both(cfg, dtype, idx, seed=0):
    """numpy's hand-written gradients and torch autograd's, for loss = sum(logits * G)."""
    numpy_model = nt.GPT(cfg, seed=seed).astype(dtype)
    torch_model = tt.GPT(cfg, seed=seed).to(torch.float64 if dtype == np.float64 else torch.float32)
    logits = numpy_model.forward(idx)
    G = np.random.default_rng(5).standard_normal(logits.shape).astype(dtype)
    numpy_model.zero_grad()
    numpy_model.backward(G)
    (torch_model(torch.as_tensor(idx)) * torch.as_tensor(G)).sum().backward()
    return numpy_model, numpy_model.grads, {n: p.grad.numpy() for n, p in torch_model.named_parameters()}


# ReLU is checked in float64 only: at its kink a float32 pre-activation within rounding of 0
# can land on either side in the two twins, which changes that unit's gradient outright.
@pytest.mark.parametrize("activation,dtype,tol", [("gelu", np.float32, 1e-4), ("gelu", np.float64, 1e-8),
                                                  ("gelu_exact", np.float32, 1e-4), ("relu", np.float64, 1e-8)])
def test_numpy_gradients_match_torch_autograd(activation, dtype, tol):
    cfg = GPTConfig.small(activation=activation)
    idx = np.random.default_rng(6).integers(0, cfg.vocab_size, (4, cfg.n_ctx))
    _, g_numpy, g_torch = grads_both(cfg, dtype, idx)
    assert list(g_numpy) == list(g_torch)
    for name in g_torch:
        rel = np.linalg.norm(g_numpy[name] - g_torch[name]) / np.linalg.norm(g_torch[name])
        assert rel <= tol, f"{name}: relative gradient error {rel:.2e} > {tol}"


def test_gelu_exact_gradients_float64():
    cfg = tiny(activation="gelu_exact")
    idx = np.random.default_rng(7).integers(0, cfg.vocab_size, (2, cfg.n_ctx))
    _, g_numpy, g_torch = grads_both(cfg, np.float64, idx)
    for name in g_torch:
        assert np.linalg.norm(g_numpy[name] - g_torch[name]) <= 1e-8 * np.linalg.norm(g_torch[name]), name


def test_gelu_and_its_derivative_match_torch():
    """The tanh GELU against torch's own (F.gelu, approximate="tanh") and its autograd derivative;
    float32 stays float32."""
    xs = np.linspace(-8, 8, 1601)                            # (1601,)
    xt = torch.tensor(xs, requires_grad=True)
    torch.nn.functional.gelu(xt, approximate="tanh").sum().backward()
    np.testing.assert_allclose(nt.gelu(xs), torch.nn.functional.gelu(xt, approximate="tanh").detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gelu_backward(np.ones_like(xs), xs), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    x32 = xs.astype(np.float32)
    assert nt.gelu(x32).dtype == gelu_backward(np.ones_like(x32), x32).dtype == np.float32


def test_mlp_uses_whatever_activation_pair_it_holds():
    """Exercise 4.1 plugs a GELU in through `act(h)` and `act_backward(dy, h)`: the MLP calls the
    pair it holds, once each, whatever functions they are."""
    model = nt.GPT(tiny(), seed=0)
    model.zero_grad()
    mlp = model.h[0].mlp                                     # initialised weights
    x = np.random.default_rng(3).standard_normal((2, 5, 32)).astype(np.float32)   # (B, T, C)
    dout = np.random.default_rng(4).standard_normal((2, 5, 32)).astype(np.float32)
    out, cache = mlp.forward(x)
    dx = mlp.backward(dout, cache)
    calls = []
    mlp.act = lambda h: calls.append("act") or nt.gelu(h)
    mlp.act_backward = lambda dy, h: calls.append("act_backward") or gelu_backward(dy, h)
    out_wrapped, cache = mlp.forward(x)
    np.testing.assert_array_equal(out_wrapped, out)
    np.testing.assert_array_equal(mlp.backward(dout, cache), dx)
    assert calls == ["act", "act_backward"]
    mlp.act, mlp.act_backward = nt.relu, relu_backward       # another pair: another result
    assert not np.allclose(mlp.forward(x)[0], out)


def test_finite_differences_float64():
    """Central differences on a few entries of several tensors, float64; the step 1e-5 makes the
    truncation error ~1e-10 relative, and we ask for 1e-6."""
    cfg = tiny()
    idx = np.random.default_rng(8).integers(0, cfg.vocab_size, (2, 8))
    model, grads, _ = grads_both(cfg, np.float64, idx)
    G = np.random.default_rng(5).standard_normal((2, 8, cfg.vocab_size))
    params = dict(model.named_parameters())
    rng = np.random.default_rng(9)
    for name in ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight",
                 "h.1.attn.c_proj.bias", "h.1.mlp.c_fc.weight", "ln_f.bias"]:
        p = params[name]
        for _ in range(3):
            i = tuple(rng.integers(0, s) for s in p.shape)
            if name == "wte.weight":
                i = (int(idx[0, 0]),) + i[1:]      # a row that is used as input as well
            old = p[i]
            p[i] = old + 1e-5
            up = (model.forward(idx) * G).sum()
            p[i] = old - 1e-5
            down = (model.forward(idx) * G).sum()
            p[i] = old
            numeric = (up - down) / 2e-5
            assert abs(numeric - grads[name][i]) <= 1e-6 * max(1.0, abs(numeric)), (name, i)


def test_backward_accumulates_and_zero_grad_clears():
    cfg = tiny()
    model = nt.GPT(cfg).astype(np.float64)
    idx = np.random.default_rng(10).integers(0, cfg.vocab_size, (1, 8))
    model.zero_grad()
    model.backward(np.ones_like(model.forward(idx)))
    once = {k: v.copy() for k, v in model.grads.items()}
    model.backward(np.ones_like(model.forward(idx)))
    np.testing.assert_allclose(model.grads["h.0.mlp.c_fc.weight"], 2 * once["h.0.mlp.c_fc.weight"])
    model.zero_grad()
    assert all(not g.any() for g in model.grads.values())
    with pytest.raises(RuntimeError, match="forward"):
        model.backward(np.ones((1, 8, cfg.vocab_size)))


# ---- files -------------------------------------------------------------------------------------------------
def test_checkpoints_interchangeable_between_twins(tmp_path):
    cfg = tiny()
    idx = np.random.default_rng(11).integers(0, cfg.vocab_size, (2, 8))
    nt.GPT(cfg, seed=5).save(tmp_path / "a")
    torch_model = tt.GPT.load(tmp_path / "a")
    torch_model.save(tmp_path / "b")
    numpy_model = nt.GPT.load(tmp_path / "b")
    np.testing.assert_array_equal(numpy_model.forward(idx), nt.GPT(cfg, seed=5).forward(idx))
    assert np.abs(logits_torch(torch_model, idx) - numpy_model.forward(idx)).max() <= LOGIT_ATOL


def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    cfg = tiny()
    nt.GPT(cfg, seed=1).save(tmp_path / "ckpt")
    import safetensors.numpy

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(safetensors.numpy, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        nt.GPT(cfg, seed=2).save(tmp_path / "ckpt")
    monkeypatch.undo()
    np.testing.assert_array_equal(nt.GPT.load(tmp_path / "ckpt").wte.weight, nt.GPT(cfg, seed=1).wte.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]        # no temporary left behind


# ---- bad input ---------------------------------------------------------------------------------------------
TWINS = {"numpy": nt, "torch": tt}


@pytest.mark.parametrize("twin", TWINS)
def test_missing_files(tmp_path, twin):
    with pytest.raises(FileNotFoundError, match="config.json"):
        TWINS[twin].GPT.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        TWINS[twin].GPT.load(tmp_path)


@pytest.fixture
def saved_hf(tmp_path):
    cfg = tiny()
    hf_model(cfg).save_pretrained(tmp_path)
    return tmp_path, cfg


def rewrite(folder, edit):
    from safetensors.numpy import load_file, save_file
    state = load_file(str(folder / "model.safetensors"))
    edit(state)
    save_file(state, str(folder / "model.safetensors"))


@pytest.mark.parametrize("twin", TWINS)
def test_missing_unexpected_and_misshapen_tensors(saved_hf, twin):
    folder, cfg = saved_hf
    GPT = TWINS[twin].GPT
    rewrite(folder, lambda s: s.pop("transformer.h.1.mlp.c_fc.bias"))
    with pytest.raises(ValueError, match=r"missing tensors \['h.1.mlp.c_fc.bias'\]"):
        GPT.from_pretrained(folder)
    rewrite(folder, lambda s: s.update({"transformer.h.1.mlp.c_fc.bias": np.zeros(4 * cfg.n_embd, np.float32),
                                        "transformer.h.9.extra": np.zeros(3, np.float32)}))
    with pytest.raises(ValueError, match=r"unexpected tensors \['h.9.extra'\]"):
        GPT.from_pretrained(folder)
    rewrite(folder, lambda s: (s.pop("transformer.h.9.extra"),
                               s.update({"transformer.wpe.weight": np.zeros((8, cfg.n_embd), np.float32)})))
    with pytest.raises(ValueError, match=r"'wpe.weight' has shape \(8, 32\), expected \(16, 32\)"):
        GPT.from_pretrained(folder)


def test_gpt2_layout_is_the_saved_file_without_its_prefix(saved_hf):
    """lib.weights.to_gpt2_layout (the exercises' params) holds what transformers wrote, under the
    names without `transformer.`, in arrays of its own."""
    from safetensors.numpy import load_file

    from lib.weights import to_gpt2_layout
    folder, cfg = saved_hf
    model = nt.GPT.from_pretrained(folder)
    layout = to_gpt2_layout(cfg, model.named_parameters())
    saved = {k.removeprefix("transformer."): v for k, v in load_file(str(folder / "model.safetensors")).items()
             if k != "lm_head.weight"}
    assert sorted(layout) == sorted(saved)
    for name, weight in layout.items():
        assert np.array_equal(weight, saved[name]), name
    params = dict(model.named_parameters())
    assert not any(np.shares_memory(layout[name], params[name]) for name in params)


@pytest.mark.parametrize("twin", TWINS)
def test_bad_token_ids_and_lengths(twin):
    cfg = tiny()
    model = TWINS[twin].GPT(cfg)

    def run(ids):
        ids = np.asarray(ids)
        return model.forward(ids if twin == "numpy" else torch.as_tensor(ids))
    with pytest.raises(ValueError, match=r"n_ctx=16"):
        run(np.zeros((1, 17), np.int64))
    with pytest.raises(ValueError, match=r"\[0, 97\), got min 1 max 97"):
        run([[1, 2, 97]])
    with pytest.raises(ValueError, match=r"got min -1"):
        run([[1, -1, 3]])
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        run([1, 2, 3])
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        run(np.ones((1, 3), np.float32))


# ---- the layer choices: named once (lib.config.CHOICES), a layer for each name in each twin --------------
@pytest.mark.parametrize("field", sorted(CHOICES))
def test_every_layer_choice_has_its_layer_in_both_twins_and_they_agree(field):
    """Each twin's table for the field (its model.py's LAYERS) maps exactly the names CHOICES allows,
    and a config choosing any of them builds in both twins, which give the same logits."""
    for twin in (nt, tt):
        assert sorted(importlib.import_module(f"{twin.__name__}.model").LAYERS[field]) == sorted(CHOICES[field])
    for name in CHOICES[field]:
        cfg = tiny(**{field: name})
        idx = np.random.default_rng(2).integers(0, cfg.vocab_size, (2, cfg.n_ctx))
        assert np.abs(nt.GPT(cfg).forward(idx) - logits_torch(tt.GPT(cfg), idx)).max() <= LOGIT_ATOL, name


def test_every_config_field_with_choices_has_a_table_in_both_twins():
    for twin in (nt, tt):
        assert set(importlib.import_module(f"{twin.__name__}.model").LAYERS) == set(CHOICES)


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_an_unknown_layer_choice_is_refused_in_one_line_naming_the_allowed_ones(field):
    with pytest.raises(ValueError) as error:
        tiny(**{field: "nonesuch"})
    assert str(error.value) == f"GPTConfig.{field}='nonesuch'; expected one of {CHOICES[field]}"


def test_bad_configs():
    with pytest.raises(ValueError, match="n_embd=30 is not divisible by n_head=4"):
        GPTConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="activation='swish'"):
        GPTConfig(activation="swish")
    with pytest.raises(ValueError, match="n_layer must be a positive integer, got 0"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="unknown preset 'gpt3'"):
        GPTConfig.preset("gpt3")


def test_kv_cache_bytes():
    assert lib.kv_cache_bytes(GPTConfig.gpt2(), 1) == 18_432 * 4
    assert lib.kv_cache_bytes(GPTConfig.gpt2(), 1024, "float32") == 75_497_472      # about 75 MB
    assert lib.kv_cache_bytes(GPTConfig.gpt2(), 1024, torch.bfloat16, batch=2) == 75_497_472
    with pytest.raises(ValueError, match="unknown dtype"):
        lib.kv_cache_bytes(GPTConfig.gpt2(), 1, "int3")
