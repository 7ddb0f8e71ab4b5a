"""Dropout in both twins, and evaluating a model's loss over a token array.

The twins are compared on the same masks (lib.dropout.draw_masks / use_masks): the numpy twin's
hand-written backward against torch autograd, in float64, where the two agree to ~1e-13, so the
tolerance 1e-10 catches any missing or misplaced mask (which changes gradients by > 1e-2).
"""
import math

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig, TrainConfig
from lib.dropout import check_dropout, draw_masks, dropout_mask, eval_mode, mask_shapes, use_masks
from lib.numpy_twin.model import Dropout as NumpyDropout
from lib.torch_twin.model import Dropout as TorchDropout
from lib.train import evaluate_loss, train

P = 0.3


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=97, n_ctx=16, n_layer=2, n_head=4, n_embd=32, dropout=P), **kw})


def twins(cfg, seed=1):
    """The numpy and torch models of `cfg`, same weights, in float64."""
    return nt.GPT(cfg, seed=seed).astype(np.float64), tt.GPT(cfg, seed=seed).double()


def relative_errors(numpy_grads, torch_module):
    return {name: np.linalg.norm(numpy_grads[name] - p.grad.numpy()) / np.linalg.norm(p.grad.numpy())
            for name, p in torch_module.named_parameters()}


# ---- settings --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan"), True, "0.1", None])
def test_bad_dropout_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"GPTConfig\.dropout must be a probability in \[0, 1\)"):
        GPTConfig.small(dropout=bad)
    for Dropout in (NumpyDropout, TorchDropout):
        with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got"):
            Dropout(bad)


def test_config_default_is_no_dropout_and_round_trips():
    assert GPTConfig.small().dropout == 0.0 and check_dropout(0.1) == 0.1
    cfg = GPTConfig.small(dropout=0.1)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert GPTConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "dropout"}).dropout == 0.0


# ---- one dropout layer -----------------------------------------------------------------------------------
def test_inverted_scaling_keeps_the_expectation():
    """Kept with probability 1 - p and scaled by 1 / (1 - p): the mean of many values stays 1.
    Over n = 400,000 values the kept fraction's standard deviation is sqrt(p (1 - p) / n) = 7e-4."""
    n = 400_000
    mask = dropout_mask((n,), P, np.random.default_rng(0))
    assert set(np.unique(mask)) == {np.float32(0), np.float32(1 / (1 - P))}
    assert abs((mask > 0).mean() - (1 - P)) < 5 * math.sqrt(P * (1 - P) / n)
    ones = np.ones((n,), np.float32)
    numpy_out, _ = NumpyDropout(P).forward(ones)
    torch_out = TorchDropout(P)(torch.ones(n))
    for out in (numpy_out, torch_out.numpy()):
        assert abs(out.mean() - 1) < 5 * math.sqrt(P / (1 - P) / n)   # the std of the mean of n values


def test_layer_forward_and_backward_are_a_product_with_the_mask():
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    dy = np.random.default_rng(2).standard_normal((2, 3, 4))
    layer = NumpyDropout(P, seed=3)
    y, mask = layer.forward(x)
    np.testing.assert_array_equal(y, x * mask)
    np.testing.assert_array_equal(layer.backward(dy, mask), dy * mask)
    torch_layer, xt = TorchDropout(P), torch.tensor(x, requires_grad=True)
    torch_layer.mask = mask
    (torch_layer(xt) * torch.as_tensor(dy)).sum().backward()
    np.testing.assert_array_equal(xt.grad.numpy(), dy * mask)
    layer.mask = np.ones((3, 3))
    with pytest.raises(ValueError, match=r"mask has shape \(3, 3\), the input \(2, 3, 4\)"):
        layer.forward(x)
    torch_layer.mask = np.ones((3, 3))
    with pytest.raises(ValueError, match=r"mask has shape \(3, 3\), the input \(2, 3, 4\)"):
        torch_layer(xt)


@pytest.mark.parametrize("layer,cfg", [("attn", tiny()), ("mlp", tiny()), ("attn", tiny(n_kv_head=2, position="rope")),
                                       ("mlp", tiny(mlp="swiglu"))], ids=["attn", "mlp", "attn-gqa-rope", "swiglu"])
def test_each_layer_against_autograd_with_the_same_masks(layer, cfg):
    numpy_model, torch_model = twins(cfg)
    a, b = getattr(numpy_model.h[1], layer), getattr(torch_model.h[1], layer)
    B, T, C = 2, 7, cfg.n_embd
    shapes = {name.rpartition(f"h.1.{layer}.")[2]: shape
              for name, shape in mask_shapes(cfg, B, T).items() if name.startswith(f"h.1.{layer}.")}
    rng = np.random.default_rng(4)
    masks = {name: dropout_mask(shape, P, rng, np.float64) for name, shape in shapes.items()}
    x, G = rng.standard_normal((B, T, C)), rng.standard_normal((B, T, C))
    numpy_model.zero_grad()
    with use_masks(a, masks), use_masks(b, masks):
        out, cache = a.forward(x)
        dx = a.backward(G, cache)
        xt = torch.tensor(x, requires_grad=True)
        out_t = b(xt)[0] if layer == "attn" else b(xt)
        (out_t * torch.as_tensor(G)).sum().backward()
    assert all(getattr(a, name).mask is None for name in masks)            # removed on leaving the block
    np.testing.assert_allclose(out, out_t.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=1e-12)
    errors = relative_errors(dict(a.named_grads()), b)
    assert max(errors.values()) < 1e-10, errors
    with use_masks(a, masks):
        assert not np.allclose(a.forward(x)[0], a.eval().forward(x)[0])   # the masks do drop values


# ---- the whole model ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [tiny(), tiny(mlp="swiglu", norm="rmsnorm", position="rope", n_kv_head=1)],
                         ids=["gpt2", "modern"])
def test_whole_model_against_autograd_with_the_same_masks(cfg):
    numpy_model, torch_model = twins(cfg)
    idx = np.random.default_rng(6).integers(0, cfg.vocab_size, (3, cfg.n_ctx))
    masks = draw_masks(cfg, 3, cfg.n_ctx, seed=7, dtype=np.float64)
    assert set(masks) == {"drop"} | {f"h.{i}.{name}" for i in range(cfg.n_layer)
                                     for name in ("attn.attn_dropout", "attn.resid_dropout", "mlp.dropout")}
    with use_masks(numpy_model, masks), use_masks(torch_model, masks):
        logits = numpy_model.forward(idx)
        G = np.random.default_rng(8).standard_normal(logits.shape)
        numpy_model.zero_grad()
        numpy_model.backward(G)
        logits_t = torch_model(torch.as_tensor(idx))
        (logits_t * torch.as_tensor(G)).sum().backward()
    np.testing.assert_allclose(logits, logits_t.detach().numpy(), rtol=0, atol=1e-12)
    errors = relative_errors(numpy_model.grads, torch_model)
    assert max(errors.values()) < 1e-10, errors
    without = numpy_model.eval().forward(idx)
    assert np.abs(logits - without).max() > 1e-2                          # the masks changed the logits


def test_finite_differences_through_dropout_float64():
    """The numpy twin's gradient through every mask against central differences (step 1e-5)."""
    cfg = tiny(n_layer=1)
    model = nt.GPT(cfg, seed=2).astype(np.float64)
    idx = np.random.default_rng(9).integers(0, cfg.vocab_size, (2, 8))
    G = np.random.default_rng(10).standard_normal((2, 8, cfg.vocab_size))
    with use_masks(model, draw_masks(cfg, 2, 8, seed=11, dtype=np.float64)):
        model.zero_grad()
        model.forward(idx)
        model.backward(G)
        params = dict(model.named_parameters())
        for name, i in [("wpe.weight", (3, 5)), ("h.0.attn.c_attn.weight", (40, 7)), ("h.0.mlp.c_proj.bias", (4,))]:
            p, old = params[name], params[name][i]
            p[i] = old + 1e-5
            up = (model.forward(idx) * G).sum()
            p[i] = old - 1e-5
            down = (model.forward(idx) * G).sum()
            p[i] = old
            numeric = (up - down) / 2e-5
            assert abs(numeric - model.grads[name][i]) <= 1e-6 * max(1.0, abs(numeric)), name


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_no_dropout_draws_nothing_and_evaluation_mode_drops_nothing(twin):
    """p = 0 in training mode, and p > 0 in evaluation mode, give the logits of a model without
    dropout exactly, and draw no random number; p > 0 in training mode changes them."""
    idx = np.random.default_rng(12).integers(0, 97, (2, 16))
    module = nt if twin == "numpy" else tt
    plain, dropping = module.GPT(tiny(dropout=0.0), seed=3), module.GPT(tiny(), seed=3)

    def state():                                             # the generators dropout draws from
        if twin == "numpy":
            return str([plain.dropout_rng.bit_generator.state, dropping.dropout_rng.bit_generator.state])
        return torch.get_rng_state().numpy().tobytes()

    def forward(model):
        return model.forward(idx) if twin == "numpy" else model(torch.as_tensor(idx)).detach().numpy()

    assert plain.training and dropping.training                           # as torch: training mode at first
    before = state()
    reference = forward(plain)
    assert state() == before
    with eval_mode(dropping):
        np.testing.assert_array_equal(forward(dropping), reference)
    assert dropping.training and state() == before                         # the mode is restored
    assert np.abs(forward(dropping) - reference).max() > 1e-2 and state() != before
    np.testing.assert_array_equal(forward(dropping.eval()), reference)
    assert not any(m.training for m in dropping.modules())


def test_torch_fused_attention_dropout_keeps_the_expectation():
    """The torch twin's usual path lets scaled_dot_product_attention drop the attention weights:
    the mean over many forward passes is the output without dropout (to 5 standard errors)."""
    torch.manual_seed(0)
    cfg = tiny(dropout=0.5)
    attn = tt.GPT(cfg, seed=4).double().h[0].attn
    attn.resid_dropout.p = 0.0                               # the attention weights' dropout only
    x = torch.as_tensor(np.random.default_rng(13).standard_normal((1, 6, cfg.n_embd)))
    with torch.no_grad():
        expected = attn.eval()(x)[0]
        outs = torch.stack([attn.train()(x)[0] for _ in range(2000)])   # (2000, 1, 6, C)
    assert not torch.equal(outs[0], outs[1])
    error = (outs.mean(0) - expected).abs()
    assert torch.all(error <= 5 * outs.std(0) / math.sqrt(len(outs)) + 1e-12)


# ---- generation, evaluation, training --------------------------------------------------------------------
@pytest.mark.parametrize("twin", ["numpy", "torch"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_drops_nothing_and_keeps_the_mode(twin, use_cache):
    module = nt if twin == "numpy" else tt
    model, plain = module.GPT(tiny(dropout=0.5), seed=5), module.GPT(tiny(dropout=0.0), seed=5)
    prompt = np.array([[1, 2, 3]]) if twin == "numpy" else torch.tensor([[1, 2, 3]])
    out = model.generate(prompt, 10, temperature=0, use_cache=use_cache)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(plain.generate(prompt, 10, temperature=0)))
    assert model.training


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_estimate_loss_drops_nothing_and_keeps_the_mode(twin):
    module = nt if twin == "numpy" else tt
    model, plain = module.GPT(tiny(dropout=0.5), seed=6), module.GPT(tiny(dropout=0.0), seed=6)
    x, y = np.random.default_rng(14).integers(0, 97, (2, 2, 16))
    batches = [(x, y)] if twin == "numpy" else [(torch.as_tensor(x), torch.as_tensor(y))]
    assert module.estimate_loss(model, batches) == module.estimate_loss(plain, batches)
    assert model.training


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_training_with_dropout_is_seeded_and_resumes_exactly(twin, tmp_path):
    """Dropout's masks follow train()'s seed (the numpy twin's generator and torch's are kept in
    checkpoints): two runs agree, a resumed run matches an uninterrupted one, and dropout
    changes the trajectory."""
    data = np.random.default_rng(15).integers(0, 97, 3000).astype(np.uint16)
    module = nt if twin == "numpy" else tt
    settings = dict(max_iters=4, batch_size=2, block_size=16, warmup_iters=1, eval_interval=2, eval_iters=1,
                    device="cpu" if twin == "torch" else None)

    def run(dropout, **extra):
        return train(module.GPT(tiny(dropout=dropout), seed=7), data, data, TrainConfig(**settings), progress=False,
                     **extra)["train_loss"]

    whole = run(P)
    assert run(P) == whole and run(0.0) != whole
    settings["max_iters"] = 2
    run(P, out=tmp_path)
    settings["max_iters"] = 4
    assert run(P, out=tmp_path, resume=True) == whole                      # steps 1-2 from the checkpoint


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_evaluate_loss_over_a_token_array(twin):
    """Consecutive windows, every target once; the same for both twins and in either mode."""
    module = nt if twin == "numpy" else tt
    model = module.GPT(tiny(), seed=8)
    ids = np.random.default_rng(16).integers(0, 97, 5 * 16 + 1 + 7).astype(np.uint16)  # 5 windows and a tail
    x, y = ids[:80].reshape(5, 16).astype(np.int64), ids[1:81].reshape(5, 16).astype(np.int64)
    batches = [(x, y)] if twin == "numpy" else [(torch.as_tensor(x), torch.as_tensor(y))]
    expected = module.estimate_loss(model, batches)
    assert evaluate_loss(model, ids, batch_size=2) == pytest.approx(expected, rel=1e-6)   # batches of 2, 2, 1
    assert evaluate_loss(model, ids) == pytest.approx(evaluate_loss(nt.GPT(tiny(), seed=8), ids), abs=1e-5)
    assert model.training
    with pytest.raises(ValueError, match="block_size must be between 1 and the model's n_ctx=16, got 17"):
        evaluate_loss(model, ids, block_size=17)
    with pytest.raises(ValueError, match="larger than ids"):
        evaluate_loss(model, ids[:16])
    with pytest.raises(ValueError, match="token id 200"):
        evaluate_loss(model, np.full(40, 200))


def test_command_line_dropout(capsys):
    from lib.train import _build, build_parser, main
    args = build_parser().parse_args(["--twin", "numpy", "--dropout", "0.1", "--n-layer", "1"])
    model = _build(args)[0]
    assert model.config.dropout == 0.1 and model.h[0].attn.attn_dropout.p == 0.1
    with pytest.raises(SystemExit):
        main(["--twin", "numpy", "--dropout", "1.0"])
    assert "GPTConfig.dropout must be a probability in [0, 1), got 1.0" in capsys.readouterr().err
