"""Chapter 5's diagrams: one training step, and the shape of the learning-rate schedule."""
from __future__ import annotations

from .. import train
from ..config import GPTConfig, param_counts
from ..schedule import lr_at
from .svg import MUTED, SMALL, Canvas, fill_of


def sci(x: float) -> str:
    """6e-05 as the chapter writes it, 6.0e-5."""
    return f"{x:.1e}".replace("e-0", "e-").replace("e+0", "e+")


def training_step():
    config = GPTConfig.gpt2()
    total = param_counts(config)["total"]
    options = train.RECIPES["gpt2"]
    c = Canvas()
    w, h, xs, top, bottom = 196, 70, (10, 256, 502), 30, 180
    c.text(10, 10, f"GPT-2 Small ({total:,} parameters), one optimizer step of lib.train's GPT-2 recipe",
           size=SMALL, anchor="start", color=MUTED)
    c.box(xs[0], top, w, h, "batch x, y", f"{options['tokens_per_step']:,} tokens", "y: x shifted by one",
          role="data")
    c.box(xs[1], top, w, h, "forward", f"logits (B, T, {config.vocab_size:,})", role="plain")
    c.box(xs[2], top, w, h, "loss", "cross-entropy of the logits", "against y: one number", role="head")
    c.box(xs[2], bottom, w, h, "backward", f"{total:,} gradients,", "one per parameter", role="plain")
    c.box(xs[1], bottom, w, h, "clip", "scale the gradients down", f"if their norm > {options['grad_clip']}",
          role="optim")
    b1, b2 = options["betas"]
    c.box(xs[0], bottom, w, h, "AdamW", f"m, v: 2 × {total:,}", f"betas {b1}, {b2}; decay {options['weight_decay']}",
          role="optim", emphasis=True)
    c.arrow((xs[0] + w, top + h / 2), (xs[1] - 2, top + h / 2))
    c.arrow((xs[1] + w, top + h / 2), (xs[2] - 2, top + h / 2))
    c.arrow((xs[2] + w / 2, top + h), (xs[2] + w / 2, bottom - 2))
    c.arrow((xs[2], bottom + h / 2), (xs[1] + w + 2, bottom + h / 2))
    c.arrow((xs[1], bottom + h / 2), (xs[0] + w + 2, bottom + h / 2))
    middle = (top + h + bottom) / 2
    c.arrow((xs[0] + w / 2, bottom), (xs[0] + w / 2, middle), (xs[1] + w / 2, middle), (xs[1] + w / 2, top + h + 2),
            dash=True)
    c.text(xs[0] + w / 2 + 8, middle - 10, "new weights, for the next batch", size=SMALL, anchor="start",
           color=MUTED)
    c.text(xs[0], bottom + h + 18, "AdamW's learning rate comes from a schedule", size=SMALL, anchor="start",
           color=MUTED)
    alt = (f"One training step of GPT-2 Small ({total:,} parameters) with lib.train's GPT-2 recipe, as a loop of "
           f"six boxes. A batch of {options['tokens_per_step']:,} token ids x and their targets y (x shifted by "
           f"one) goes forward through the model to logits "
           f"(B, T, {config.vocab_size:,}); the cross-entropy against y gives the loss, one number; the backward "
           f"pass gives {total:,} gradients, one per parameter; clipping scales them down when their global norm "
           f"exceeds {options['grad_clip']}; AdamW, which keeps two running averages m and v per parameter "
           f"(betas {b1} and {b2}, weight decay {options['weight_decay']}), updates the weights, and a dashed "
           f"arrow carries the new weights back to the forward pass of the next batch.")
    return c.diagram("training_step", alt)


def lr_schedule():
    options = train.RECIPES["gpt2"]
    lr, min_lr, warmup, steps = options["lr"], options["min_lr"], options["warmup_iters"], options["max_iters"]
    c = Canvas()
    x0, y0, w, h = 90, 20, 500, 200       # the plot's left, top, width and height

    def at(step, value):
        return x0 + w * step / steps, y0 + h * (1 - value / lr)

    c.line((x0, y0), (x0, y0 + h), (x0 + w, y0 + h), width=1.2)
    points = [at(s, lr_at(s, lr, min_lr, warmup, steps)) for s in range(0, steps + 1, max(1, steps // 400))]
    c.line(at(0, 0), *points, color=fill_of("data", 1.0), width=2.6)
    for value, name, x, anchor in ((lr, "lr", x0 - 8, "end"), (min_lr, "min_lr", x0 + w + 8, "start")):
        c.line(at(0, value), at(steps, value), width=1, dash=True, color=MUTED)
        c.text(x, at(0, value)[1], f"{name} {sci(value)}", size=SMALL, anchor=anchor, mono=True)
    c.text(x0 - 8, y0 + h, "0", size=SMALL, anchor="end", mono=True)
    for step in (warmup, steps):
        x = at(step, 0)[0]
        c.line((x, y0 + h), (x, y0 + h + 5), width=1)
        c.text(x, y0 + h + 16, f"{step:,}", size=SMALL, mono=True)
    c.text(x0 + w / 2, y0 + h + 36, "step", size=SMALL, color=MUTED)
    warmup_x, warmup_y = at(warmup / 2, lr / 2)
    c.arrow((warmup_x + 56, warmup_y + 30), (warmup_x + 6, warmup_y + 4))
    c.text(warmup_x + 60, warmup_y + 30, f"linear warmup over {warmup:,} steps, up to lr", size=SMALL,
           anchor="start")
    step = int(0.7 * steps)
    curve_x, curve_y = at(step, lr_at(step, lr, min_lr, warmup, steps))
    c.arrow((curve_x + 50, y0 + 62), (curve_x + 4, curve_y - 8))
    c.text(curve_x + 50, y0 + 50, "half a cosine, down to min_lr", size=SMALL)
    alt = (f"The learning-rate schedule of lib.train's GPT-2 recipe, learning rate against step. It rises in a "
           f"straight line from 0 to the peak lr = {sci(lr)} over the first {warmup:,} steps (the warmup), then "
           f"falls along half a cosine to min_lr = {sci(min_lr)} at step {steps:,}, and stays at min_lr after that.")
    return c.diagram("lr_schedule", alt)
