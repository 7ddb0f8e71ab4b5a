"""Generation in both twins: cache against no cache against transformers' generate, sampling
through the model, prompts at and beyond the context, generation past it, bad inputs, and the
`python -m lib.sample` command line.

Greedy comparisons need weights whose argmax is not a near tie: the implementations' logits
agree within 1e-4 (tests/test_model.py), so `margins_ok` checks that on the whole greedy path
the top logit beats the second by at least 1e-3, 10x that, before tokens are compared.
"""
import dataclasses
import json

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import sample
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.numpy_twin import generate as numpy_generate
from lib.sampling import Sampling, refill_length
from lib.torch_twin import cpu_decode
from lib.torch_twin import generate as torch_generate
from lib.weights import init_state, save_hf_gpt2

CFG = GPTConfig(vocab_size=256, n_ctx=32, n_layer=2, n_head=2, n_embd=32)
MARGIN = 1e-3


def clear_margin_state(cfg, seed=0):
    """Random weights with token embeddings 10x larger, which spreads the logits apart."""
    state = init_state(cfg, seed)
    state["wte.weight"] *= 10
    return state


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """These models are tiny: a second thread only adds synchronisation, which on a busy
    machine costs seconds per test. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def twins():
    state = clear_margin_state(CFG)
    numpy_model, torch_model = nt.GPT(CFG), tt.GPT(CFG)
    numpy_model.load_state_dict(state)
    torch_model.load_state_dict(state)
    return numpy_model, torch_model


def run(model, idx, n, **options):
    """Either twin's generate, as a numpy array."""
    if isinstance(model, torch.nn.Module):
        return model.generate(torch.as_tensor(idx), n, **options).numpy()
    return model.generate(idx, n, **options)


def margins_ok(numpy_model, out, n_prompt):
    """Top-1 minus top-2 logit >= MARGIN at every generated position of out (B, T)."""
    for t in range(n_prompt, out.shape[1]):
        top2 = np.sort(numpy_model.forward(out[:, max(0, t - CFG.n_ctx):t])[:, -1], axis=-1)[:, -2:]
        if (top2[:, 1] - top2[:, 0]).min() < MARGIN:
            return False
    return True


PROMPT = np.random.default_rng(1).integers(0, 256, (2, 7))   # (2, 7)


# ---- 1. greedy: cache, no cache, both twins, transformers ----------------------------------------------
def test_greedy_same_with_and_without_cache_in_both_twins_and_in_transformers(twins, tmp_path):
    from transformers import GPT2LMHeadModel

    numpy_model, torch_model = twins
    n = CFG.n_ctx - PROMPT.shape[1]                    # up to the full context
    out = run(numpy_model, PROMPT, n, temperature=0)
    assert out.shape == (2, CFG.n_ctx) and np.array_equal(out[:, :7], PROMPT)
    assert margins_ok(numpy_model, out, PROMPT.shape[1])
    for model in twins:
        for use_cache in (True, False):
            assert np.array_equal(run(model, PROMPT, n, temperature=0, use_cache=use_cache), out), (model, use_cache)
    save_hf_gpt2(tmp_path, CFG, numpy_model.state_dict())
    hf = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        expected = hf.generate(torch.as_tensor(PROMPT), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               eos_token_id=None, pad_token_id=0).numpy()
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_split_matmul_is_the_linear_product(k):
    """Blocks of W^T's rows (zero-padded when k does not divide in) give x W^T + b. Tolerance
    1e-5 relative: the same float32 dot products, summed in another order by another kernel."""
    g = torch.Generator().manual_seed(k)
    w, b = torch.randn(37, 25, generator=g), torch.randn(37, generator=g)
    x = torch.randn(2, 5, 25, generator=g)
    w_split = cpu_decode.split_inputs(w, k)                   # (k, ceil(25 / k), 37)
    assert w_split.shape == (k, -(-25 // k), 37)
    for bias in (b, None):
        expected = torch.nn.functional.linear(x, w, bias)     # (2, 5, 37)
        got = cpu_decode.split_matmul(x, w_split, bias)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def replaced(model):
    """Which of the model's methods are replaced on the instance: the head, Linear forwards."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return "lm_head" in vars(model), ["forward" in vars(m) for m in linears]


def test_cpu_decode_layout_gives_the_same_logits_and_follows_weight_changes():
    """Inside the layout every Linear and the head use blocks of inputs; outside, none is left.
    A changed weight (here a load) rebuilds the blocks: never logits of stale weights."""
    model = tt.GPT(CFG).eval()
    idx = torch.as_tensor(PROMPT)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)                                  # two blocks per weight
    try:
        previous = None
        with torch.no_grad():
            for seed in (0, 1):
                model.load_state_dict(init_state(CFG, seed))
                expected = model(idx)
                with cpu_decode.cpu_decode_layout(model):
                    blocks = cpu_decode.weight_blocks(model)
                    assert blocks is not previous             # built for these weights
                    assert len(blocks) == 4 * CFG.n_layer + 1 and all(w.shape[0] == 2 for w in blocks)
                    assert replaced(model) == (True, [True] * 4 * CFG.n_layer)
                    got = model(idx)
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
                assert replaced(model) == (False, [False] * 4 * CFG.n_layer)
                assert cpu_decode.weight_blocks(model) is blocks  # kept while the weights stay
                torch.testing.assert_close(model(idx), expected, rtol=0, atol=0)
                previous = blocks
    finally:
        torch.set_num_threads(threads)


def test_top_k_1_is_greedy_through_the_model(twins):
    for model in twins:
        greedy = run(model, PROMPT, 10, temperature=0)
        assert np.array_equal(run(model, PROMPT, 10, temperature=1.5, top_k=1, seed=3), greedy)


def test_stream_yields_what_generate_returns(twins):
    for model in twins:
        options = dict(temperature=0.9, top_p=0.9, seed=5)
        steps = [np.asarray(ids) for ids in model.stream(torch.as_tensor(PROMPT) if model is twins[1] else PROMPT,
                                                          12, **options)]
        assert np.array_equal(np.stack(steps, axis=1), run(model, PROMPT, 12, **options)[:, 7:])


def test_a_stream_takes_the_sampling_settings_as_one_sampling(twins):
    """generate's keywords build one lib.sampling.Sampling, which travels to the sampler as it is."""
    settings = Sampling(temperature=0.7, top_k=20, repetition_penalty=1.2, seed=2)
    for model, Stream in zip(twins, (numpy_generate.Stream, torch_generate.Stream)):
        stream = Stream(model, torch.as_tensor(PROMPT) if model is twins[1] else PROMPT, 9, settings)
        assert stream.sampler.settings is settings
        steps = np.stack([np.asarray(ids) for ids in stream], axis=1)             # (2, 9)
        assert np.array_equal(steps, run(model, PROMPT, 9, **dataclasses.asdict(settings))[:, 7:])
    with pytest.raises(TypeError, match="temprature"):
        twins[0].generate(PROMPT, 3, temprature=0.5)


# ---- 2. sampling through the model ------------------------------------------------------------------
def test_a_seed_gives_the_same_sample_in_both_twins_and_both_torch_samplers(twins):
    numpy_model, torch_model = twins
    options = dict(temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.3, seed=12)
    out = run(numpy_model, PROMPT, 20, **options)
    assert np.array_equal(run(numpy_model, PROMPT, 20, **options), out)                     # reproducible
    assert not np.array_equal(run(numpy_model, PROMPT, 20, **{**options, "seed": 13}), out)
    assert np.array_equal(run(torch_model, PROMPT, 20, **options), out)                     # on the device
    assert np.array_equal(run(torch_model, PROMPT, 20, sample_on_device=False, **options), out)  # on the host
    assert np.array_equal(run(torch_model, PROMPT, 20, use_cache=False, **options), out)


def test_repetition_penalty_changes_greedy_output(twins):
    numpy_model, _ = twins
    plain = run(numpy_model, PROMPT[:1], 20, temperature=0)
    penalised = run(numpy_model, PROMPT[:1], 20, temperature=0, repetition_penalty=1e3)
    # a huge penalty pushes every seen token below every unseen one (as long as some logit is
    # positive), so greedy never repeats a token of the prompt or of its own output
    assert not np.array_equal(plain, penalised)
    new = penalised[0, 7:].tolist()
    assert len(set(new)) == len(new) and not set(new) & set(PROMPT[0].tolist())


def test_stop_token(twins):
    for model in twins:
        free = run(model, PROMPT, 10, temperature=0)
        stop = int(free[0, 7 + 3])                         # row 0's 4th new token
        out = run(model, PROMPT, 10, temperature=0, stop_token=stop)
        first = [int(np.argmax(row[7:] == stop)) if stop in row[7:] else None for row in free]
        if all(f is not None for f in first):              # every row stops: ends at the last stop
            assert out.shape[1] == 7 + max(first) + 1
        else:
            assert out.shape[1] == free.shape[1]
        for row, f in zip(range(2), first):
            if f is not None:
                assert np.array_equal(out[row, :7 + f + 1], free[row, :7 + f + 1])
                assert (out[row, 7 + f:] == stop).all()    # after its stop a row repeats it
        single = run(model, PROMPT[:1], 10, temperature=0, stop_token=stop)
        assert np.array_equal(single, free[:1, :7 + first[0] + 1])


def test_generate_with_a_stop_token_reads_the_device_every_16_steps(twins, monkeypatch):
    _, model = twins
    monkeypatch.setattr(model, "_check_idx", lambda *args: None)  # reads the ids' min and max, on the CPU only
    free = run(model, PROMPT, 20, temperature=0)
    stop = 1 + int(free[:, 7:].max())                    # never produced: the stream runs its length
    reads, counts = [], []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _f=original, _n=name, **k:
                            (reads.append(_n), _f(self, *a, **k))[1])
    for n in (2, 16):                                    # one check of `done` at the start, one trim
        reads.clear()
        out = model.generate(torch.as_tensor(PROMPT), n, temperature=0, stop_token=stop)
        counts.append(len(reads))
        assert np.array_equal(out.numpy(), free[:, :7 + n])
    assert counts[0] == counts[1], counts


def test_zero_new_tokens_returns_the_prompt(twins):
    for model in twins:
        assert np.array_equal(run(model, PROMPT, 0, temperature=0.7), PROMPT)


# ---- 3. the context: prompts at and beyond it, generating past it ---------------------------------------------
def conditioning_lengths(n_prompt, n_new, n_ctx, use_cache):
    """The documented rule: how many of the latest tokens each new token is computed from,
    and how many times a full cache is refilled."""
    lengths, refills = [], 0
    for i in range(n_new):
        if i == 0:
            length = min(n_prompt, n_ctx)                  # the prefill
        elif use_cache and length == n_ctx:
            length, refills = refill_length(n_ctx), refills + 1
        else:
            length = min(length + 1, n_ctx)
        lengths.append(length)
    return lengths, refills


def assert_follows_windows(numpy_model, out, n_prompt, use_cache):
    """Each new token of out (B, T) is the argmax of a plain forward over its documented window."""
    lengths, _ = conditioning_lengths(n_prompt, out.shape[1] - n_prompt, numpy_model.config.n_ctx, use_cache)
    for i, length in enumerate(lengths):
        t = n_prompt + i
        logits = numpy_model.forward(out[:, t - length:t])[:, -1]   # (B, V)
        top2 = np.sort(logits, axis=-1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0]).min() >= MARGIN
        assert np.array_equal(out[:, t], logits.argmax(-1)), (use_cache, i)


@pytest.mark.parametrize("n_prompt", [CFG.n_ctx, CFG.n_ctx + 9, 5])
def test_context_crop_and_generation_past_it_follow_the_documented_windows(twins, n_prompt):
    numpy_model, torch_model = twins
    prompt = np.random.default_rng(n_prompt).integers(0, 256, (2, n_prompt))
    n_new = 2 * CFG.n_ctx + 5                            # fills the context more than twice
    for use_cache in (True, False):
        out = run(numpy_model, prompt, n_new, temperature=0, use_cache=use_cache)
        assert out.shape == (2, n_prompt + n_new) and np.array_equal(out[:, :n_prompt], prompt)
        assert_follows_windows(numpy_model, out, n_prompt, use_cache)
        assert np.array_equal(run(torch_model, prompt, n_new, temperature=0, use_cache=use_cache), out)
    for model, idx in ((numpy_model, prompt), (torch_model, torch.as_tensor(prompt))):
        s = model.stream(idx, n_new, temperature=0)
        assert s.cropped == max(0, n_prompt - CFG.n_ctx)
        list(s)
        assert s.refills == conditioning_lengths(n_prompt, n_new, CFG.n_ctx, True)[1] > 0


def test_modern_variants_follow_the_same_windows():
    """RoPE, grouped key/value heads, RMSNorm and SwiGLU go through the same cache path."""
    cfg = GPTConfig(vocab_size=256, n_ctx=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, position="rope",
                    norm="rmsnorm", mlp="swiglu", bias=False)
    state = clear_margin_state(cfg, seed=2)
    numpy_model, torch_model = nt.GPT(cfg), tt.GPT(cfg)
    numpy_model.load_state_dict(state)
    torch_model.load_state_dict(state)
    for use_cache in (True, False):                      # 7 + 12 tokens > 16: the cache is refilled once
        out = run(numpy_model, PROMPT, 12, temperature=0, use_cache=use_cache)
        assert_follows_windows(numpy_model, out, 7, use_cache)
        assert np.array_equal(run(torch_model, PROMPT, 12, temperature=0, use_cache=use_cache), out)


def test_tiny_context_of_one_token():
    cfg = GPTConfig(vocab_size=256, n_ctx=1, n_layer=1, n_head=1, n_embd=8)
    model = nt.GPT(cfg)
    out = model.generate(np.array([[3, 4, 5]]), 5, temperature=0)
    for t in range(3, 8):                                # each token sees only the one before it
        assert out[0, t] == model.forward(out[:, t - 1:t])[0, -1].argmax()
    assert np.array_equal(tt.GPT(cfg).generate(torch.tensor([[3, 4, 5]]), 5, temperature=0).numpy(), out)


# ---- bad arguments -------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt,kwargs,match", [
    (np.array([[1, 2]]), dict(temperature=-1.0), "temperature"),
    (np.array([[1, 2]]), dict(top_k=0), "top_k"),
    (np.array([[1, 2]]), dict(top_p=0.0), "top_p"),
    (np.array([[1, 2]]), dict(top_p=1.5), "top_p"),
    (np.array([[1, 2]]), dict(repetition_penalty=0.0), "repetition_penalty"),
    (np.zeros((1, 0), np.int64), {}, "empty prompt"),
    (np.array([[1, 256]]), {}, "token ids"),
    (np.array([1, 2]), {}, r"\(B, T\)"),
    (np.array([[1, 2]]), dict(stop_token=256), "stop_token"),
    (np.array([[1, 2]]), dict(max_new_tokens=-2), "max_new_tokens"),
])
def test_bad_arguments_raise_before_any_work(twins, prompt, kwargs, match):
    kwargs = {"max_new_tokens": 5, **kwargs}
    numpy_model, torch_model = twins
    for make in (lambda: numpy_model.generate(prompt, **kwargs), lambda: numpy_model.stream(prompt, **kwargs),
                 lambda: torch_model.generate(torch.as_tensor(prompt), **kwargs),
                 lambda: torch_model.stream(torch.as_tensor(prompt), **kwargs)):
        with pytest.raises(ValueError, match=match):
            make()


# ---- the command line --------------------------------------------------------------------------
def cli_json(capsys, *argv):
    sample.main([str(a) for a in argv] + ["--json"])
    out = capsys.readouterr()
    return json.loads(out.out.strip().splitlines()[-1]), out


def test_cli_from_a_saved_model_a_training_output_and_a_hugging_face_folder(twins, tmp_path, capsys):
    from lib.checkpoint import save_checkpoint

    numpy_model, _ = twins
    numpy_model.save(tmp_path / "saved")
    save_hf_gpt2(tmp_path / "hf", CFG, numpy_model.state_dict())
    save_checkpoint(tmp_path / "train", 3, CFG, numpy_model.state_dict(), {"step": np.zeros(1)}, {"step": 3})
    prompt_ids = list("Hi there".encode())
    expected = numpy_model.generate(np.array([prompt_ids]), 12, temperature=0)[0].tolist()
    for folder in ("saved", "hf", "train"):
        for twin in ("numpy", "torch"):
            got, _ = cli_json(capsys, tmp_path / folder, "--prompt", "Hi there", "--max-new-tokens", 12,
                              "--temperature", 0, "--twin", twin)
            assert got["ids"] == expected, (folder, twin)
            assert got["text"] == bytes(expected).decode("utf-8", errors="replace")
            assert got["new_tokens"] == 12 and got["tokens_per_s"] > 0 and got["kv_cache_bytes"] == 2 * 2 * 32 * 32 * 4


def test_cli_gpt2_vocabulary_uses_gpt2_tokens(tmp_path, capsys):
    cfg = GPTConfig(vocab_size=50257, n_ctx=16, n_layer=1, n_head=2, n_embd=16)
    model = nt.GPT(cfg, seed=3)
    save_hf_gpt2(tmp_path, cfg, model.state_dict())
    got, _ = cli_json(capsys, tmp_path, "--prompt", "Hello world", "--max-new-tokens", 4, "--temperature", 0)
    assert got["ids"][:2] == [15496, 995]                 # GPT-2's ids of "Hello", " world"
    assert got["ids"] == model.generate(np.array([[15496, 995]]), 4, temperature=0)[0].tolist()


def test_cli_options_stream_no_cache_and_cropping(twins, tmp_path, capsys):
    numpy_model, _ = twins
    numpy_model.save(tmp_path)
    options = ["--max-new-tokens", 40, "--temperature", 0.9, "--top-k", 50, "--top-p", 0.9,
               "--repetition-penalty", 1.2, "--seed", 4]
    base, _ = cli_json(capsys, tmp_path, "--prompt", "abc", *options)
    streamed, out = cli_json(capsys, tmp_path, "--prompt", "abc", "--stream", *options)
    uncached, _ = cli_json(capsys, tmp_path, "--prompt", "abc", "--no-cache", *options)
    assert streamed["ids"] == base["ids"] == uncached["ids"] and uncached["kv_cache_bytes"] == 0
    assert out.out.startswith(base["text"])               # the streamed text, then the JSON line
    long, out = cli_json(capsys, tmp_path, "--prompt", "x" * (CFG.n_ctx + 5), "--max-new-tokens", 3)
    assert long["cropped"] == 5 and "cropped to the last 32 (5 dropped)" in out.err
    assert long["refills"] == 1 and "refilled 1 time" in out.err


def test_cli_bad_inputs(twins, tmp_path, capsys):
    twins[0].save(tmp_path)
    for args, message in [([str(tmp_path), "--top-p", "2"], "top_p"),
                          ([str(tmp_path), "--twin", "numpy", "--device", "cpu"], "torch twin only"),
                          ([str(tmp_path / "missing")], "not a folder")]:
        with pytest.raises(SystemExit) as stop:                  # one line on stderr, exit status 2
            sample.main(args)
        assert stop.value.code == 2 and message in capsys.readouterr().err, args
    with pytest.raises(ValueError, match="empty prompt"):
        sample.main([str(tmp_path), "--prompt", ""])
    with pytest.raises(ValueError, match="no tokenizer for a vocabulary of 97"):
        sample.tokenizer_for(97)
