"""Pretraining, the same loop for both twins (no framework here; torch loads only for its twin).

- `train(model, train_data, val_data, config)`: the loop, trained as a `lib.config.TrainConfig`
  says. It draws batches, asks the model's twin
  (`lib.numpy_twin.train.Trainer` or `lib.torch_twin.train.Trainer`) for each optimizer step at
  the rate of the schedule (`lib.schedule.lr_at`), validates every `eval_interval` steps,
  checkpoints (`lib.checkpoint`), resumes, stops on a NaN or infinite loss, and returns the loss
  history (`lib.history`; also written to `out/history.json`), the steps' losses read from the
  device as the progress bar redraws (`lib.progress`).
- `evaluate_loss(model, ids)`: a model's mean cross-entropy over a whole token array (either
  twin, no dropout); `perplexity(model, ids)` is its exponential (each twin's `perplexity(loss)`
  is that exponential alone).
- `python -m lib.train [options]`: the command line over `train`, one option per TrainConfig
  field (`--help` lists them). `--recipe gpt2` sets every option to train GPT-2 Small as GPT-3's
  paper trained its 125M model (`RECIPES`), for example on the shards of `python -m lib.shards`
  (`--data FOLDER`).

Batches: each step draws one global batch of batch_size x grad_accum x world_size windows;
under torchrun each process takes its own contiguous share, split into grad_accum
micro-batches. So the trajectory depends on the global batch only, not on how it is split.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import checkpoint
from .config import TrainConfig
from .history import new_history, write_history
from .progress import QueuedLosses, progress_bar
from .schedule import lr_at
from .twins import TWINS, as_model_ids, default_twin, twin_module, twin_of

# Settings of `python -m lib.train --recipe NAME`; options given on the command line win.
# "gpt2": GPT-2 Small (124M, GPT-2's tokenizer) trained as `TrainConfig.gpt2()` says, its 2^19
# tokens per step spread over the processes (so --grad-accum follows from them). On CUDA the torch
# twin computes in bfloat16 autocast from compute capability 8.0 (float16 with a gradient scaler
# below), its attention through scaled_dot_product_attention, which can take a flash-attention
# kernel there; --compile adds torch.compile, and torchrun starts one process per GPU
# (DistributedDataParallel).
RECIPES = {
    "gpt2": dict(preset="gpt2", tokenizer="gpt2", tokens_per_step=2**19,
                 **{k: v for k, v in dataclasses.asdict(TrainConfig.gpt2()).items() if k != "grad_accum"}),
}


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


def train(model, train_data, val_data=None, config=TrainConfig(), *, out=None, resume=False, callback=None,
          progress=True):
    """Pretrain `model` (either twin) on next-token prediction as `config` (a TrainConfig) says,
    and return its loss history.

    train_data, val_data: 1-D token-id arrays (e.g. from `lib.data.load_corpus`). block_size
    defaults to the model's context. batch_size is per micro-batch and per process. The default
    config is the small preset's recipe; a GPT-2-sized model wants a lower peak rate
    (`TrainConfig.gpt2()`: GPT-3's paper used 6e-4 for its 125M model).
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
    run = _Run(model, train_data, val_data, config, out, resume, progress)
    last = config.max_iters
    try:
        for step in range(run.start, last + 1):
            later = step > run.start                         # a resumed run's first step was done before
            evaluating = step == 0 or later and (step % config.eval_interval == 0 or step == last)
            saving = run.saves and later and (step % run.checkpoint_interval == 0 or step == last)
            calling = later and callback is not None and step % config.callback_every == 0
            if evaluating or saving or calling or step == last or run.losses.due():
                run.read_losses()
            if evaluating:
                run.evaluate(step)
            if saving:
                run.save(step)
            if calling:
                callback(step, run.history)
            if step == last:
                break
            run.step(step)
    finally:
        run.close()
    return run.history


class _Run:
    """One call of `train`: the twin's trainer, the batch stream, the fixed evaluation batches,
    the history, the queued losses and the progress bar, with the loop's four actions: read the
    queued losses, evaluate, save a checkpoint, take a step."""

    def __init__(self, model, train_data, val_data, config, out, resume, progress):
        from .data import BatchSampler, get_batch

        self.twin, self.model, self.config, self.out = twin_of(model), model, config, out
        c = self.config = dataclasses.replace(config, block_size=config.block_size or model.config.n_ctx)
        self.checkpoint_interval = c.checkpoint_interval or c.eval_interval
        world_size = int(os.environ.get("WORLD_SIZE", 1)) if self.twin == "torch" else 1
        step_batch = c.batch_size * c.grad_accum * world_size   # windows per optimizer step, all processes
        _check_run(model, train_data, val_data, c, step_batch, out, resume)
        self.trainer = twin_module(self.twin, "train").Trainer(model, c)
        main = self.trainer.rank == 0
        self.saves = out is not None and main
        self.sampler = BatchSampler(train_data, step_batch, c.block_size, c.seed)
        self.history, self.start, self.last_saved = new_history(step_batch * c.block_size), 0, None
        if resume:
            _, state, arrays, meta = checkpoint.load_checkpoint(out)
            self.trainer.load_state(state, arrays, meta)
            self.sampler.load_state_dict(meta["sampler"])
            self.history, self.start, self.last_saved = meta["history"], meta["step"], checkpoint.latest_checkpoint(out)
        elif self.saves:
            checkpoint.clear_checkpoints(out)
        eval_rng = np.random.default_rng(c.seed + 1)         # the same evaluation batches every time
        eval_batch = c.batch_size * self.trainer.world_size  # one micro-batch per process
        rank = self.trainer.rank
        self.evals = {name: [my_micro_batches(*get_batch(data, eval_batch, c.block_size, eval_rng), rank,
                                              c.batch_size, 1)[0] for _ in range(c.eval_iters)]
                      for name, data in (("train", train_data), ("val", val_data)) if data is not None}
        self.reports = progress and main
        self.bar = progress_bar(c.max_iters, f"training ({self.twin})", initial=self.start,
                                disable=not self.reports, dynamic_ncols=True)
        self.losses = QueuedLosses(self.history, self.trainer.skips_overflow)
        self.wall, self.seconds_before = time.perf_counter(), self.history["seconds"]

    def _clock(self, tick):
        """Count the time since `tick` as training time, and the wall clock since the start."""
        self.history["train_seconds"] += time.perf_counter() - tick
        self.history["seconds"] = self.seconds_before + time.perf_counter() - self.wall

    def read_losses(self):
        """Record the queued steps (a GPU's wait counts as training time); stop at a non-finite one."""
        if not self.losses.steps:
            return
        tick = time.perf_counter()
        bad = self.losses.read()
        if bad:
            raise self._stopped(*bad)
        self._clock(tick)
        self.bar.set_postfix(loss=f"{self.history['train_loss'][-1]:.4f}", lr=f"{self.history['lr'][-1]:.2e}",
                             refresh=False)

    def evaluate(self, step):
        """Mean loss on the fixed evaluation batches of each split, appended to the history."""
        if "val" not in self.evals:
            return
        h = self.history
        h["eval_step"].append(step)
        h["eval_train_loss"].append(self.trainer.evaluate(self.evals["train"]))
        h["val_loss"].append(self.trainer.evaluate(self.evals["val"]))
        if self.reports:
            self.bar.write(f"step {step}: train loss {h['eval_train_loss'][-1]:.4f}, val loss {h['val_loss'][-1]:.4f}")

    def save(self, step):
        """A checkpoint of the state after `step`, and the history beside it."""
        arrays, meta = self.trainer.state()
        meta.update(twin=self.twin, sampler=self.sampler.state_dict(), history=self.history)
        self.last_saved = checkpoint.save_checkpoint(self.out, step, self.model.config, self.trainer.model_state(),
                                                     arrays, meta)
        write_history(self.out, self.history)

    def step(self, step):
        """Optimizer step `step` + 1 on the next batch, at the schedule's rate; queues its losses."""
        c, tick = self.config, time.perf_counter()
        micro = my_micro_batches(*self.sampler.next(), self.trainer.rank, c.batch_size, c.grad_accum)
        lr_now = lr_at(step, c.lr, c.min_lr, c.warmup_iters, c.max_iters)
        try:
            loss, norm = self.trainer.step(micro, lr_now)
        except FloatingPointError as e:
            self.losses.read()                               # the steps before it
            raise self._stopped(step + 1, e) from None
        self.losses.add(step + 1, loss, lr_now, norm)
        self._clock(tick)
        self.bar.update(1)

    def _stopped(self, step, problem):
        """The FloatingPointError that ends the run at a non-finite step, after writing the history."""
        if self.saves:
            write_history(self.out, self.history)
        kept = f"the last good checkpoint is {self.last_saved}" if self.last_saved else "no checkpoint was written"
        return FloatingPointError(f"training stopped at step {step}: {problem}; the weights are those after step "
                                  f"{step - 1}, and {kept}")

    def close(self):
        self.bar.close()
        self.trainer.close()


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


def _check_run(model, train_data, val_data, config, step_batch, out, resume):
    """What a TrainConfig cannot check alone raises here, before the trainer touches the model:
    the context against the model's, the data against the batch, a checkpoint to resume from."""
    if config.block_size > model.config.n_ctx:
        raise ValueError(f"block_size={config.block_size} is longer than the model's context "
                         f"n_ctx={model.config.n_ctx}")
    _check_data("train_data", train_data, model.config.vocab_size, step_batch, config.block_size)
    if val_data is not None:
        _check_data("val_data", val_data, model.config.vocab_size, step_batch // config.grad_accum,
                    config.block_size)
    if resume and (out is None or checkpoint.latest_checkpoint(out) is None):
        raise FileNotFoundError(f"resume=True needs out= naming a folder with a checkpoint; {out} holds none")


def my_micro_batches(x, y, rank, batch_size, grad_accum):
    """This process's contiguous share of a global batch (x, y: (step_batch, T)), cut into
    grad_accum micro-batches: a list of grad_accum (x, y) pairs of shape (batch_size, T)."""
    first = rank * batch_size * grad_accum
    return [(x[i:i + batch_size], y[i:i + batch_size])
            for i in range(first, first + batch_size * grad_accum, batch_size)]


# ---- command line ------------------------------------------------------------------------------
def build_parser():
    """The options; the training settings' come from TrainConfig's fields, with its defaults."""
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
    p.add_argument("--tokens-per-step", type=int, help="tokens per optimizer step on all processes together; "
                                                       "sets --grad-accum (it must divide by batch x block x processes)")
    for field in dataclasses.fields(TrainConfig):          # one option per setting, as TrainConfig lists them
        options = field.metadata["command_line"]
        if options is not None:
            typed = {} if "action" in options else {"type": type(field.default)}
            p.add_argument("--" + field.name.replace("_", "-"), help=field.metadata["help"],
                           **{**typed, "default": field.default, **options})
    p.add_argument("--out", default="out/train", help="checkpoints and history.json (%(default)s)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--sample-tokens", type=int, default=200, help="length of the sample printed at the end (0: none)")
    p.add_argument("--json", action="store_true", help="end with one JSON line: val_loss, train_loss, steps, "
                                                       "seconds, tokens_per_s")
    return p


def _build(args):
    """(model, tokenizer, train_data, val_data) for the parsed options; bad ones raise here."""
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


def _train_config(args, model):
    """The TrainConfig of the parsed options (bad values raise here)."""
    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)
                if f.metadata["command_line"] is not None}
    return TrainConfig(**{**settings, "betas": tuple(args.betas), "grad_accum": _grad_accum(args, model)})


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
        history = train(model, train_data, val_data, _train_config(args, model), out=args.out, resume=args.resume)
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
