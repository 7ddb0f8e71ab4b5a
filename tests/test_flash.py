"""The numpy FlashAttention (lib/numpy_twin/flash.py) against the plain attention and torch autograd."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lib.bench.roofline import peak_memory
from lib.numpy_twin import flash_attention
from lib.numpy_twin.flash import flash_backward, flash_forward, online_softmax_update, plain_attention


def qkv(shape, dtype=np.float64, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal(shape)).astype(dtype) for _ in range(3)]


@pytest.mark.parametrize("shape, block", [((1, 8), 64), ((5, 8), 2), ((2, 3, 130, 16), 64), ((64, 4), 64),
                                          ((2, 2, 2, 37, 8), 7)])
def test_forward_matches_plain_attention_in_float64(shape, block):
    q, k, v = qkv(shape)
    assert np.abs(flash_attention(q, k, v, block_size=block) - plain_attention(q, k, v)).max() < 1e-10


def test_t_equal_one_returns_the_value():
    q, k, v = qkv((3, 1, 8))
    np.testing.assert_array_equal(flash_attention(q, k, v), v)     # one key: weight exactly 1


@pytest.mark.parametrize("scale, rtol", [(1.0, 1e-5), (30.0, 1e-4)])
def test_forward_in_float32_with_large_scores(scale, rtol):
    # scale 30 with D = 64 gives scores in the thousands. float32 rounds a score s to about
    # 6e-8 |s|, so at |s| ~ 5000 the exponents differ by ~3e-4 between two orders of summation:
    # 1e-4 of the values' size; at ordinary scores 1e-5.
    q, k, v = qkv((2, 4, 200, 64), np.float32, scale)
    scores = np.abs(q @ np.swapaxes(k, -1, -2)).max() / 8
    assert scale == 1.0 or scores > 1000
    y = flash_attention(q, k, v)
    assert y.dtype == np.float32 and np.isfinite(y).all()
    assert np.abs(y - plain_attention(q, k, v)).max() <= rtol * np.abs(v).max()


@pytest.mark.parametrize("shape, block", [((1, 4), 64), ((2, 3, 70, 8), 16), ((45, 8), 64)])
def test_backward_matches_torch_autograd(shape, block):
    q, k, v = qkv(shape)
    dy = np.random.default_rng(1).standard_normal(shape)
    y, lse = flash_forward(q, k, v, block)
    grads = flash_backward(dy, q, k, v, y, lse, block)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ty = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty.backward(torch.tensor(dy))
    assert np.abs(y - ty.detach().numpy()).max() < 1e-10
    for name, mine, theirs in zip("qkv", grads, (tq, tk, tv)):
        assert np.abs(mine - theirs.grad.numpy()).max() < 1e-10, name


def test_memory_grows_as_t_times_block_not_t_squared():
    small, large = (qkv((1, T, 16), np.float32) for T in (512, 2048))
    plain = [peak_memory(plain_attention, *x) for x in (small, large)]
    tiled = [peak_memory(flash_attention, *x) for x in (small, large)]
    assert plain[1] / plain[0] > 12                              # 4x the tokens: ~16x the memory
    assert tiled[1] / tiled[0] < 5                               # ~4x
    assert tiled[1] < plain[1] / 8


@pytest.mark.parametrize("args, message", [
    ((np.zeros((4, 8)), np.zeros((4, 8)), np.zeros((5, 8))), "share one shape"),
    ((np.zeros(8), np.zeros(8), np.zeros(8)), "share one shape"),
])
def test_bad_shapes_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        flash_attention(*args)


@pytest.mark.parametrize("block", [0, -1, 2.5])
def test_bad_block_size_is_refused(block):
    q, k, v = qkv((4, 8))
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        flash_attention(q, k, v, block_size=block)
