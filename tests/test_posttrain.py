"""Post-training (chapter 9): the instruction data and its splits, the template and the loss mask,
LoRA in both twins (numpy's backward against torch autograd and finite differences, merging),
the DPO loss and step, evaluation, sampling to <|end|>, and the
instruction files of the GPU branch.

Tolerances: float64 gradients ||g_numpy - g_torch|| / ||g_torch|| <= 1e-6 (both sides round
at 1e-16; the products in between lose a few digits); float32 outputs and gradients within
1e-4 relative (float32 keeps about 7 digits, and the sums over a batch and a vocabulary lose
two or three); finite differences in float64 with step 1e-6 within 1e-6 relative (the central
difference's error is of order step^2 times the third derivative).
"""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig
from lib.numpy_twin import posttrain as npt
from lib.posttrain import alpaca, experiment, instructions, loops, scores, template
from lib.torch_twin import posttrain as tpt


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=259, n_ctx=32, n_layer=2, n_head=4, n_embd=32), **kw})


def rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b))


def twin_pair(config, dtype=np.float64, seed=0):
    model = nt.GPT(config, seed=seed).astype(dtype)
    tmodel = tt.GPT(config, seed=seed).to(torch.float64 if dtype == np.float64 else torch.float32)
    return model, tmodel


# ---- LoRA -----------------------------------------------------------------------------------
def lora_pair(n_in=12, n_out=10, rank=3, alpha=6.0, dtype=np.float64, bias=True):
    base = nt.Linear(n_in, n_out, bias=bias).astype(dtype)
    base.weight[...] = np.random.default_rng(0).standard_normal((n_out, n_in))
    if bias:
        base.bias[...] = np.random.default_rng(1).standard_normal(n_out)
    layer = npt.LoRALinear(base, rank, alpha, seed=2)
    layer.lora_B[...] = np.random.default_rng(3).standard_normal(layer.lora_B.shape)   # as after training
    tbase = tt.Linear(n_in, n_out, bias=bias).to(torch.float64 if dtype == np.float64 else torch.float32)
    with torch.no_grad():
        tbase.weight.copy_(torch.as_tensor(base.weight))
        if bias:
            tbase.bias.copy_(torch.as_tensor(base.bias))
    tlayer = tpt.LoRALinear(tbase, rank, alpha, seed=2)
    with torch.no_grad():
        tlayer.lora_B.copy_(torch.as_tensor(layer.lora_B))
    return layer, tlayer


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-6), (np.float32, 1e-4)])
def test_lora_forward_and_backward_match_torch_autograd(dtype, tol):
    layer, tlayer = lora_pair(dtype=dtype)
    assert np.array_equal(layer.lora_A, tlayer.lora_A.detach().numpy())           # the same seeded init
    x = np.random.default_rng(4).standard_normal((2, 5, 12)).astype(dtype)
    dy = np.random.default_rng(5).standard_normal((2, 5, 10)).astype(dtype)
    y, cache = layer.forward(x)
    expected = x @ layer.weight.T + layer.bias + layer.scale * x @ layer.lora_A.T @ layer.lora_B.T
    assert rel(y, expected) < tol
    layer.zero_grad()
    dx = layer.backward(dy, cache)
    tx = torch.tensor(x, requires_grad=True)
    ty = tlayer(tx)
    (ty * torch.as_tensor(dy)).sum().backward()
    assert rel(y, ty.detach().numpy()) < tol
    assert rel(dx, tx.grad.numpy()) < tol
    for name in ("lora_A", "lora_B"):
        assert rel(layer.grads[name], getattr(tlayer, name).grad.numpy()) < tol
    assert tlayer.weight.grad is None and not tlayer.weight.requires_grad        # the base stays frozen
    assert [n for n, _ in tlayer.named_parameters()] == ["lora_A", "lora_B"] == [n for n, _ in layer.named_parameters()]


def test_lora_backward_matches_finite_differences():
    layer, _ = lora_pair(n_in=5, n_out=4, rank=2)
    x = np.random.default_rng(6).standard_normal((3, 5))
    dy = np.random.default_rng(7).standard_normal((3, 4))
    layer.zero_grad()
    dx = layer.backward(dy, layer.forward(x)[1])

    def loss():
        return float((layer.forward(x)[0] * dy).sum())

    for name in ("lora_A", "lora_B"):
        assert rel(layer.grads[name], numeric_grad(loss, getattr(layer, name))) < 1e-6, name
    assert rel(dx, numeric_grad(loss, x)) < 1e-6


def numeric_grad(f, p, h=1e-6):
    """d f / d p by central differences, p changed in place and restored."""
    numeric = np.zeros_like(p)
    for i in np.ndindex(p.shape):
        old = p[i]
        p[i] = old + h
        up = f()
        p[i] = old - h
        numeric[i] = (up - f()) / (2 * h)
        p[i] = old
    return numeric


def test_lora_starts_as_its_base_and_merges_to_equal_outputs():
    layer, tlayer = lora_pair()
    x = np.random.default_rng(8).standard_normal((4, 12))
    base = nt.Linear(12, 10).astype(np.float64)
    base.weight[...] = layer.weight
    base.bias[...] = layer.bias
    fresh = npt.LoRALinear(base, 3, 6.0, seed=9)
    assert np.array_equal(fresh.forward(x)[0], base.forward(x)[0])               # B = 0: the base layer
    merged = layer.merge()
    assert isinstance(merged, nt.Linear) and not isinstance(merged, npt.LoRALinear)
    np.testing.assert_allclose(merged.forward(x)[0], layer.forward(x)[0], rtol=1e-12, atol=1e-12)
    tmerged = tlayer.merge()
    assert type(tmerged) is tt.Linear
    with torch.no_grad():
        np.testing.assert_allclose(tmerged(torch.as_tensor(x)).numpy(), tlayer(torch.as_tensor(x)).numpy(),
                                   rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="rank must be an integer from 1 to 10, got 11"):
        npt.LoRALinear(base, 11, 1.0)
    with pytest.raises(ValueError, match="rank must be an integer from 1 to 10, got 0"):
        tpt.LoRALinear(tt.Linear(12, 10), 0, 1.0)


def test_lora_on_a_gpt_counts_trains_and_merges_in_both_twins():
    config = tiny()
    model, tmodel = twin_pair(config)
    npt.add_lora(model, rank=4, alpha=8)
    tpt.add_lora(tmodel, rank=4, alpha=8)
    C, F = config.n_embd, config.hidden_dim
    per_block = 4 * ((C + 3 * C) + (C + C) + (C + F) + (F + C))      # r (in + out) for each of the four
    names = [n for n, _ in npt.trainable_parameters(model)]
    assert names == [n for n, _ in tpt.trainable_parameters(tmodel)]              # name for name
    assert sum(p.size for _, p in npt.trainable_parameters(model)) == config.n_layer * per_block
    assert {n for n, p in tmodel.named_parameters() if p.requires_grad} == set(names)
    rng = np.random.default_rng(0)
    for (_, p), (_, tp) in zip(npt.trainable_parameters(model), tpt.trainable_parameters(tmodel)):
        p[...] = rng.standard_normal(p.shape) * 0.05
        with torch.no_grad():
            tp.copy_(torch.as_tensor(p))
    idx = rng.integers(0, 259, (2, 9))
    logits = model.forward(idx)
    with torch.no_grad():
        tlogits = tmodel(torch.as_tensor(idx)).numpy()
    assert rel(logits, tlogits) < 1e-10
    npt.merge_lora(model)
    tpt.merge_lora(tmodel)
    assert not any(isinstance(m, npt.LoRALinear) for m in model.modules())
    assert not any(isinstance(m, tpt.LoRALinear) for m in tmodel.modules())
    np.testing.assert_allclose(model.forward(idx), logits, rtol=1e-10, atol=1e-10)   # merged: equal logits
    with torch.no_grad():
        np.testing.assert_allclose(tmodel(torch.as_tensor(idx)).numpy(), logits, rtol=1e-10, atol=1e-10)


# ---- the masked loss and DPO through the model -----------------------------------------------------
def a_batch(n=4):
    """n (prompt, response) pairs short enough for tiny()'s context: "Say:" and 8 characters of a
    line, then its first 6 characters."""
    lines = [it["input"] for it in instructions.instruction_data(train_per_task=2, test_per_task=1)["train"][:n]]
    return [(template.prompt_ids("Say:", line[:8]), template.response_ids(line[:6])) for line in lines]


@pytest.mark.parametrize("mask_prompt", [True, False])
def test_masked_loss_and_its_gradient_match_torch(mask_prompt):
    config = tiny()
    model, tmodel = twin_pair(config)
    npt.add_lora(model, 2, 4)
    tpt.add_lora(tmodel, 2, 4)
    for (_, p), (_, tp) in zip(npt.trainable_parameters(model), tpt.trainable_parameters(tmodel)):
        p[...] = np.random.default_rng(1).standard_normal(p.shape) * 0.1
        with torch.no_grad():
            tp.copy_(torch.as_tensor(p))
    x, y, mask = template.chat_batch(a_batch(), mask_prompt)
    model.zero_grad()
    loss, dlogits = npt.masked_cross_entropy(model.forward(x), y, mask)
    model.backward(dlogits)
    tloss = tpt.masked_cross_entropy(tmodel(torch.as_tensor(x)), torch.as_tensor(y), torch.as_tensor(mask))
    tloss.backward()
    assert abs(loss - tloss.item()) < 1e-12
    for name, tp in tpt.trainable_parameters(tmodel):
        assert rel(model.grads[name], tp.grad.numpy()) < 1e-6, name
    logp = np.log(np.exp(model.forward(x)) / np.exp(model.forward(x)).sum(-1, keepdims=True))
    expected = -(np.take_along_axis(logp, y[..., None], -1)[..., 0] * mask).sum() / mask.sum()
    assert abs(loss - expected) < 1e-12                                           # the masked mean, written out


def test_chat_batch_masks_the_prompt_and_the_padding():
    pairs = [(template.prompt_ids("First word?", "Go to."), template.response_ids("Go")),
             (template.prompt_ids("How many words?", "Go to, go."), template.response_ids("3"))]
    x, y, mask = template.chat_batch(pairs)
    assert template.render(np.concatenate(pairs[0])) == "<|user|>First word?\nGo to.<|assistant|>Go<|end|>"
    assert template.render(y[0][mask[0] == 1]) == "Go<|end|>" and template.render(y[1][mask[1] == 1]) == "3<|end|>"
    assert x[0][mask[0] == 1][0] == template.ASSISTANT              # the first response token follows it
    _, _, full = template.chat_batch(pairs, mask_prompt=False)
    assert full[1].sum() == len(np.concatenate(pairs[1])) - 1 and full[0, -1] == 0   # real tokens only
    with pytest.raises(ValueError, match="take 30 tokens; expected at most n_ctx \\+ 1 = 9"):
        template.chat_batch(pairs, n_ctx=8)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-6), (np.float32, 1e-4)])
def test_dpo_step_gradients_match_torch_autograd(dtype, tol):
    config = tiny()
    model, tmodel = twin_pair(config, dtype)
    triples = [(p, r, template.response_ids("NOT " + template.render(r[:-1]))) for p, r in a_batch()]
    batch = [(p, c) for p, c, _ in triples] + [(p, r) for p, _, r in triples]
    x, y, mask = template.chat_batch(batch)
    ref = np.random.default_rng(2).standard_normal(len(batch)) - 20.0
    model.zero_grad()
    logp, cache = npt.response_logp(model, x, y, mask)
    B = len(logp) // 2
    loss, (dc, dr, _, _) = npt.dpo_loss(logp[:B], logp[B:], ref[:B], ref[B:], 0.5)
    npt.response_logp_backward(model, np.concatenate([dc, dr]), cache)
    tlogp = tpt.response_logp(tmodel, *(torch.as_tensor(a) for a in (x, y, mask)))
    tref = torch.as_tensor(ref).to(tlogp.dtype)
    tloss = tpt.dpo_loss(tlogp[:B], tlogp[B:], tref[:B], tref[B:], 0.5)
    tloss.backward()
    assert rel(logp, tlogp.detach().numpy()) < tol and abs(loss - tloss.item()) < tol * abs(loss)
    for name, tp in tmodel.named_parameters():
        assert rel(model.grads[name], tp.grad.numpy()) < tol, name


def test_dpo_loss_gradient_matches_autograd_and_finite_differences():
    rng = np.random.default_rng(0)
    logps = [rng.standard_normal(6) * 3 for _ in range(4)]
    loss, grads = npt.dpo_loss(*logps, 0.7)
    tensors = [torch.tensor(a, requires_grad=True) for a in logps]
    tloss = tpt.dpo_loss(*tensors, 0.7)
    tloss.backward()
    assert abs(loss - tloss.item()) < 1e-14
    for g, t in zip(grads, tensors):
        assert rel(g, t.grad.numpy()) < 1e-6
    for k in range(4):
        assert rel(grads[k], numeric_grad(lambda: npt.dpo_loss(*logps, 0.7)[0], logps[k])) < 1e-6


def test_dpo_loss_is_stable_when_margins_reach_the_thousands():
    pc = np.array([0.0, 0.0, -1.0])
    pr = np.array([-5000.0, 5000.0, -1.0])                  # margins +5000, -5000, 0
    zero = np.zeros(3)
    loss, (gc, gr, grc, grr) = npt.dpo_loss(pc, pr, zero, zero, 1.0)
    assert math.isfinite(loss) and abs(loss - (0.0 + 5000.0 + math.log(2)) / 3) < 1e-9
    np.testing.assert_allclose(gc, [0.0, -1 / 3, -0.5 / 3], atol=1e-15)
    assert np.array_equal(gr, -gc) and np.array_equal(grc, -gc) and np.array_equal(grr, gc)
    tensors = [torch.tensor(a, requires_grad=True) for a in (pc, pr, zero, zero)]
    tloss = loops.dpo_loss(*tensors, 1.0)                       # the shared front, torch inputs: the torch twin
    tloss.backward()
    assert abs(tloss.item() - loss) < 1e-9 and np.allclose(tensors[0].grad.numpy(), gc)
    assert loops.dpo_loss(pc, pr, zero, zero, 1.0) == loss     # numpy inputs: the numpy twin's value
    f32 = [a.astype(np.float32) for a in (pc, pr, zero, zero)]
    assert abs(npt.dpo_loss(*f32, np.float32(1.0))[0] - loss) < 1e-3 * loss   # float32 too
    with pytest.raises(ValueError, match="must be \\(B,\\) arrays of one shape"):
        loops.dpo_loss(pc, pr[:2], zero, zero, 1.0)


def test_the_dpo_and_sft_steps_lower_their_losses_in_both_twins():
    config = tiny()
    triples = [(p, r, template.response_ids("NOT " + template.render(r[:-1]))) for p, r in a_batch()]
    for twin in ("numpy", "torch"):
        GPT = nt.GPT if twin == "numpy" else tt.GPT
        model = GPT(config, seed=0)
        tuning = replace(experiment.SFT, steps=80, batch_size=4, lr=1e-2)
        history = loops.sft(model, [(p, c) for p, c, _ in triples], tuning, progress=False)
        assert history["loss"][-1] < 0.5 * history["loss"][0], twin
        assert history["optimizer_bytes"] == 2 * 4 * sum(int(np.prod(s)) for s in
                                                         (p.shape for _, p in model.named_parameters()))
        ref = loops.reference_logps(model, triples)
        preference = replace(experiment.DPO, beta=0.5, steps=20, batch_size=4, lr=1e-3)
        dpo = loops.dpo(model, triples, ref, preference, progress=False)
        assert abs(dpo["loss"][0] - math.log(2)) < 1e-3 and dpo["loss"][-1] < 0.5, twin   # starts at log 2


# ---- the data ---------------------------------------------------------------------------------------
def test_instruction_data_splits_and_checkable_answers():
    from lib.evaluate import held_out_plays

    data = instructions.instruction_data(train_per_task=100, test_per_task=40)
    held_out = {p["slug"] for p in held_out_plays()}
    for split, n in (("train", 100), ("test", 40)):
        assert [it["task"] for it in data[split]] == [t for t in instructions.TASKS for _ in range(n)]
    train_lines = {(it["play"], it["input"]) for it in data["train"]}
    for it in data["test"]:
        assert it["choices"][it["label"]] == it["output"] and len(set(it["choices"])) == 4
        by = instructions.TASKS[it["task"]][1]
        if by == "plays":                                    # a whole play held out
            assert it["play"] in held_out and not any(it["input"] == line for _, line in train_lines)
        else:                                                # a line held out of a training play
            assert it["play"] not in held_out and (it["play"], it["input"]) not in train_lines
    for it in data["train"] + data["test"]:
        for choice in it["choices"]:                          # DPO trains on the wrong choices too
            tokens = len(template.prompt_ids(it["instruction"], it["input"])) + len(template.response_ids(choice))
            assert tokens <= instructions.N_CTX + 1
        if it["task"] == "capitals":
            assert it["output"] == it["input"].upper()
        if it["task"] == "words":
            assert it["output"] == str(len(it["input"].split()))
    assert instructions.instruction_data(train_per_task=100, test_per_task=40) == data            # seeded
    with pytest.raises(ValueError, match="has [0-9]+ test items; asked for 100000"):
        instructions.instruction_data(train_per_task=1, test_per_task=100000)


def test_preference_pairs_reject_a_wrong_choice():
    items = instructions.instruction_data(train_per_task=5, test_per_task=1)["train"]
    for it, (p, c, r) in zip(items, instructions.preference_pairs(items)):
        assert template.render(c) == it["output"] + "<|end|>" and template.render(r)[:-len("<|end|>")] in it["choices"]
        assert not np.array_equal(c, r)


# ---- evaluation and the paired test -----------------------------------------------------------------
def test_exact_match_is_greedy_decoding_to_end():
    config = tiny()
    for twin in ("numpy", "torch"):
        model = (nt.GPT if twin == "numpy" else tt.GPT)(config, seed=0)
        pairs = a_batch(3)
        loops.sft(model, pairs, replace(experiment.SFT, steps=40, batch_size=3, lr=3e-3), progress=False)
        model.eval()
        matched = scores.exact_match(model, pairs)
        lines = [template.render(prompt[len("<Say:") + 1:-1]) for prompt, _ in pairs]
        for line, (prompt, response), hit in zip(lines, pairs, matched):
            assert np.array_equal(template.prompt_ids("Say:", line), prompt)
            out = template.chat(model, "Say:", line, max_new_tokens=len(response) + 3)
            assert (out + "<|end|>" == template.render(response)) == hit, twin
        assert matched.any(), twin                           # it learnt some by heart


def test_instructions_in_the_json_format_of_the_gpu_branch(tmp_path):
    records = [{"instruction": "Give three tips.", "input": "", "output": "Eat, sleep, read."},
               {"instruction": "Translate.", "input": "Bonjour", "output": "Hello"}]
    as_list, as_lines = tmp_path / "data.json", tmp_path / "data.jsonl"
    as_list.write_text(json.dumps(records))
    as_lines.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert alpaca.load_instructions(as_list) == alpaca.load_instructions(as_lines) == records
    assert alpaca.alpaca_prompt(records[1]) == "### Instruction:\nTranslate.\n\n### Input:\nBonjour\n\n### Response:\n"
    from lib.tokenizer import gpt2_tiktoken
    enc = gpt2_tiktoken()
    pairs = alpaca.gpt2_pairs(alpaca.load_instructions(as_lines), enc.encode, enc.eot_token, 64)
    assert len(pairs) == 2 and pairs[1][1][-1] == enc.eot_token and enc.decode(list(pairs[1][1][:-1])) == "Hello"
    assert len(alpaca.gpt2_pairs(records, enc.encode, enc.eot_token, 8)) == 0        # too long for 8 tokens
    (tmp_path / "bad.jsonl").write_text('{"instruction": "x"}\n')
    with pytest.raises(ValueError, match="record 0 needs string fields instruction and output"):
        alpaca.load_instructions(tmp_path / "bad.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"instruction": \n')
    with pytest.raises(ValueError, match="not JSON nor JSON lines"):
        alpaca.load_instructions(tmp_path / "broken.jsonl")


def test_the_experiment_runs_and_caches_at_a_tiny_size(tmp_path, monkeypatch):
    """The experiment's every run, at a tiny size, from a random model of the small shape; its
    result cached, its instruction-tuned model saved."""
    import lib.pretrained

    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(lib.pretrained, "shakespeare_small", lambda twin="numpy": tt.GPT(GPTConfig.small(), seed=0))
    monkeypatch.setattr(experiment, "DATA", dict(train_per_task=8, test_per_task=4, seed=0))
    monkeypatch.setattr(experiment, "SFT", replace(experiment.SFT, steps=3, batch_size=4))
    monkeypatch.setattr(experiment, "DPO", replace(experiment.DPO, steps=2, batch_size=2))
    result = experiment.experiment(progress=False)
    runs = result["runs"]
    assert set(runs) == {"base", "sft", "sft_no_mask", "lora", "dpo", "dpo_no_ref", "dpo_small_beta"}
    assert result["tasks"] == [t for t in instructions.TASKS for _ in range(4)]
    for name, run in runs.items():
        assert all(len(run[k]) == 20 for k in ("exact", "choice", "preference")) and run["response_loss"] > 0, name
    assert runs["lora"]["trainable"] < runs["sft"]["trainable"] == tt.GPT(GPTConfig.small(vocab_size=259)).num_params()
    assert runs["lora"]["optimizer_bytes"] == 8 * runs["lora"]["trainable"]
    assert all(runs[n]["kl"] >= 0 for n in ("dpo", "dpo_no_ref", "dpo_small_beta"))
    assert experiment.experiment_file().is_file()
    assert experiment.experiment(progress=False) == result                  # read from the cache
    assert experiment.sft_model("numpy").config.vocab_size == 259


@pytest.mark.parametrize("settings, field, value, message", [
    ("SFT", "steps", 0, "steps must be an integer >= 1, got 0"),
    ("SFT", "weight_decay", -0.1, "weight_decay must be a number >= 0, got -0.1"),
    ("LORA", "rank", 2.5, "rank must be an integer >= 1, got 2.5"),
    ("LORA", "alpha", 0, "alpha must be a number > 0, got 0"),
    ("DPO", "beta", -1.0, "beta must be a number > 0, got -1.0"),
    ("DPO", "seed", None, "seed must be an integer >= 0, got None")])
def test_bad_training_settings_fail_where_they_are_built(settings, field, value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        replace(getattr(experiment, settings), **{field: value})
