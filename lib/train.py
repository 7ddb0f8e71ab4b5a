"""Pretraining, the same loop for both twins (no framework here; torch loads only for its twin).

- `lr_at(step, ...)`: linear warmup, then cosine decay to a floor.
- `train(model, train_data, val_data, ...)`: the loop. It draws batches, asks the model's twin
  (`lib.numpy_twin.train.Trainer` or `lib.torch_twin.train.Trainer`) for each optimizer step,
  validates every `eval_interval` steps, checkpoints (`lib.checkpoint`), resumes, stops on a
  NaN or infinite loss, and returns the loss history (also written to `out/history.json`).
- `evaluate_loss(model, ids)`: a model's mean cross-entropy over a whole token array (either
  twin, no dropout); `perplexity(model, ids)` is its exponential (each twin's `perplexity(loss)`
  is that exponential alone).
- `python -m lib.train [options]`: the command line over `train` (`--help` lists the options).
  `--recipe gpt2` sets every option to train GPT-2 Small as GPT-3's paper trained its 125M
  model (`RECIPES`), for example on the shards of `python -m lib.shards` (`--data FOLDER`).

Batches: each step draws one global batch of batch_size x grad_accum x world_size windows;
under torchrun each process takes its own contiguous share, split into grad_accum
micro-batches. So the trajectory depends on the global batch only, not on how it is split.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import checkpoint
from .atomic import write_atomic
from .twins import TWINS, as_model_ids, default_twin, twin_module, twin_of

HISTORY_FILE = "history.json"
READ_SECONDS = 1.0  # read queued losses at least this often: the progress bar redraws at most once a second

# Settings of `python -m lib.train --recipe NAME`; options given on the command line win.
# "gpt2": GPT-2 Small (124M, GPT-2's tokenizer) with the settings the GPT-3 paper gives for its
# 125M model (Brown et al. 2020, Table 2.1 and Appendix B): 2^19 = 524,288 tokens (0.5M) per
# optimizer step, peak learning rate 6e-4 after a linear warmup over 375M tokens (715 steps),
# cosine decay to 10% of the peak, AdamW with betas (0.9, 0.95) and weight decay 0.1, clipping
# at 1.0. 19,073 steps are 10B tokens. On CUDA the torch twin computes in bfloat16 autocast from
# compute capability 8.0 (float16 with a gradient scaler below), its attention through
# scaled_dot_product_attention, which can take a flash-attention kernel there; --compile adds
# torch.compile, and torchrun starts one process per GPU (DistributedDataParallel).
RECIPES = {
    "gpt2": dict(preset="gpt2", tokenizer="gpt2", batch_size=16, tokens_per_step=2**19, max_iters=19073,
                 lr=6e-4, min_lr=6e-5, warmup_iters=715, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0,
                 eval_interval=250, eval_iters=20),
}


def lr_at(step: int, lr: float, min_lr: float, warmup_iters: int, max_iters: int) -> float:
    """Learning rate of step `step` (0-based): lr * (step + 1) / warmup_iters while warming up,
    then min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress going from 0 at
    the end of warmup to 1 at max_iters, and min_lr from there on."""
    if step < warmup_iters:
        return lr * (step + 1) / warmup_iters
    if step >= max_iters:
        return min_lr
    progress = (step - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _check_data(name, data, vocab_size, batch_size, block_size):
    """A 1-D array of token ids below vocab_size holding at least one batch of B x T tokens."""
    if np.ndim(data) != 1 or not np.issubdtype(np.asarray(data[:0]).dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D array of integer token ids, got shape {np.shape(data)}")
    if batch_size * block_size + 1 > len(data):
        raise ValueError(f"a batch of {batch_size} x {block_size} = {batch_size * block_size} tokens is larger "
                         f"than {name} ({len(data)} tokens); lower batch_size or block_size, or use more text")
    top = int(data.max())
    if top >= vocab_size:
        raise ValueError(f"{name} holds token id {top}, but the model's vocab_size is {vocab_size} "
                         f"(was the data made with another tokenizer?)")


def new_history(tokens_per_step):
    return {"step": [], "train_loss": [], "lr": [], "grad_norm": [], "eval_step": [], "eval_train_loss": [],
            "val_loss": [], "tokens_per_step": tokens_per_step, "train_seconds": 0.0, "seconds": 0.0}


def progress_bar(total, desc, **options):
    """A notebook-aware tqdm bar of `total` steps that redraws at most once a second. In a
    notebook every redraw is a kernel message; at tqdm's default ten a second, a long cell sends
    more than ZMQ queues while nbval waits for the cell, and nbval loses the cell's end."""
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="step", mininterval=1.0, **options)


def train(model, train_data, val_data=None, *, max_iters=2000, batch_size=12, block_size=None, grad_accum=1,
          lr=2e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0,
          eval_interval=250, eval_iters=20, seed=1337, out=None, resume=False, checkpoint_interval=None,
          device=None, dtype=None, compile=False, progress=True, callback=None, callback_every=1):
    """Pretrain `model` (either twin) on next-token prediction and return its loss history.

    train_data, val_data: 1-D token-id arrays (e.g. from `lib.data.load_corpus`). block_size
    defaults to the model's context. batch_size is per micro-batch and per process. The other
    defaults are the small preset's recipe (`lib.pretrained.RECIPE`); a GPT-2-sized model wants a
    lower peak rate (the GPT-3 paper used 6e-4 for its 125M model).
    Validation: at step 0, every `eval_interval` steps and at the end, the mean loss on the
    same `eval_iters` batches of val_data (and of train_data, as `eval_train_loss`), each of
    batch_size windows per process.
    out: a folder for checkpoints (every `checkpoint_interval` steps, default eval_interval,
    and at the end) and history.json; a fresh run there replaces earlier checkpoints, while
    resume=True continues from the newest one exactly (weights, AdamW, RNGs, batch stream).
    device, dtype, compile: the torch twin's (see `lib.torch_twin.train.Trainer`).
    callback(step, history) runs after every `callback_every`-th step (each call reads the queued
    losses into history: a GPU waits for the host there). A NaN or infinite loss or gradient raises
    FloatingPointError naming the step, before the weights change; in float16 (a GradScaler) an
    infinite or NaN gradient only skips its step and lowers the scale, and its norm is recorded.

    history: per step "step" (1-based count of optimizer steps), "train_loss", "lr",
    "grad_norm"; per evaluation "eval_step" (0 = before training), "eval_train_loss",
    "val_loss"; and "tokens_per_step", "train_seconds" (in steps), "seconds" (wall clock).
    """
    twin = twin_of(model)
    block_size = model.config.n_ctx if block_size is None else block_size
    checkpoint_interval = checkpoint_interval or eval_interval
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if twin == "torch" else 1
    step_batch = batch_size * grad_accum * world_size        # windows per optimizer step, all processes
    _check_args(model, train_data, val_data, max_iters=max_iters, batch_size=batch_size, block_size=block_size,
                grad_accum=grad_accum, warmup_iters=warmup_iters, eval_interval=eval_interval,
                eval_iters=eval_iters, checkpoint_interval=checkpoint_interval, lr=lr, min_lr=min_lr,
                callback_every=callback_every, step_batch=step_batch, out=out, resume=resume)
    from .data import BatchSampler, get_batch

    trainer = twin_module(twin, "train").Trainer(model, lr, betas, weight_decay, grad_clip, device, dtype, compile,
                                                 seed=seed)
    main = trainer.rank == 0
    sampler = BatchSampler(train_data, step_batch, block_size, seed)
    history, start = new_history(step_batch * block_size), 0
    last_saved = None
    if resume:
        _, state, arrays, meta = checkpoint.load_checkpoint(out)
        trainer.load_state(state, arrays, meta)
        sampler.load_state_dict(meta["sampler"])
        history, start, last_saved = meta["history"], meta["step"], checkpoint.latest_checkpoint(out)
    elif out is not None and main:
        checkpoint.clear_checkpoints(out)
    eval_rng = np.random.default_rng(seed + 1)               # the same evaluation batches every time
    eval_batch = batch_size * trainer.world_size             # one micro-batch per process
    evals = {name: [my_micro_batches(*get_batch(data, eval_batch, block_size, eval_rng), trainer.rank, batch_size, 1)[0]
                    for _ in range(eval_iters)]
             for name, data in (("train", train_data), ("val", val_data)) if data is not None}
    bar = progress_bar(max_iters, f"training ({twin})", initial=start, disable=not (progress and main),
                       dynamic_ncols=True)
    wall, seconds_before = time.perf_counter(), history["seconds"]
    pending, read_at = [], time.perf_counter()               # steps whose loss the host has not read yet
    try:
        for step in range(start, max_iters + 1):
            evaluating = step == 0 or step > start and (step % eval_interval == 0 or step == max_iters)
            saving = (out is not None and main and step > start
                      and (step % checkpoint_interval == 0 or step == max_iters))
            calling = step > start and callback is not None and step % callback_every == 0
            if pending and (evaluating or saving or calling or step == max_iters
                            or time.perf_counter() - read_at >= READ_SECONDS):
                tick = time.perf_counter()
                bad = _record(history, pending, trainer.skips_overflow)
                if bad:
                    raise _stopped(*bad, out if main else None, history, last_saved)
                history["train_seconds"] += time.perf_counter() - tick  # the wait for the queued steps
                history["seconds"] = seconds_before + time.perf_counter() - wall
                bar.set_postfix(loss=f"{history['train_loss'][-1]:.4f}", lr=f"{history['lr'][-1]:.2e}",
                                refresh=False)
                pending, read_at = [], time.perf_counter()
            if evaluating:
                _evaluate(trainer, evals, step, history, bar if progress and main else None)
            if saving:
                arrays, meta = trainer.state()
                meta.update(twin=twin, sampler=sampler.state_dict(), history=history)
                last_saved = checkpoint.save_checkpoint(out, step, model.config, trainer.model_state(), arrays, meta)
                write_history(out, history)
            if calling:
                callback(step, history)
            if step == max_iters:
                break
            tick = time.perf_counter()
            micro = my_micro_batches(*sampler.next(), trainer.rank, batch_size, grad_accum)
            lr_now = lr_at(step, lr, min_lr, warmup_iters, max_iters)
            try:
                loss, norm = trainer.step(micro, lr_now)
            except FloatingPointError as e:
                _record(history, pending, trainer.skips_overflow)  # the steps before it
                raise _stopped(step + 1, e, out if main else None, history, last_saved) from None
            pending.append((step + 1, loss, lr_now, norm))
            history["train_seconds"] += time.perf_counter() - tick
            history["seconds"] = seconds_before + time.perf_counter() - wall
            bar.update(1)
    finally:
        bar.close()
        trainer.close()
    return history


def evaluate_loss(model, ids, block_size=None, batch_size=16):
    """The mean cross-entropy of `model` (either twin, in evaluation mode: no dropout) over the
    1-D token array `ids`, cut into consecutive windows of block_size (default: the model's
    context) that each predict the token after every position; the tail too short for a window
    is left out. Every window starts without context, as training's random windows do."""
    block_size = model.config.n_ctx if block_size is None else block_size
    if not 1 <= block_size <= model.config.n_ctx:
        raise ValueError(f"block_size must be between 1 and the model's n_ctx={model.config.n_ctx}, got {block_size}")
    _check_data("ids", ids, model.config.vocab_size, 1, block_size)
    n = (len(ids) - 1) // block_size                         # windows
    x = np.asarray(ids[:n * block_size], np.int64).reshape(n, block_size)         # (n, T)
    y = np.asarray(ids[1:n * block_size + 1], np.int64).reshape(n, block_size)    # (n, T): shifted by one
    estimate_loss = twin_module(twin_of(model), "train").estimate_loss
    total = 0.0
    for i in range(0, n, batch_size):
        xb, yb = x[i:i + batch_size], y[i:i + batch_size]     # (b, T) each, b <= batch_size
        total += estimate_loss(model, [(as_model_ids(model, xb), as_model_ids(model, yb))]) * len(xb)
    return total / n


def perplexity(model, ids, block_size=None, batch_size=16):
    """exp(`evaluate_loss(model, ids, ...)`): the number of equally likely tokens that would leave
    the model as unsure as it is, on average, of each next token in `ids`. A model that guesses
    uniformly over V tokens has loss ln V and perplexity V; a perfect one has perplexity 1."""
    return math.exp(evaluate_loss(model, ids, block_size, batch_size))


def _check_args(model, train_data, val_data, *, lr, min_lr, step_batch, out, resume, **ints):
    """Every bad setting raises here, before the trainer touches the model."""
    for name, value in ints.items():
        minimum = 0 if name in ("max_iters", "warmup_iters") else 1
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    block_size = ints["block_size"]
    if block_size > model.config.n_ctx:
        raise ValueError(f"block_size={block_size} is longer than the model's context n_ctx={model.config.n_ctx}")
    if not 0 <= min_lr <= lr:
        raise ValueError(f"learning rates must satisfy 0 <= min_lr <= lr, got lr={lr!r}, min_lr={min_lr!r}")
    _check_data("train_data", train_data, model.config.vocab_size, step_batch, block_size)
    if val_data is not None:
        _check_data("val_data", val_data, model.config.vocab_size, step_batch // ints["grad_accum"], block_size)
    if resume and (out is None or checkpoint.latest_checkpoint(out) is None):
        raise FileNotFoundError(f"resume=True needs out= naming a folder with a checkpoint; {out} holds none")


def my_micro_batches(x, y, rank, batch_size, grad_accum):
    """This process's contiguous share of a global batch (x, y: (step_batch, T)), cut into
    grad_accum micro-batches: a list of grad_accum (x, y) pairs of shape (batch_size, T)."""
    first = rank * batch_size * grad_accum
    return [(x[i:i + batch_size], y[i:i + batch_size])
            for i in range(first, first + batch_size * grad_accum, batch_size)]


def _record(history, pending, skips_overflow):
    """Append the pending steps [(step, loss, lr, norm), ...] to the history. The torch twin
    leaves each step's loss and norm on the device (a GPU would idle while the host reads a number
    every step); all of them cross to the host here, in one transfer. Returns None, or
    (step, what is wrong) for the first non-finite step, recording only the steps before it.
    skips_overflow: the trainer skipped each step whose gradient overflowed (float16's GradScaler),
    so a non-finite norm is recorded as it is, and only a non-finite loss is wrong."""
    values = [v for _, loss, _, norm in pending for v in (loss, norm)]
    if values and hasattr(values[0], "detach"):              # 0-d tensors; float64 holds float32 exactly
        import torch
        values = torch.stack([v.double() for v in values]).tolist()
    for (step, _, lr, _), loss, norm in zip(pending, values[::2], values[1::2]):
        if not math.isfinite(loss):
            return step, f"the loss is {loss}"
        if not math.isfinite(norm) and not skips_overflow:
            return step, f"the gradient norm is {norm}"
        for key, value in (("step", step), ("train_loss", loss), ("lr", lr), ("grad_norm", norm)):
            history[key].append(value)
    return None


def _stopped(step, problem, out, history, last_saved):
    """The FloatingPointError that ends a run at a non-finite step, after writing the history to `out`."""
    if out is not None:
        write_history(out, history)
    kept = f"the last good checkpoint is {last_saved}" if last_saved else "no checkpoint was written"
    return FloatingPointError(f"training stopped at step {step}: {problem}; the weights are those after step "
                              f"{step - 1}, and {kept}")


def _evaluate(trainer, evals, step, history, bar):
    """Mean loss on the fixed evaluation batches of each split, appended to the history."""
    if "val" not in evals:
        return
    history["eval_step"].append(step)
    history["eval_train_loss"].append(trainer.evaluate(evals["train"]))
    history["val_loss"].append(trainer.evaluate(evals["val"]))
    if bar is not None:
        bar.write(f"step {step}: train loss {history['eval_train_loss'][-1]:.4f}, "
                  f"val loss {history['val_loss'][-1]:.4f}")


def write_history(out, history):
    """history.json in `out`, replaced atomically (a reader never sees half a file)."""
    write_atomic(Path(out) / HISTORY_FILE, json.dumps(history))


def read_history(path):
    """A history written by `train` (history.json, or the folder holding it)."""
    path = Path(path)
    return json.loads((path / HISTORY_FILE if path.is_dir() else path).read_text())


# ---- command line ------------------------------------------------------------------------------
def build_parser():
    """The options; training settings default to `train`'s own defaults."""
    d = {k: v.default for k, v in inspect.signature(train).parameters.items()}
    p = argparse.ArgumentParser(prog="python -m lib.train", description=(
        "Pretrain a GPT on next-token prediction. With no options: the small preset on the embedded "
        "Shakespeare corpus, byte-level, then a sample. Under torchrun (torch twin) it trains with "
        "DistributedDataParallel."))
    p.add_argument("--recipe", choices=sorted(RECIPES), help="start from a recipe's settings (RECIPES in "
                                                             "lib/train.py); the options given here win")
    p.add_argument("--twin", choices=TWINS, help="default: torch when installed, else numpy")
    p.add_argument("--data", default="shakespeare", help="'shakespeare' (embedded), a UTF-8 text file, or a "
                                                         "folder of GPT-2-token shards (python -m lib.shards)")
    p.add_argument("--tokenizer", choices=("byte", "gpt2"), default="byte")
    p.add_argument("--preset", choices=("small", "gpt2", "gpt2_medium"), default="small")
    p.add_argument("--n-layer", type=int)
    p.add_argument("--n-head", type=int)
    p.add_argument("--n-embd", type=int)
    p.add_argument("--dropout", type=float, help="dropout while training, in [0, 1) (default: the preset's, 0; "
                                                   "GPT-1 used 0.1)")
    p.add_argument("--block-size", type=int, help="training context (default: the model's n_ctx)")
    p.add_argument("--batch-size", type=int, default=d["batch_size"], help="windows per micro-batch per process (%(default)s)")
    p.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step (default: from "
                                                  "--tokens-per-step, else 1)")
    p.add_argument("--tokens-per-step", type=int, help="tokens per optimizer step on all processes together; "
                                                       "sets --grad-accum (it must divide by batch x block x processes)")
    p.add_argument("--max-iters", type=int, default=d["max_iters"], help="optimizer steps (%(default)s)")
    p.add_argument("--lr", type=float, default=d["lr"], help="peak learning rate (%(default)s)")
    p.add_argument("--min-lr", type=float, default=d["min_lr"], help="floor of the cosine decay (%(default)s)")
    p.add_argument("--warmup-iters", type=int, default=d["warmup_iters"], help="steps of linear warmup (%(default)s)")
    p.add_argument("--weight-decay", type=float, default=d["weight_decay"], help="AdamW, 2-D weights only (%(default)s)")
    p.add_argument("--betas", type=float, nargs=2, default=d["betas"], metavar=("BETA1", "BETA2"),
                   help="AdamW's moment decay rates (%(default)s)")
    p.add_argument("--grad-clip", type=float, default=d["grad_clip"], help="global-norm clipping, 0: off (%(default)s)")
    p.add_argument("--eval-interval", type=int, default=d["eval_interval"], help="steps between validations (%(default)s)")
    p.add_argument("--eval-iters", type=int, default=d["eval_iters"], help="batches per validation (%(default)s)")
    p.add_argument("--device", help="torch twin: cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="torch twin on CUDA (default: bfloat16 from compute capability 8.0, float16 below), "
                        "or on the CPU under GPT2_COURSE_GPU_ON_CPU=1 (default there: bfloat16)")
    p.add_argument("--compile", action="store_true", help="torch twin: torch.compile the model")
    p.add_argument("--seed", type=int, default=d["seed"], help="weights, batches, sample (%(default)s)")
    p.add_argument("--out", default="out/train", help="checkpoints and history.json (%(default)s)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--sample-tokens", type=int, default=200, help="length of the sample printed at the end (0: none)")
    p.add_argument("--json", action="store_true", help="end with one JSON line: val_loss, train_loss, steps, "
                                                       "seconds, tokens_per_s")
    return p


def _build(args):
    """(model, tokenizer, train_data, val_data) for the parsed options; bad ones raise here."""
    import dataclasses

    from .config import GPTConfig
    from .tokenizer import BPETokenizer, gpt2_tokenizer

    GPT = twin_module(args.twin or default_twin()).GPT
    tokenizer = BPETokenizer() if args.tokenizer == "byte" else gpt2_tokenizer()
    train_data, val_data = _load_data(args.data, args.tokenizer)
    if args.resume:
        if checkpoint.latest_checkpoint(args.out) is None:
            raise FileNotFoundError(f"--resume: {args.out} holds no checkpoint")
        config = checkpoint.load_checkpoint(args.out)[0]     # the model's shape comes from the checkpoint
    else:
        shape = {k: v for k, v in (("n_layer", args.n_layer), ("n_head", args.n_head), ("n_embd", args.n_embd))
                 if v is not None}
        config = GPTConfig.preset(args.preset, vocab_size=tokenizer.vocab_size, **shape)
    if args.dropout is not None:
        config = dataclasses.replace(config, dropout=args.dropout)
    return GPT(config, seed=args.seed), tokenizer, train_data, val_data


def _load_data(data, tokenizer):
    """(train, val) token arrays: a folder of GPT-2-token shards (`python -m lib.shards`), or a
    corpus that lib.data tokenizes once and caches ('shakespeare' or a text file)."""
    if Path(data).is_dir():
        if tokenizer != "gpt2":
            raise ValueError(f"--data {data} is a folder of GPT-2-token shards: add --tokenizer gpt2 (or --recipe gpt2)")
        from .shards import load_shards
        return load_shards(data)
    from .data import load_corpus
    return load_corpus(data, tokenizer)


def _grad_accum(args, model):
    """Micro-batches per optimizer step: --grad-accum, or --tokens-per-step over the tokens of one
    micro-batch on every process (batch_size x block_size x processes)."""
    if args.tokens_per_step is None:
        return 1 if args.grad_accum is None else args.grad_accum
    block_size = args.block_size or model.config.n_ctx
    processes = int(os.environ.get("WORLD_SIZE", 1)) if twin_of(model) == "torch" else 1
    micro = args.batch_size * block_size * processes
    if micro < 1 or args.tokens_per_step < micro or args.tokens_per_step % micro:
        raise ValueError(f"--tokens-per-step {args.tokens_per_step} is not a multiple of batch_size x block_size x "
                         f"processes = {args.batch_size} x {block_size} x {processes} = {micro}")
    grad_accum = args.tokens_per_step // micro
    if args.grad_accum not in (None, grad_accum):
        raise ValueError(f"--grad-accum {args.grad_accum} disagrees with --tokens-per-step {args.tokens_per_step}, "
                         f"which needs {grad_accum}; give one of them")
    return grad_accum


def parse_args(argv=None):
    """(parser, options). A recipe's settings (--recipe) replace the defaults, so the options
    given on the command line still win over them."""
    parser = build_parser()
    recipe = parser.parse_known_args(argv)[0].recipe
    if recipe is not None:
        parser.set_defaults(**RECIPES[recipe])
    return parser, parser.parse_args(argv)


def _sample(model, tokenizer, n_tokens, seed, prompt="\n"):
    """A continuation of `prompt`, drawn with the twin's `generate` (temperature 1)."""
    idx = as_model_ids(model, [tokenizer.encode(prompt)])    # (1, T)
    return tokenizer.decode(model.generate(idx, n_tokens, seed=seed)[0].tolist())


def main(argv=None):
    parser, args = parse_args(argv)
    main_process = int(os.environ.get("RANK", 0)) == 0
    try:
        model, tokenizer, train_data, val_data = _build(args)
        history = train(model, train_data, val_data, max_iters=args.max_iters, batch_size=args.batch_size,
                        block_size=args.block_size, grad_accum=_grad_accum(args, model), lr=args.lr,
                        min_lr=args.min_lr, betas=tuple(args.betas), warmup_iters=args.warmup_iters,
                        weight_decay=args.weight_decay, grad_clip=args.grad_clip,
                        eval_interval=args.eval_interval, eval_iters=args.eval_iters, seed=args.seed,
                        out=args.out, resume=args.resume, device=args.device, dtype=args.dtype,
                        compile=args.compile)
    except (FileNotFoundError, ValueError) as e:
        parser.error(str(e))
    except FloatingPointError as e:
        sys.exit(f"error: {e}")
    if not main_process:
        return
    steps = history["step"][-1] if history["step"] else 0
    summary = {"val_loss": history["val_loss"][-1] if history["val_loss"] else None,
               "train_loss": history["eval_train_loss"][-1] if history["eval_train_loss"] else None,
               "steps": steps, "seconds": round(history["seconds"], 3),
               "tokens_per_s": round(len(history["step"]) * history["tokens_per_step"] / history["train_seconds"], 1)
               if history["train_seconds"] else None}
    val = summary["val_loss"]
    val_text = "none" if val is None else f"{val:.4f} (perplexity {twin_module(twin_of(model)).perplexity(val):.2f})"
    print(f"trained {steps} steps in {summary['seconds']:.1f} s; val loss {val_text}; "
          f"checkpoints and history.json in {args.out}")
    if args.sample_tokens:
        print("sample:\n" + _sample(model, tokenizer, args.sample_tokens, args.seed))
    if args.json:
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
