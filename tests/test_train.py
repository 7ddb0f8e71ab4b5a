"""Training: the loss, AdamW, the schedule, clipping, accumulation, resume, NaN stop, bad input.

Tolerances:
- float64 comparisons (AdamW against torch.optim.AdamW, accumulation against one big batch,
  cross-entropy against torch): 1e-10. The two sides do the same arithmetic in a different
  order (lerp against multiply-add, sums over B*T positions split in two), which moves float64
  results by ~1e-15 per step; 1e-10 leaves room for 20 steps of that and still catches any
  wrong constant (a missing bias correction moves parameters by >= 1e-4).
- Resume: exact equality. Same process, same arithmetic, same batches: a resumed run must
  reproduce every loss bit for bit.
- numpy twin against torch twin in float32: 1e-4 on losses, the bound tests/test_model.py
  uses for logits (float32 rounding in a different order, about 1e-6 here).
- float16 queued step against `train_step` (with a GradScaler): exact equality. Both run the same
  kernels in the same order; they differ only in whether the host reads the loss and norm.
"""
import json
import re
import math

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.checkpoint import latest_checkpoint, load_checkpoint
from lib.config import GPTConfig, TrainConfig, uses_weight_decay
import lib.progress
from lib.history import read_history
from lib.schedule import lr_at
from lib.torch_twin.train import queue_step
from lib.train import evaluate_loss, main, perplexity, train

F64 = 1e-10


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=64, n_ctx=16, n_layer=2, n_head=2, n_embd=32), **kw})


def corpus(n=6000, seed=0):
    """Learnable synthetic token ids: a repeating ramp with some random tokens mixed in."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n) % 50
    noise = rng.random(n) < 0.1
    ids[noise] = rng.integers(0, 64, noise.sum())
    return ids.astype(np.uint16)


DATA = corpus()
TRAIN, VAL = DATA[:5000], DATA[5000:]
FAST = dict(batch_size=4, block_size=16, warmup_iters=5, eval_interval=50, eval_iters=2)


def batch(seed, B=4, T=16, V=64):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run faster on one thread, and on a busy 2-core machine two OpenMP threads
    can slow a step twentyfold by waiting on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- the pieces --------------------------------------------------------------------------------
def test_cross_entropy_matches_torch_and_its_gradient_float64():
    rng = np.random.default_rng(0)
    logits, targets = rng.standard_normal((3, 5, 11)) * 4, rng.integers(0, 11, (3, 5))
    loss, dlogits = nt.cross_entropy(logits, targets)
    t = torch.tensor(logits, requires_grad=True)
    t_loss = tt.cross_entropy(t, torch.tensor(targets))
    t_loss.backward()
    assert abs(loss - t_loss.item()) < F64
    np.testing.assert_allclose(dlogits, t.grad.numpy(), atol=F64, rtol=0)


def test_cross_entropy_is_stable_and_perplexity_of_uniform_is_vocab_size():
    huge = np.zeros((1, 2, 8), np.float32)
    huge[0, :, 3] = 1e4                                      # exp(1e4) overflows without the max shift
    loss, dlogits = nt.cross_entropy(huge, np.array([[3, 4]]))
    assert np.isfinite(loss) and np.isfinite(dlogits).all()
    assert abs(loss - 1e4 / 2) < 1.0                         # target 3: ~0, target 4: ~1e4
    loss, _ = nt.cross_entropy(np.zeros((2, 3, 256)), np.zeros((2, 3), int))
    assert nt.perplexity(loss) == pytest.approx(256, rel=1e-12)
    assert tt.perplexity(torch.tensor(loss)) == pytest.approx(256, rel=1e-6)


def test_perplexity_of_a_model_is_exp_of_its_loss_for_both_twins():
    """A model whose token embedding is zero (so its tied head too) gives every token logit 0:
    uniform over V, loss ln V and perplexity V (up to float32 rounding, 1e-5). The twins agree
    on the same weights to the float32 bound 1e-4."""
    ids = corpus(200)
    numpy_model, torch_model = nt.GPT(tiny(), seed=3), tt.GPT(tiny(), seed=3)
    assert perplexity(numpy_model, ids) == pytest.approx(math.exp(evaluate_loss(numpy_model, ids)), rel=1e-12)
    assert perplexity(torch_model, ids) == pytest.approx(perplexity(numpy_model, ids), rel=1e-4)
    dict(numpy_model.named_parameters())["wte.weight"][:] = 0.0
    with torch.no_grad():
        torch_model.wte.weight.zero_()
    for model in (numpy_model, torch_model):
        assert perplexity(model, ids, block_size=8) == pytest.approx(64, rel=1e-5)
    with pytest.raises(ValueError, match="token id 64, but the model's vocab_size is 64"):
        perplexity(numpy_model, np.full(40, 64))
    with pytest.raises(ValueError, match="block_size must be between 1 and the model's n_ctx=16, got 0"):
        perplexity(torch_model, ids, block_size=0)


def test_cross_entropy_rejects_targets_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 8\), got min 0 max 8"):
        nt.cross_entropy(np.zeros((1, 2, 8)), np.array([[0, 8]]))


def test_weight_decay_goes_to_matrices_and_embeddings_only():
    model = tt.GPT(tiny())
    decayed = {n for n, p in model.named_parameters() if uses_weight_decay(n, p.ndim)}
    assert decayed == {"wte.weight", "wpe.weight"} | {f"h.{i}.{m}.weight" for i in range(2)
                                                      for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    opt = tt.AdamW(model.named_parameters(), weight_decay=0.1)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for n, p in model.named_parameters() if n in decayed}
    assert set(nt.AdamW(nt.GPT(tiny()).named_parameters()).decay.items()) == \
        {(n, n in decayed) for n, _ in model.named_parameters()}


@pytest.mark.parametrize("reference", ["torch.optim.AdamW", "lib.torch_twin.AdamW"])
def test_numpy_adamw_equals_torch_adamw_over_20_steps_float64(reference):
    """Against torch's plain (single-tensor) AdamW, and against the torch twin's, which uses
    torch's fused kernel (on the CPU too)."""
    model = nt.GPT(tiny(), seed=3).astype(np.float64)
    params = {n: torch.tensor(p.copy(), requires_grad=True) for n, p in model.named_parameters()}
    decay = [p for n, p in params.items() if uses_weight_decay(n, p.ndim)]
    other = [p for n, p in params.items() if not uses_weight_decay(n, p.ndim)]
    settings = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    ours = nt.AdamW(model.named_parameters(), weight_decay=0.1, **settings)
    if reference == "torch.optim.AdamW":
        ref = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                foreach=False, **settings)
    else:
        ref = tt.AdamW(params.items(), weight_decay=0.1, **settings)
        assert all(group["fused"] for group in ref.param_groups)
    rng = np.random.default_rng(0)
    for step in range(20):
        lr = lr_at(step, 3e-3, 3e-4, 5, 20)                 # a changing rate, as in training
        grads = {n: rng.standard_normal(p.shape) for n, p in model.named_parameters()}
        ours.lr = lr
        ours.step(grads)
        for group in ref.param_groups:
            group["lr"] = lr
        for n, p in params.items():
            p.grad = torch.tensor(grads[n])
        ref.step()
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p, params[n].detach().numpy(), atol=F64, rtol=0, err_msg=n)
    assert ours.steps == 20


def test_schedule_follows_its_formula():
    lr, min_lr, warmup, max_iters = 1e-3, 1e-4, 100, 2000
    assert lr_at(0, lr, min_lr, warmup, max_iters) == pytest.approx(lr / warmup)
    assert lr_at(49, lr, min_lr, warmup, max_iters) == pytest.approx(lr * 50 / warmup)
    assert lr_at(99, lr, min_lr, warmup, max_iters) == pytest.approx(lr)
    assert lr_at(100, lr, min_lr, warmup, max_iters) == pytest.approx(lr)
    assert lr_at(1050, lr, min_lr, warmup, max_iters) == pytest.approx((lr + min_lr) / 2)  # cosine halfway
    s = 100 + 1900 // 4
    assert lr_at(s, lr, min_lr, warmup, max_iters) == pytest.approx(min_lr + (lr - min_lr) * (1 + math.cos(math.pi / 4)) / 2)
    assert lr_at(2000, lr, min_lr, warmup, max_iters) == pytest.approx(min_lr)
    assert lr_at(5000, lr, min_lr, warmup, max_iters) == min_lr
    after = [lr_at(s, lr, min_lr, warmup, max_iters) for s in range(100, 2001)]
    assert all(a >= b for a, b in zip(after, after[1:]))     # never rises after warmup


def test_clipping_scales_to_max_norm_and_matches_torch():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[0.0, 4.0]])}  # global norm 5
    assert nt.clip_grad_norm(grads, 10.0) == pytest.approx(5.0)
    np.testing.assert_array_equal(grads["a"], [3.0, 0.0])  # below the bound: untouched
    assert nt.clip_grad_norm(grads, 1.0) == pytest.approx(5.0)
    assert nt.grad_norm(grads) == pytest.approx(1.0 / (5.0 + 1e-6) * 5.0, abs=1e-12)
    np.testing.assert_allclose(grads["b"], [[0.0, 4.0 / (5.0 + 1e-6)]], rtol=1e-12)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((7, 3)), rng.standard_normal(5)]
    mine = {str(i): a.copy() for i, a in enumerate(arrays)}
    params = [torch.zeros(a.shape, dtype=torch.float64) for a in arrays]
    for p, a in zip(params, arrays):
        p.grad = torch.tensor(a)
    theirs = {str(i): torch.tensor(a) for i, a in enumerate(arrays)}       # the torch twin's gradients
    norm = tt.clip_grad_norm(theirs, 0.5).item()
    assert norm == pytest.approx(torch.nn.utils.clip_grad_norm_(params, 0.5).item(), rel=1e-12)  # torch's own
    assert nt.clip_grad_norm(mine, 0.5) == pytest.approx(norm, rel=1e-12)
    for i, p in enumerate(params):
        np.testing.assert_allclose(mine[str(i)], p.grad.numpy(), atol=F64, rtol=0)
        np.testing.assert_allclose(theirs[str(i)].numpy(), p.grad.numpy(), atol=F64, rtol=0)


def test_gradient_accumulation_equals_one_big_batch_float64():
    x, y = batch(7, B=6)
    numpy_runs, torch_runs = [], []
    for k in (1, 3):                                        # one batch of 6, or 3 micro-batches of 2
        micro = [(x[i * 6 // k:(i + 1) * 6 // k], y[i * 6 // k:(i + 1) * 6 // k]) for i in range(k)]
        model = nt.GPT(tiny(), seed=1).astype(np.float64)
        loss, norm = nt.train_step(model, nt.AdamW(model.named_parameters()), micro, 1e-3, 1.0)
        numpy_runs.append((loss, norm, model.state_dict()))
        tmodel = tt.GPT(tiny(), seed=1).double()
        tmicro = [(torch.tensor(a), torch.tensor(b)) for a, b in micro]
        loss, norm = tt.train_step(tmodel, tt.AdamW(tmodel.named_parameters()), tmicro, 1e-3, 1.0)
        torch_runs.append((loss, norm, tmodel.state_dict()))
    for (loss1, norm1, state1), (loss3, norm3, state3) in (numpy_runs, torch_runs):
        assert abs(loss1 - loss3) < F64 and abs(norm1 - norm3) < F64
        for name in state1:
            np.testing.assert_allclose(np.asarray(state1[name]), np.asarray(state3[name]), atol=F64, rtol=0,
                                       err_msg=name)


# ---- the loop ----------------------------------------------------------------------------------
def test_numpy_twin_learns_and_matches_the_torch_twin():
    histories = {}
    for name, twin in (("numpy", nt), ("torch", tt)):
        histories[name] = train(twin.GPT(tiny(), seed=0), TRAIN, VAL,
                                TrainConfig(max_iters=100, lr=3e-3, min_lr=3e-4, **FAST), progress=False)
    numpy_h, torch_h = histories["numpy"], histories["torch"]
    assert numpy_h["eval_step"] == [0, 50, 100]
    assert numpy_h["val_loss"][0] == pytest.approx(math.log(64), abs=0.1)      # untrained: about ln V
    assert numpy_h["val_loss"][-1] < numpy_h["val_loss"][0] - 1.0               # it learned
    np.testing.assert_allclose(numpy_h["train_loss"], torch_h["train_loss"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(numpy_h["val_loss"], torch_h["val_loss"], atol=1e-4, rtol=0)
    assert len(numpy_h["step"]) == len(numpy_h["lr"]) == len(numpy_h["grad_norm"]) == 100


class Crash(Exception):
    pass


def crash_at(when):
    def callback(step, history):
        if step == when:
            raise Crash
    return callback


@pytest.mark.parametrize("twin", [nt, tt], ids=["numpy", "torch"])
def test_resume_reproduces_an_uninterrupted_run(twin, tmp_path):
    settings = TrainConfig(max_iters=200, checkpoint_interval=100, **FAST)
    whole = train(twin.GPT(tiny(), seed=0), TRAIN, VAL, settings, out=tmp_path / "whole", progress=False)
    with pytest.raises(Crash):                              # the first run dies right after step 100
        train(twin.GPT(tiny(), seed=0), TRAIN, VAL, settings, out=tmp_path / "cut", callback=crash_at(101),
              progress=False)
    assert latest_checkpoint(tmp_path / "cut").name == "step-000100"
    model = twin.GPT(tiny(), seed=99)                       # other weights: resume must overwrite them
    resumed = train(model, TRAIN, VAL, settings, out=tmp_path / "cut", resume=True, progress=False)
    assert resumed["step"] == list(range(1, 201))
    assert resumed["train_loss"] == whole["train_loss"]
    assert resumed["val_loss"] == whole["val_loss"] and resumed["eval_step"] == whole["eval_step"]
    assert read_history(tmp_path / "cut")["train_loss"] == whole["train_loss"]
    _, state, arrays, meta = load_checkpoint(tmp_path / "cut")
    _, whole_state, whole_arrays, _ = load_checkpoint(tmp_path / "whole")
    assert meta["step"] == 200 and meta["optimizer_steps"] == 200
    for name in whole_state:
        np.testing.assert_array_equal(state[name], whole_state[name])
    for name in whole_arrays:
        if not name.startswith("rng."):                     # RNG states: checked below
            np.testing.assert_array_equal(arrays[name], whole_arrays[name])
    if twin is tt:                                          # restored at 100 (GPT(seed=99) had moved it), unused since
        _, _, at_100, _ = load_checkpoint(tmp_path / "cut" / "step-000100")
        np.testing.assert_array_equal(arrays["rng.torch_cpu"], at_100["rng.torch_cpu"])


@pytest.mark.parametrize("twin", [nt, tt], ids=["numpy", "torch"])
def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(twin, tmp_path):
    model = twin.GPT(tiny(), seed=0)

    def poison(step, history):
        if step == 7:                                       # corrupt one weight after step 7
            weight = model.wte.weight
            (weight.data if twin is tt else weight)[:] = float("nan")

    with pytest.raises(FloatingPointError, match=r"training stopped at step 8: the loss is nan.*"
                                                 r"the last good checkpoint is .*step-000007"):
        train(model, TRAIN, VAL, TrainConfig(max_iters=20, checkpoint_interval=1, **FAST), out=tmp_path,
              callback=poison, progress=False)
    _, state, _, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 7 and all(np.isfinite(v).all() for v in state.values())
    assert read_history(tmp_path)["step"] == list(range(1, 8))


def count_host_reads(monkeypatch):
    """A list that grows by one name each time the host reads a torch tensor's value (each read
    waits for the device): .item(), .tolist(), bool(), float(), int(), .cpu(), .numpy()."""
    reads = []

    def counted(name, original):
        return lambda self, *args, **kw: (reads.append(name), original(self, *args, **kw))[1]
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
    return reads


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_torch_training_reads_the_device_at_reports_only(dtype, monkeypatch):
    if dtype == "float16":                                  # with a GradScaler, as on a T4
        monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "1")
    monkeypatch.setattr(lib.progress, "READ_SECONDS", math.inf)  # no report by the clock
    reads, counts = count_host_reads(monkeypatch), []
    for n in (2, 8):                                        # evaluations at 0 and n, one read of the losses
        model = tt.GPT(tiny(), seed=0)
        model._check_idx = lambda *args: None          # reads min and max of the ids, on the CPU only
        reads.clear()
        history = train(model, TRAIN, VAL, TrainConfig(max_iters=n, dtype=dtype, **FAST), progress=False)
        counts.append(len(reads))
        assert history["step"] == list(range(1, n + 1)) and all(map(math.isfinite, history["train_loss"]))
    assert counts[0] == counts[1], counts


def test_a_callback_reads_the_device_at_its_own_steps_only(monkeypatch):
    """callback_every=k: the queued losses are read at each call, so a run of 2k steps reads
    as often as a run of 8k steps with k four times larger."""
    monkeypatch.setattr(lib.progress, "READ_SECONDS", math.inf)  # no report by the clock
    reads, counts = count_host_reads(monkeypatch), []
    for n in (4, 16):
        model = tt.GPT(tiny(), seed=0)
        model._check_idx = lambda *args: None          # reads min and max of the ids, on the CPU only
        calls = []
        reads.clear()
        history = train(model, TRAIN, VAL, TrainConfig(max_iters=n, callback_every=n // 2, **FAST),
                        callback=lambda step, h: calls.append(len(h["train_loss"])), progress=False)
        counts.append(len(reads))
        assert calls == [n // 2, n] and all(map(math.isfinite, history["train_loss"]))  # losses read by each call
    assert counts[0] == counts[1], counts


def test_an_evaluation_reads_the_device_once(monkeypatch):
    model = tt.GPT(tiny(), seed=0)
    batches = [tuple(torch.tensor(a) for a in batch(seed)) for seed in range(3)]
    model._check_idx = lambda *args: None              # reads min and max of the ids, on the CPU only
    reads = count_host_reads(monkeypatch)
    loss = tt.estimate_loss(model, batches)
    assert reads == ["item"]
    monkeypatch.undo()
    assert loss == pytest.approx(np.mean([tt.estimate_loss(model, [b]) for b in batches]), rel=1e-12)


def float16():
    """queue_step's and train_step's keyword arguments for float16 with a GradScaler, as on a T4."""
    return dict(autocast=lambda: torch.autocast("cpu", dtype=torch.float16), scaler=torch.amp.GradScaler("cpu"))


def overflow_once(parameter):
    """Make the next gradient of `parameter` infinite, as a float16 backward's is when the scale is too large."""
    left = [1]

    def hook(grad):
        if not left:
            return grad
        left.pop()
        return torch.full_like(grad, math.inf)
    parameter.register_hook(hook)


def snapshot(model, optimizer):
    return {**{k: v.clone() for k, v in model.state_dict().items()}, **optimizer.state_arrays()}


def assert_unchanged(before, model, optimizer):
    for name, value in snapshot(model, optimizer).items():
        assert np.array_equal(np.asarray(value), np.asarray(before[name])), name


@pytest.mark.parametrize("half", [False, True], ids=["float32", "float16"])
def test_a_queued_non_finite_step_leaves_the_weights_until_read(half):
    model = tt.GPT(tiny(), seed=0)
    optimizer, halted = tt.AdamW(model.named_parameters()), torch.zeros((), dtype=torch.bool)
    options = float16() if half else {}
    x, y = (torch.tensor(a) for a in batch(3))
    queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)
    before = snapshot(model, optimizer)
    hook = model.register_forward_hook(lambda module, inputs, logits: logits * float("nan"))
    loss, _ = queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)
    hook.remove()
    queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)   # a finite step, still skipped
    assert math.isnan(loss.item()) and halted.item() and optimizer.steps == 1
    assert_unchanged(before, model, optimizer)


def test_a_float16_step_whose_gradient_overflows_is_skipped_and_lowers_the_scale():
    model = tt.GPT(tiny(), seed=0)
    optimizer, halted = tt.AdamW(model.named_parameters()), torch.zeros((), dtype=torch.bool)
    options = float16()
    x, y = (torch.tensor(a) for a in batch(3))
    queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)
    before, scale = snapshot(model, optimizer), options["scaler"].get_scale()
    overflow_once(model.wte.weight)
    loss, norm = queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)
    assert math.isfinite(loss.item()) and not math.isfinite(norm.item()) and not halted.item()
    assert optimizer.steps == 1 and options["scaler"].get_scale() == scale / 2
    assert_unchanged(before, model, optimizer)
    queue_step(model, optimizer, [(x, y)], 1e-3, 1.0, halted, **options)   # the next step proceeds
    assert optimizer.steps == 2 and not torch.equal(model.wte.weight, before["wte.weight"])


def test_float16_queued_steps_equal_train_steps_with_their_reads():
    models = [tt.GPT(tiny(), seed=0) for _ in range(2)]
    optimizers = [tt.AdamW(m.named_parameters()) for m in models]
    queued, read, halted = float16(), float16(), torch.zeros((), dtype=torch.bool)
    for step in range(5):
        micro = [tuple(torch.tensor(a) for a in batch(step))]
        if step == 2:                                       # a skipped step in both
            for model in models:
                overflow_once(model.wte.weight)
        loss, norm = queue_step(models[0], optimizers[0], micro, 1e-3, 1.0, halted, **queued)
        expected = tt.train_step(models[1], optimizers[1], micro, 1e-3, 1.0, **read)
        assert np.array_equal([loss.item(), norm.item()], expected, equal_nan=True), step
        assert queued["scaler"].get_scale() == read["scaler"].get_scale()
    assert optimizers[0].steps == optimizers[1].steps == 4
    assert_unchanged(snapshot(models[1], optimizers[1]), models[0], optimizers[0])


def test_float16_training_records_a_skipped_step_and_goes_on(monkeypatch):
    monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "1")       # float16 with a GradScaler on the CPU
    model = tt.GPT(tiny(), seed=0)

    def callback(step, history):
        if step == 2:
            overflow_once(model.wte.weight)                 # step 3's gradient
    history = train(model, TRAIN, VAL, TrainConfig(max_iters=5, dtype="float16", **FAST), callback=callback,
                    progress=False)
    assert history["step"] == [1, 2, 3, 4, 5] and all(map(math.isfinite, history["train_loss"]))
    assert [math.isfinite(norm) for norm in history["grad_norm"]] == [True, True, False, True, True]


def test_history_is_written_and_a_fresh_run_replaces_old_checkpoints(tmp_path):
    train(nt.GPT(tiny()), TRAIN, VAL, TrainConfig(max_iters=4, checkpoint_interval=2, **FAST), out=tmp_path,
          progress=False)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000002", "step-000004"]
    history = train(nt.GPT(tiny()), TRAIN, VAL, TrainConfig(max_iters=3, checkpoint_interval=3, **FAST), out=tmp_path,
                    progress=False)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000003"]
    assert read_history(tmp_path) == json.loads(json.dumps(history))
    assert history["eval_step"] == [0, 3] and history["tokens_per_step"] == 4 * 16


# ---- bad input: a clear error before any step ----------------------------------------------------
@pytest.mark.parametrize("settings, message", [
    (dict(batch_size=400), r"a batch of 400 x 16 = 6400 tokens is larger than train_data \(5000 tokens\)"),
    (dict(block_size=32), r"block_size=32 is longer than the model's context n_ctx=16"),
    (dict(grad_accum=0), r"grad_accum must be an integer >= 1, got 0"),
    (dict(lr=1e-3, min_lr=1e-2), r"0 <= min_lr <= lr"),
    (dict(resume=True), r"resume=True needs out="),
])
def test_bad_settings_fail_before_any_step(settings, message):
    model = nt.GPT(tiny())
    before = {n: p.copy() for n, p in model.named_parameters()}
    options = {k: v for k, v in settings.items() if k != "resume"}        # resume is train's, not a setting
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        train(model, TRAIN, VAL, TrainConfig(max_iters=5, **{**FAST, **options}), resume=settings.get("resume", False),
              progress=False)
    assert all(np.array_equal(p, before[n]) for n, p in model.named_parameters())


def test_bad_data_fails_before_any_step():
    with pytest.raises(ValueError, match=r"a batch of 4 x 16 = 64 tokens is larger than val_data \(40 tokens\)"):
        train(nt.GPT(tiny()), TRAIN, VAL[:40], TrainConfig(**FAST), progress=False)
    with pytest.raises(ValueError, match=r"train_data holds token id 113, but the model's vocab_size is 64"):
        train(nt.GPT(tiny()), TRAIN + 50, VAL, TrainConfig(**FAST), progress=False)
    with pytest.raises(TypeError, match=r"model must be a lib.numpy_twin.GPT or a lib.torch_twin.GPT"):
        train(torch.nn.Linear(2, 2), TRAIN, VAL, TrainConfig(**FAST), progress=False)


# ---- the command line ------------------------------------------------------------------------------
TINY_CLI = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "4",
            "--eval-iters", "2", "--sample-tokens", "20", "--warmup-iters", "1", "--lr", "1e-2"]


@pytest.fixture
def text_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "text.txt"
    path.write_text("To be, or not to be, that is the question.\n" * 200)
    return path


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_cli_trains_prints_a_sample_and_a_json_line(twin, text_file, tmp_path, capsys):
    main(["--twin", twin, "--data", str(text_file), "--max-iters", "6", "--eval-interval", "3",
          "--out", str(tmp_path / "run"), "--json", "--device", "cpu", *TINY_CLI])
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert set(summary) == {"val_loss", "train_loss", "steps", "seconds", "tokens_per_s"}
    assert summary["steps"] == 6 and summary["tokens_per_s"] > 0 and summary["val_loss"] < math.log(256)
    assert any(line.startswith("sample:") for line in lines)
    assert latest_checkpoint(tmp_path / "run").name == "step-000006"
    main(["--twin", twin, "--data", str(text_file), "--max-iters", "8", "--eval-interval", "3",
          "--out", str(tmp_path / "run"), "--resume", "--json", *TINY_CLI])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 8


@pytest.mark.parametrize("argv, message", [
    (["--data", "no/such/file.txt"], r"corpus 'no/such/file.txt' is neither 'shakespeare' nor an existing file"),
    (["--batch-size", "500"], r"a batch of 500 x 16 = 8000 tokens is larger than train_data"),
    (["--block-size", "128"], r"block_size=128 is longer than the model's context n_ctx=64"),
    (["--bogus"], r"unrecognized arguments: --bogus"),
    (["--twin", "jax"], r"argument --twin: invalid choice: 'jax'"),
    (["--resume", "--out", "nowhere"], r"--resume: nowhere holds no checkpoint"),
])
def test_cli_bad_input_is_a_clear_error_before_training(argv, message, text_file, capsys):
    extra = ["--block-size", "16"] if "--block-size" not in argv else []
    with pytest.raises(SystemExit) as exit_info:
        main(["--twin", "numpy", "--data", str(text_file), "--n-layer", "1", *extra, *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert re.search(message, captured.err), captured.err
    assert "step" not in captured.out


# ---- the loss-curve plot and the cached pretrained model ---------------------------------------------
def test_plot_losses_draws_train_average_and_validation(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from lib.plotting import plot_losses

    history = train(nt.GPT(tiny()), TRAIN, VAL, TrainConfig(max_iters=12, **{**FAST, "eval_interval": 6}), out=tmp_path,
                    progress=False)
    ax = plot_losses(history, window=5, label="tiny")
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["tiny: train (each step)", "tiny: train (5-step mean)", "tiny: validation"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata()[0], np.mean(history["train_loss"][:5]))
    np.testing.assert_array_equal(ax.get_lines()[2].get_xdata(), [0, 6, 12])
    assert len(plot_losses(tmp_path, window=5).get_lines()) == 3  # from the history.json of a run


def test_shakespeare_small_trains_once_then_loads_from_the_cache(tmp_path, monkeypatch):
    import lib.pretrained as pretrained
    import lib.train

    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(pretrained, "RECIPE", {**pretrained.RECIPE, "max_iters": 3, "eval_interval": 3,
                                               "eval_iters": 1})
    model = pretrained.shakespeare_small("torch")
    folder = pretrained.shakespeare_small_folder()
    assert folder.parent == tmp_path / "pretrained" and read_history(folder)["step"] == [1, 2, 3]

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of loading the cache")

    monkeypatch.setattr(lib.train, "train", no_training)
    again = pretrained.shakespeare_small("numpy")
    assert isinstance(again, nt.GPT) and isinstance(model, tt.GPT)
    for name, value in again.named_parameters():
        np.testing.assert_array_equal(value, model.state_dict_numpy()[name])
    with pytest.raises(ValueError, match=r"twin must be one of \('numpy', 'torch'\), got 'jax'"):
        pretrained.shakespeare_small("jax")


# ---- pieces of the GPU path that run anywhere ------------------------------------------------------
def test_padded_vocabulary_gives_the_same_logits_and_gradients():
    from lib.torch_twin.gpu import pad_vocab

    model = tt.GPT(tiny(vocab_size=61), seed=2)              # 61 -> 64 rows inside the head
    x = torch.tensor(batch(3, V=61)[0])
    plain = model(x)
    plain.square().sum().backward()
    plain_grad = model.wte.weight.grad.clone()
    model.zero_grad()
    with pad_vocab(model, multiple=64):
        padded = model(x)
    padded.square().sum().backward()
    assert padded.shape == plain.shape == (4, 16, 61)
    torch.testing.assert_close(padded, plain, rtol=0, atol=1e-6)  # zero rows change no sum; float32 order
    torch.testing.assert_close(model.wte.weight.grad, plain_grad, rtol=0, atol=1e-5)
    assert model.state_dict()["wte.weight"].shape == (61, 32)
    assert "lm_head" not in vars(model) and model(x).shape == (4, 16, 61)  # the tied head again


@pytest.mark.parametrize("capability, dtype, expected", [
    ((9, 0), None, (torch.bfloat16, False)),                 # H100/H200: bf16, no scaler
    ((8, 0), None, (torch.bfloat16, False)),                 # A100
    ((7, 5), None, (torch.float16, True)),                   # T4: fp16 with a gradient scaler
    ((7, 5), "float32", (None, False)),
])
def test_precision_follows_compute_capability(capability, dtype, expected, monkeypatch):
    from lib.torch_twin.gpu import precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert precision(torch.device("cuda"), dtype) == expected


def test_precision_on_the_cpu_is_float32_and_refuses_half():
    from lib.torch_twin.gpu import precision

    assert precision(torch.device("cpu"), None) == (None, False)
    with pytest.raises(ValueError, match="dtype='float16' needs a CUDA device"):
        precision(torch.device("cpu"), "float16")
    with pytest.raises(ValueError, match="dtype must be 'float32', 'bfloat16' or 'float16'"):
        precision(torch.device("cpu"), "fp8")
