"""lib.sampling (the shared sampler) and the torch twin's on-device copy of its steps."""
import math

import numpy as np
import pytest
import torch

from lib import sampling
from lib.torch_twin import sampling as ts


def reference_probs(logits_row, temperature, top_k, top_p):
    """The documented steps 2-4 written plainly, one row, token by token (an independent oracle)."""
    z = [x / temperature for x in logits_row]
    order = sorted(range(len(z)), key=lambda i: -z[i])
    keep = set(range(len(z)))
    if top_k is not None and top_k < len(z):
        kth = z[order[top_k - 1]]
        keep = {i for i in keep if z[i] >= kth}
    def softmax_over(ids):
        m = max(z[i] for i in ids)
        e = {i: math.exp(z[i] - m) for i in ids}
        total = sum(e.values())
        return {i: e[i] / total for i in ids}
    p = softmax_over(keep)
    if top_p is not None and top_p < 1:
        ranked = sorted(keep, key=lambda i: -p[i])
        mass, kept = 0.0, []
        for i in ranked:
            if mass >= top_p and p[i] < p[kept[-1]]:
                break
            kept.append(i)
            mass += p[i]
        p = softmax_over(kept)
    return np.array([p.get(i, 0.0) for i in range(len(z))])


LOGITS = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32) * 2  # (3, 40)
SETTINGS = [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.9, 10, 0.6), (2.0, 40, 0.95),
            (0.5, 1, None), (1.0, None, 0.01), (1.0, 100, 1.0)]


# ---- the steps, one at a time -----------------------------------------------------------------
@pytest.mark.parametrize("temperature,top_k,top_p", SETTINGS)
def test_filtered_probs_match_the_plain_reference(temperature, top_k, top_p):
    got = sampling.filtered_probs(LOGITS, temperature, top_k, top_p)
    expected = np.stack([reference_probs(row.tolist(), temperature, top_k, top_p) for row in LOGITS])
    # float64 both; the only difference is summation order, ~1e-16 per value
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert np.array_equal(got > 0, expected > 0)


def test_top_p_one_and_no_top_k_leave_the_distribution_unchanged():
    for temperature in (0.5, 1.0, 3.0):
        z = LOGITS.astype(np.float64) / temperature
        plain = np.exp(z - z.max(-1, keepdims=True))
        plain /= plain.sum(-1, keepdims=True)
        for top_p in (None, 1.0):
            np.testing.assert_allclose(sampling.filtered_probs(LOGITS, temperature, None, top_p), plain,
                                       rtol=1e-13, atol=0)   # same float64 formula: rounding only


def test_top_k_and_top_p_keep_ties_with_the_last_kept_token():
    logits = np.array([[3.0, 1.0, 2.0, 2.0, 0.0]])
    assert (sampling.filtered_probs(logits, 1.0, 2, None) > 0).tolist() == [[True, False, True, True, False]]
    # softmax gives the 3 a probability of 0.52: top_p 0.6 needs one more token, and both tied 2s come
    assert (sampling.filtered_probs(logits, 1.0, None, 0.6) > 0).tolist() == [[True, False, True, True, False]]
    assert (sampling.filtered_probs(logits, 1.0, None, 0.5) > 0).tolist() == [[True, False, False, False, False]]


def test_repetition_penalty_formula():
    logits = np.array([[2.0, -2.0, 0.5, 0.0, -1.0]])
    seen = np.array([[True, True, False, True, False]])
    # seen and positive: divided; seen and negative: multiplied; unseen: unchanged
    assert sampling.penalize(logits, seen, 2.0).tolist() == [[1.0, -4.0, 0.5, 0.0, -1.0]]
    assert sampling.penalize(logits, seen, 0.5).tolist() == [[4.0, -1.0, 0.5, 0.0, -1.0]]
    s = sampling.Sampler(5, 1, sampling.Sampling(temperature=0, repetition_penalty=8.0))
    s.observe(np.array([[0, 0, 0]]))             # seen three times, penalised once: 2.0 / 8 = 0.25
    assert s(logits).tolist() == [2]             # so token 2's 0.5 is now the largest
    assert s.seen[0].tolist() == [True, False, True, False, False]


def test_draw_is_the_inverse_cdf_and_never_picks_a_removed_token():
    probs = np.array([[0.0, 0.25, 0.0, 0.75, 0.0]] * 4)
    u = np.array([0.0, 0.2499, 0.25, 1 - 1e-16])
    assert sampling.draw(probs, u).tolist() == [1, 1, 3, 3]
    # u = 1 (never drawn, but rounding in u * total could reach the total): the last kept token
    assert sampling.draw(probs[:1], np.array([1.0])).tolist() == [3]
    assert ts.draw(torch.as_tensor(probs[:1]), torch.tensor([1.0], dtype=torch.float64)).tolist() == [3]


# ---- the sampler --------------------------------------------------------------------------------
def test_empirical_frequencies_within_5_sigma_of_the_filtered_distribution():
    n = 20_000
    logits = np.repeat(LOGITS[:1], n, axis=0)          # n identical rows: n draws in one call
    for temperature, top_k, top_p in [(0.8, 10, 0.9), (1.5, None, 0.7), (1.0, None, None)]:
        counts = np.bincount(sampling.Sampler(40, n, sampling.Sampling(temperature, top_k, top_p, seed=1))(logits),
                             minlength=40)
        p = reference_probs(LOGITS[0].tolist(), temperature, top_k, top_p)
        sigma = np.sqrt(n * p * (1 - p))               # binomial standard deviation of each count
        assert np.all(np.abs(counts - n * p) <= 5 * sigma), (temperature, top_k, top_p)
        assert np.all(counts[p == 0] == 0)             # a removed token is never drawn


def test_top_k_1_is_greedy():
    greedy = sampling.Sampler(40, 3, sampling.Sampling(temperature=0))(LOGITS)
    assert greedy.tolist() == LOGITS.argmax(-1).tolist()
    for seed in range(5):
        for temperature in (0.1, 1.0, 10.0):
            top_1 = sampling.Sampler(40, 3, sampling.Sampling(temperature, top_k=1, seed=seed))
            assert top_1(LOGITS).tolist() == greedy.tolist()


def test_a_seed_reproduces_a_sample():
    def draws(seed):
        s = sampling.Sampler(40, 3, sampling.Sampling(1.0, seed=seed))
        return [s(LOGITS).tolist() for _ in range(20)]
    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


# ---- the torch twin's on-device steps equal the shared ones -----------------------------------------
@pytest.mark.parametrize("temperature,top_k,top_p", SETTINGS)
def test_torch_filtered_probs_equal_the_shared_ones(temperature, top_k, top_p):
    got = ts.filtered_probs(torch.as_tensor(LOGITS), temperature, top_k, top_p).numpy()
    # both float64 from the same float32 logits; exp and cumsum may differ in the last bits
    np.testing.assert_allclose(got, sampling.filtered_probs(LOGITS, temperature, top_k, top_p), rtol=1e-12, atol=1e-15)


def test_torch_penalize_and_draw_equal_the_shared_ones():
    rng = np.random.default_rng(3)
    seen = rng.random(LOGITS.shape) < 0.3
    for penalty in (0.5, 1.3):
        np.testing.assert_array_equal(ts.penalize(torch.as_tensor(LOGITS), torch.as_tensor(seen), penalty).numpy(),
                                      sampling.penalize(LOGITS, seen, penalty))
    probs = sampling.filtered_probs(LOGITS, 1.0, 12, 0.9)
    for _ in range(50):
        u = rng.random(3)
        assert ts.draw(torch.as_tensor(probs), torch.as_tensor(u)).tolist() == sampling.draw(probs, u).tolist()


@pytest.mark.parametrize("settings", [dict(temperature=0.9, top_k=8, top_p=0.9, repetition_penalty=1.5),
                                      dict(temperature=0, repetition_penalty=2.0), dict(temperature=1.2)])
def test_device_sampler_picks_what_the_shared_sampler_picks(settings):
    rng = np.random.default_rng(4)
    steps = [rng.standard_normal((3, 40)).astype(np.float32) for _ in range(30)]  # (3, 40) each
    host = sampling.Sampler(40, 3, sampling.Sampling(seed=11, **settings))
    device = ts.DeviceSampler(40, 3, len(steps), sampling.Sampling(seed=11, **settings))
    host.observe(np.array([[1, 2], [3, 3], [39, 0]]))
    device.observe(torch.tensor([[1, 2], [3, 3], [39, 0]]))
    for logits in steps:
        assert device(torch.as_tensor(logits)).tolist() == host(logits).tolist()


# ---- every bad setting is a ValueError that names it --------------------------------------------------
@pytest.mark.parametrize("kwargs,name", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(temperature="1"), "temperature"),
    (dict(top_k=0), "top_k"), (dict(top_k=-3), "top_k"), (dict(top_k=2.5), "top_k"), (dict(top_k=True), "top_k"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=-0.5), "top_p"), (dict(top_p=1.01), "top_p"),
    (dict(top_p=float("nan")), "top_p"),
    (dict(repetition_penalty=0.0), "repetition_penalty"), (dict(repetition_penalty=-1.0), "repetition_penalty"),
    (dict(repetition_penalty=float("nan")), "repetition_penalty"),
    (dict(repetition_penalty=float("inf")), "repetition_penalty"),
    (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"),
])
def test_bad_sampling_settings(kwargs, name):
    with pytest.raises(ValueError, match=name) as error:
        sampling.Sampling(**kwargs)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("prompt,kwargs,match", [
    (np.zeros((1, 0), np.int64), {}, "empty prompt"), (np.zeros((0, 4), np.int64), {}, "empty prompt"),
    (np.zeros(4, np.int64), {}, r"\(B, T\)"), (np.zeros((1, 4)), {}, "integer"),
    (np.array([[1, 40]]), {}, r"\[0, 40\)"), (np.array([[-1, 2]]), {}, r"\[0, 40\)"),
    (np.array([[1]]), dict(max_new_tokens=-1), "max_new_tokens"),
    (np.array([[1]]), dict(max_new_tokens=2.0), "max_new_tokens"),
    (np.array([[1]]), dict(use_cache="yes"), "use_cache"),
    (np.array([[1]]), dict(stop_token=40), "stop_token"), (np.array([[1]]), dict(stop_token=-1), "stop_token"),
])
def test_bad_generation_inputs(prompt, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sampling.check_generation(prompt, 40, **{"max_new_tokens": 5, **kwargs})


def test_refill_length():
    assert [sampling.refill_length(n) for n in (1, 2, 3, 64, 1024)] == [1, 1, 1, 32, 512]
