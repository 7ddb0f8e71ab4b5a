"""int8 weights in both twins (lib/numpy_twin/quant.py, lib/torch_twin/quant.py) and the numpy
twin's decoding fast path (lib/numpy_twin/fast_decode.py): exactness where it is owed, error
bounds where rounding is the point, token-for-token agreement with the taught decoding."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.numpy_twin import fast_decode
from lib.numpy_twin.quant import Int8Weight, dequantize, quantize
from lib.torch_twin import quant as tq

ROOT = Path(__file__).resolve().parent.parent


def weights(shape, std=0.02, seed=0):
    return (std * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def test_quantize_rounds_each_row_to_within_half_its_step():
    w = weights((64, 48))
    w[3] *= 50                                               # one loud row must not flatten the others
    w[5] = 0
    q, scale = quantize(w)
    assert q.dtype == np.int8 and scale.shape == (64,) and np.abs(q).max() == 127
    assert (np.abs(dequantize(q, scale) - w) <= scale[:, None] / 2 * (1 + 1e-6)).all()
    assert (q[5] == 0).all() and scale[5] == 1
    assert (np.abs(q).max(axis=1)[np.arange(64) != 5] == 127).all()  # every row uses its full range


def test_both_twins_quantize_alike():
    w = weights((96, 40), seed=1)
    q, scale = quantize(w)
    tq_, tscale = tq.quantize(torch.from_numpy(w))
    np.testing.assert_array_equal(q, tq_.numpy())
    np.testing.assert_allclose(scale, tscale.numpy(), rtol=1e-7)


def test_quantize_refuses_a_non_matrix():
    with pytest.raises(ValueError, match=r"\(out, in\) weight matrix, got shape \(3,\)"):
        quantize(np.zeros(3))


@pytest.mark.parametrize("n_out", [1, 100, 3072])
def test_int8_product_tile_by_tile_equals_the_dequantized_product(n_out):
    w, b = weights((n_out, 768)), weights(n_out, seed=2)
    x = np.random.default_rng(3).standard_normal((2, 5, 768)).astype(np.float32)
    product = Int8Weight(w, b)
    assert product.rows < n_out or n_out == 1                # more than one tile where there is room
    want = x @ dequantize(product.q, product.scale).T + b
    np.testing.assert_allclose(product(x), want, rtol=1e-5, atol=1e-5)  # float32 summation order only


@pytest.mark.parametrize("shape", [(768, 2304), (768, 3072), (3072, 768)])
def test_int8_error_at_gpt2_small_shapes(shape):
    # GPT-2's weights (std 0.02) and a LayerNorm'd input (unit scale). Weight-only int8 (numpy)
    # errs by at most half a step per weight: about 1% of the output's RMS. The torch kernel also
    # rounds the input to 7 bits (reduce_range): about 2%.
    n_in, n_out = shape
    w = weights((n_out, n_in))
    x = np.random.default_rng(4).standard_normal((4, n_in)).astype(np.float32)
    exact = x @ w.T
    rms = np.sqrt((exact**2).mean())
    numpy_err = np.sqrt(((Int8Weight(w)(x) - exact) ** 2).mean()) / rms
    torch_out = tq.int8_matmul(torch.from_numpy(x), tq.pack(torch.from_numpy(w))).numpy()
    torch_err = np.sqrt(((torch_out - exact) ** 2).mean()) / rms
    assert numpy_err < 0.01 and torch_err < 0.03, (numpy_err, torch_err)


@pytest.fixture(scope="module")
def small_pair():
    cfg = GPTConfig.small()
    return nt.GPT(cfg, seed=3).eval(), tt.GPT(cfg, seed=3).eval()


def test_fp32_fast_path_decodes_token_for_token(small_pair):
    model, _ = small_pair
    idx = np.random.default_rng(0).integers(0, model.config.vocab_size, (3, 7))
    plain = model.generate(idx, 70, temperature=0)           # past n_ctx = 64: a refill too
    with fast_decode.decode_layout(model, "fp32"):
        fast = model.generate(idx, 70, temperature=0)
        logits = model.forward(idx)
    np.testing.assert_array_equal(fast, plain)
    np.testing.assert_allclose(logits, model.forward(idx), rtol=0, atol=1e-5)
    assert "forward" not in vars(model)                      # the taught forward is back


def test_int8_fast_path_decodes_as_its_own_prefill(small_pair):
    model, _ = small_pair
    idx = np.random.default_rng(1).integers(0, model.config.vocab_size, (2, 9))
    with fast_decode.decode_layout(model, "int8") as table:
        whole = model.forward(idx)                           # one prefill of all 9
        cache = nt.KVCache(model.config, 2)
        steps = np.concatenate([model.forward(idx[:, :5], kv_cache=cache)] +
                               [model.forward(idx[:, t:t + 1], kv_cache=cache) for t in range(5, 9)], axis=1)
    np.testing.assert_allclose(steps, whole, rtol=0, atol=1e-4)
    fp32 = model.forward(idx)
    assert 0 < np.abs(whole - fp32).max() < 0.05 * np.abs(fp32).max()
    assert fast_decode.weight_bytes(table) < 0.3 * fast_decode.weight_bytes(fast_decode.products(model, "fp32"))


def test_fast_path_refuses_other_architectures_and_precisions():
    modern = nt.GPT(GPTConfig.small(norm="rmsnorm", position="rope", mlp="swiglu", n_kv_head=2, bias=False))
    with pytest.raises(ValueError, match="GPT-2's architecture only"):
        with fast_decode.decode_layout(modern):
            pass
    with pytest.raises(ValueError, match=r"precision must be one of \['fp32', 'int8'\], got 'int4'"):
        fast_decode.products(nt.GPT(GPTConfig.small()), "int4")


def test_torch_int8_layout_agrees_with_numpy_int8_and_restores(small_pair):
    model, tmodel = small_pair
    idx = np.random.default_rng(2).integers(0, model.config.vocab_size, (2, 12))
    with torch.inference_mode():
        fp32 = tmodel(torch.from_numpy(idx)).numpy()
        with tq.int8_layout(tmodel):
            int8 = tmodel(torch.from_numpy(idx)).numpy()
            generated = tmodel.generate(torch.from_numpy(idx), 5, temperature=0)
            cache = tt.KVCache(tmodel.config, 2, torch.float32, "cpu")
            prefill = tmodel(torch.from_numpy(idx), kv_cache=cache).numpy()
        assert not any("forward" in vars(m) for m in tmodel.modules()) and "lm_head" not in vars(tmodel)
        np.testing.assert_array_equal(tmodel(torch.from_numpy(idx)).numpy(), fp32)
    with fast_decode.decode_layout(model, "int8"):
        numpy_int8 = model.forward(idx)
    scale = np.abs(fp32).max()
    assert 0 < np.abs(int8 - fp32).max() < 0.05 * scale
    assert np.abs(int8 - numpy_int8).max() < 0.05 * scale     # both within int8's error of fp32
    np.testing.assert_allclose(prefill, int8, rtol=0, atol=1e-5)  # generate's cpu layout stays out
    assert generated.shape == (2, 17)


@pytest.mark.slow
def test_int8_perplexity_on_the_held_out_plays_within_one_percent():
    from lib.data import load_corpus
    from lib.pretrained import shakespeare_small
    from lib.train import perplexity

    _, val_ids = load_corpus("shakespeare", "byte")
    ids = np.asarray(val_ids[:64 * 160 + 1])                 # 160 windows of the held-out plays
    model, tmodel = shakespeare_small("numpy"), shakespeare_small("torch")
    fp32 = perplexity(model, ids)
    with fast_decode.decode_layout(model, "int8"):
        numpy_int8 = perplexity(model, ids)
    with tq.int8_layout(tmodel):
        torch_int8 = perplexity(tmodel, ids)
    assert abs(perplexity(tmodel, ids) / fp32 - 1) < 1e-4   # the twins agree in fp32
    for int8 in (numpy_int8, torch_int8):
        assert int8 != fp32 and abs(int8 / fp32 - 1) <= 0.01, (fp32, numpy_int8, torch_int8)


@pytest.mark.slow
def test_decode_benchmark_runs_and_reports_its_keys():
    run = subprocess.run([sys.executable, "-m", "lib.bench", "decode", "--preset", "small", "--prompt", "4",
                          "--new", "3", "--reps", "1", "--no-cache-reps", "0", "--batches", "1,2",
                          "--sweep-steps", "1", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(run.stdout.strip().splitlines()) == 1                 # --json: the JSON line alone
    result = json.loads(run.stdout)
    names = {"numpy cache fp32", "numpy fast fp32", "numpy int8", "torch cache fp32", "torch int8", "transformers fp32"}
    assert set(result["tokens_per_s"]) == names == set(result["percent_of_bound"])
    assert set(result["tokens_per_s_by_batch"]["torch int8"]) == {"1", "2"}
    assert result["peak_flops"]["numpy"] > 0 and result["peak_flops"]["torch"] > 0
    assert result["weight_bytes"]["numpy int8"] < 0.3 * result["weight_bytes"]["fp32"]
    assert "numpy int8 / numpy fast fp32" in result["met"] and "numpy fast fp32 >= 70% of bound" in result["met"]


def test_decode_benchmark_refuses_bad_batches():
    run = subprocess.run([sys.executable, "-m", "lib.bench", "decode", "--batches", "1,x"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--batches must be comma-separated whole numbers" in run.stderr
    assert "Traceback" not in run.stderr
