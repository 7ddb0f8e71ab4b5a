"""Loss curves (matplotlib only), for histories that `lib.train.train` returns or writes."""
from __future__ import annotations

import numpy as np


def moving_average(values, window):
    """Mean of each run of `window` consecutive values: len(values) - window + 1 of them."""
    return np.convolve(values, np.ones(window) / window, mode="valid")


def plot_losses(history, ax=None, label=None, window=50):
    """Plot a training history: the loss of every step (faint), its `window`-step moving
    average, and the validation loss at each evaluation (dots). `history` is the dict `train`
    returns, or a history.json path (or the folder holding it). Call again with the same `ax`
    and another `label` to compare runs. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    if not isinstance(history, dict):
        from .history import read_history
        history = read_history(history)
    if ax is None:
        ax = plt.subplots(figsize=(7, 4))[1]
    name = f"{label}: " if label else ""
    steps, loss = np.asarray(history["step"]), np.asarray(history["train_loss"])
    line, = ax.plot(steps, loss, alpha=0.25, linewidth=0.8, label=f"{name}train (each step)")
    if len(loss) >= window > 1:
        ax.plot(steps[window - 1:], moving_average(loss, window), color=line.get_color(),
                label=f"{name}train ({window}-step mean)")
    if history["val_loss"]:
        ax.plot(history["eval_step"], history["val_loss"], "o--", color=line.get_color(), markersize=4,
                label=f"{name}validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
