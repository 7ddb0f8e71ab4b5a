"""Progress while training: the bar, and the losses a device holds until the host reads them.

- `progress_bar(total, desc)`: the tqdm bar of every training loop in lib (pretraining,
  fine-tuning, post-training, scoring), redrawn at most once a second.
- `QueuedLosses`: the steps whose loss and gradient norm `lib.train`'s loop has not read yet,
  read into the history when the loop reports and at least every READ_SECONDS.
"""
from __future__ import annotations

import math
import time

READ_SECONDS = 1.0  # read queued losses at least this often: the progress bar redraws at most once a second


def progress_bar(total, desc, **options):
    """A notebook-aware tqdm bar of `total` steps that redraws at most once a second. In a
    notebook every redraw is a kernel message; at tqdm's default ten a second, a long cell sends
    more than ZMQ queues while nbval waits for the cell, and nbval loses the cell's end."""
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="step", mininterval=1.0, **options)


class QueuedLosses:
    """The steps whose loss and gradient norm the host has not read yet. The torch twin leaves
    each step's on the device (a GPU would idle while the host reads a number every step); `read`
    moves all of them into the history in one transfer, when the loop reports, and at least every
    READ_SECONDS. skips_overflow: the trainer skipped each step whose gradient overflowed
    (float16's GradScaler), so a non-finite norm is recorded as it is, and only a non-finite loss
    is wrong."""

    def __init__(self, history, skips_overflow):
        self.history, self.skips_overflow = history, skips_overflow
        self.steps, self.read_at = [], time.perf_counter()

    def add(self, step, loss, lr, norm):
        self.steps.append((step, loss, lr, norm))

    def due(self):
        """Whether READ_SECONDS have passed since the last read (the progress bar's redraws)."""
        return time.perf_counter() - self.read_at >= READ_SECONDS

    def read(self):
        """Append the queued steps to the history and empty the queue. Returns None, or (step,
        what is wrong) for the first non-finite step, recording only the steps before it."""
        steps, self.steps, self.read_at = self.steps, [], time.perf_counter()
        values = [v for _, loss, _, norm in steps for v in (loss, norm)]
        if values and hasattr(values[0], "detach"):          # 0-d tensors; float64 holds float32 exactly
            import torch
            values = torch.stack([v.double() for v in values]).tolist()
        for (step, _, lr, _), loss, norm in zip(steps, values[::2], values[1::2]):
            if not math.isfinite(loss):
                return step, f"the loss is {loss}"
            if not math.isfinite(norm) and not self.skips_overflow:
                return step, f"the gradient norm is {norm}"
            for key, value in (("step", step), ("train_loss", loss), ("lr", lr), ("grad_norm", norm)):
                self.history[key].append(value)
        return None
