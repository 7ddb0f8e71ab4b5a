"""The GPT-2 recipe (`python -m lib.train --recipe gpt2`), run on the CPU at tiny sizes, and the GPU
configuration on the CPU (GPT2_COURSE_GPU_ON_CPU=1, lib/scale.py).

Tolerances: accumulation against one batch k times larger, in float64: 1e-10 (the same sums in
another order move float64 by ~1e-15 a step; tests/test_train.py says more). Resume: exact. The
GPU configuration on the CPU computes in bfloat16 (8 bits of mantissa, relative error ~4e-3 per
product): its losses stay within 0.05 of float32's over a few steps of a tiny model.
"""
import json
import shutil

import numpy as np
import pytest
import torch

from lib import numpy_twin as nt
from lib import torch_twin as tt
from lib.config import GPTConfig, TrainConfig
from lib.scale import gpu_on_cpu, gpu_or_tiny, gpu_scale
from lib.shards import write_shards
from lib.history import read_history
from lib.schedule import lr_at
from lib.train import RECIPES, _grad_accum, main, parse_args, train

F64 = 1e-10
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "2",
        "--tokens-per-step", "64", "--max-iters", "4", "--warmup-iters", "2", "--eval-interval", "2",
        "--eval-iters", "1", "--sample-tokens", "0", "--twin", "torch"]


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A few thousand GPT-2 tokens of made-up text, as shards of `python -m lib.shards`."""
    out = tmp_path_factory.mktemp("shards")
    texts = [f"Text {i}: " + " ".join(f"word{(i * 7 + j) % 50}" for j in range(60)) for i in range(30)]
    write_shards(out, lambda skip: iter(texts[skip:]), {"test": 1}, shard_tokens=1000, val_tokens=400,
                 progress_bar=False)
    return out


def test_the_recipe_is_gpt3s_settings_for_gpt2_small_and_options_given_win(monkeypatch):
    _, args = parse_args(["--recipe", "gpt2"])
    assert (args.preset, args.tokenizer, args.lr, args.betas, args.weight_decay, args.grad_clip) == \
        ("gpt2", "gpt2", 6e-4, (0.9, 0.95), 0.1, 1.0)
    assert args.tokens_per_step == 2**19 and args.warmup_iters * 2**19 == pytest.approx(375e6, rel=1e-3)
    assert lr_at(args.max_iters, args.lr, args.min_lr, args.warmup_iters, args.max_iters) == pytest.approx(6e-5)
    assert args.max_iters * 2**19 == pytest.approx(10e9, rel=1e-4)           # 10B tokens
    model = tt.GPT(GPTConfig(vocab_size=64, n_ctx=1024, n_layer=1, n_head=1, n_embd=8))
    assert _grad_accum(args, model) == 32                                    # 16 x 1024 tokens per micro-batch
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert _grad_accum(args, model) == 4                                     # 8 GPUs under torchrun
    _, args = parse_args(["--recipe", "gpt2", "--lr", "1e-3", "--betas", "0.9", "0.99"])
    assert args.lr == 1e-3 and args.betas == [0.9, 0.99] and args.weight_decay == 0.1
    _, plain = parse_args([])
    assert plain.lr == 2e-3 and plain.tokens_per_step is None                # no recipe: train's defaults


def test_the_recipe_trains_on_shards_and_resumes_exactly(shards, tmp_path, capsys):
    main(["--recipe", "gpt2", "--data", str(shards), "--out", str(tmp_path / "whole"), "--json", *TINY])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    whole = read_history(tmp_path / "whole")
    assert summary["steps"] == 4 and whole["tokens_per_step"] == 64           # 2 micro-batches of 2 x 16
    assert whole["lr"][1] == pytest.approx(6e-4)                              # warmed up at step 2
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "step-000004")                           # as if it had stopped after step 2
    (tmp_path / "cut" / "latest").write_text("step-000002")
    main(["--recipe", "gpt2", "--data", str(shards), "--out", str(tmp_path / "cut"), "--resume", *TINY])
    resumed = read_history(tmp_path / "cut")
    assert resumed["train_loss"] == whole["train_loss"] and resumed["val_loss"] == whole["val_loss"]


@pytest.mark.parametrize("twin", ["numpy", "torch"])
def test_accumulating_4_micro_batches_is_one_batch_4_times_larger_float64(twin):
    config = GPTConfig(vocab_size=64, n_ctx=16, n_layer=1, n_head=2, n_embd=16)
    ids = (np.arange(3000) % 50).astype(np.uint16)
    gpt2 = {k: RECIPES["gpt2"][k] for k in ("lr", "min_lr", "betas", "weight_decay", "grad_clip")}
    runs = []
    for batch_size, grad_accum in ((8, 1), (2, 4)):
        model = nt.GPT(config, seed=0).astype(np.float64) if twin == "numpy" else tt.GPT(config, seed=0).double()
        settings = TrainConfig(max_iters=3, batch_size=batch_size, grad_accum=grad_accum, block_size=16,
                               warmup_iters=1, eval_interval=3, eval_iters=1, **gpt2)
        history = train(model, ids[:2500], ids[2500:], settings, progress=False)
        state = model.state_dict() if twin == "numpy" else model.state_dict_numpy()
        runs.append((history, {k: np.asarray(v, np.float64) for k, v in state.items()}))
    (big, big_state), (micro, micro_state) = runs
    np.testing.assert_allclose(micro["train_loss"], big["train_loss"], atol=F64, rtol=0)
    for name in big_state:
        np.testing.assert_allclose(micro_state[name], big_state[name], atol=F64, rtol=0, err_msg=name)


@pytest.mark.parametrize("argv, message", [
    (["--tokens-per-step", "100"], "--tokens-per-step 100 is not a multiple of batch_size x block_size x processes"),
    (["--grad-accum", "3"], "--grad-accum 3 disagrees with --tokens-per-step 64, which needs 2"),
    (["--tokenizer", "byte"], "is a folder of GPT-2-token shards: add --tokenizer gpt2"),
])
def test_bad_recipe_options_are_clear_errors(argv, message, shards, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--recipe", "gpt2", "--data", str(shards), "--out", str(tmp_path), *TINY, *argv])
    assert message in capsys.readouterr().err


def test_gpu_configuration_on_the_cpu_is_one_switch(monkeypatch):
    monkeypatch.delenv("GPT2_COURSE_GPU_ON_CPU", raising=False)
    assert not gpu_on_cpu() and gpu_scale() == torch.cuda.is_available() and gpu_or_tiny(3000, 5) == 3000
    monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "1")
    assert gpu_on_cpu() and gpu_scale() and gpu_or_tiny(3000, 5) == (3000 if torch.cuda.is_available() else 5)
    monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "yes")
    with pytest.raises(ValueError, match="GPT2_COURSE_GPU_ON_CPU must be 1"):
        gpu_on_cpu()


def test_the_trainer_takes_its_gpu_paths_on_the_cpu_under_the_switch(monkeypatch):
    from lib.torch_twin.gpu import precision
    from lib.torch_twin.train import Trainer

    config = GPTConfig(vocab_size=100, n_ctx=16, n_layer=1, n_head=2, n_embd=32)   # pads to 128
    ids = (np.arange(3000) % 90).astype(np.uint16)
    fast = TrainConfig(max_iters=4, batch_size=4, block_size=16, warmup_iters=1, eval_interval=4, eval_iters=1)
    plain = train(tt.GPT(config, seed=0), ids[:2500], ids[2500:], fast, progress=False)
    monkeypatch.setenv("GPT2_COURSE_GPU_ON_CPU", "1")
    cpu = torch.device("cpu")
    assert precision(cpu, None) == (torch.bfloat16, False) and precision(cpu, "float16") == (torch.float16, True)
    model = tt.GPT(config, seed=0)
    trainer = Trainer(model, TrainConfig(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0, device="cpu",
                                         dtype="float16"))
    with trainer.autocast():
        assert trainer.compute(torch.zeros(1, 4, dtype=torch.long)).dtype == torch.float16
    assert trainer.scaler is not None and "lm_head" in vars(model)             # the padded head is in place
    trainer.close()
    assert "lm_head" not in vars(model)
    gpu_like = train(tt.GPT(config, seed=0), ids[:2500], ids[2500:], fast, progress=False)   # bfloat16 autocast, padded head
    assert gpu_like["train_loss"] != plain["train_loss"]
    np.testing.assert_allclose(gpu_like["train_loss"], plain["train_loss"], atol=0.05, rtol=0)


def test_forward_reads_no_id_back_from_a_device():
    model = tt.GPT(GPTConfig(vocab_size=64, n_ctx=16, n_layer=1, n_head=2, n_embd=16))
    on_device = torch.empty(1, 4, dtype=torch.long, device="meta")   # reading a value from it raises
    model._check_idx(on_device, None, False)                          # shape checks only
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 64\)"):
        model._check_idx(torch.tensor([[1, 64]]), None, False)
