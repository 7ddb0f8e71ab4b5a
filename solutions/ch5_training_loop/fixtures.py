"""Exercise ch5_training_loop's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("uint16_windows", "the windows keep the ids' uint16 dtype instead of int64",
     (("windows = np.asarray(ids)[positions].astype(np.int64)", "windows = np.asarray(ids)[positions]"),)),
    ("batches_not_random", "consecutive windows from the start of the text, no random starts",
     (("starts = rng.integers(0, len(ids) - block_size, size=batch_size)", "starts = np.arange(batch_size) * block_size"),)),
    ("last_window_never_drawn", "rng.integers(0, N - T - 1): the last window is never drawn",
     (("starts = rng.integers(0, len(ids) - block_size, size=batch_size)",
       "starts = rng.integers(0, len(ids) - block_size - 1, size=batch_size)"),)),
    ("no_micro_batch_division", "each micro-batch's gradient not divided by their number",
     (("model.backward(dlogits / k)", "model.backward(dlogits)"),)),
    ("no_zero_grad", "the gradients not zeroed at the start of a step: the last step's are kept",
     (("    model.zero_grad()                        # backward adds: start this step from 0\n", ""),)),
    ("per_tensor_clipping", "each tensor clipped to max_norm by its own norm, not all by the global one",
     (("    if max_norm and norm > max_norm:\n        for g in grads.values():\n"
       "            g *= max_norm / (norm + 1e-6)    # one factor for all: the direction stays\n",
       "    for g in grads.values():\n        g_norm = math.sqrt(float((g * g).sum()))\n"
       "        if max_norm and g_norm > max_norm:\n            g *= max_norm / (g_norm + 1e-6)\n"),)),
    ("clips_when_off", "max_norm = 0 clips every gradient to 0 instead of turning clipping off",
     (("if max_norm and norm > max_norm:", "if norm > max_norm:"),)),
    ("evaluates_in_training_mode", "the loss estimated in training mode, with dropout on",
     (("    model.eval()                             # no dropout: the model as it is used\n", ""),)),
    ("evaluation_backward", "evaluation runs a backward pass, adding into the step's gradients",
     (("        losses = [cross_entropy(model.forward(x), y)[0] for x, y in batches]",
       "        losses = []\n        for x, y in batches:\n"
       "            batch_loss, dlogits = cross_entropy(model.forward(x), y)\n"
       "            model.backward(dlogits)\n            losses.append(batch_loss)"),)),
    ("no_final_evaluation", "no evaluation after the last step unless it falls on eval_interval",
     (("if step % c.eval_interval == 0 or step == c.max_iters:", "if step % c.eval_interval == 0:"),)),
    ("rate_one_step_late", "step s trained at lr_at(s + 1): the schedule one step ahead",
     (("optimizer.lr = lr_at(step, c.lr,", "optimizer.lr = lr_at(step + 1, c.lr,"),)),
]

TRIVIAL = {
    "first_window": '''
import numpy as np


def get_batch(ids, batch_size, block_size, rng):
    window = np.asarray(ids[:block_size + 1], np.int64)
    return np.tile(window[:-1], (batch_size, 1)), np.tile(window[1:], (batch_size, 1))


def train_step(model, micro_batches, optimizer, max_norm):
    optimizer.step(model.grads)
    return 0.0, 0.0


def estimate_loss(model, batches):
    return 0.0


def train_loop(model, optimizer, train_ids, val_ids, config):
    return {key: [] for key in ("step", "train_loss", "lr", "grad_norm", "eval_step", "eval_train_loss", "val_loss")}
''',
}

IMPORT_REFERENCE = '''
from lib.data import get_batch
from lib.numpy_twin.train import estimate_loss, train_step as lib_train_step
from lib.train import train


def train_step(model, micro_batches, optimizer, max_norm):
    return lib_train_step(model, optimizer, micro_batches, optimizer.lr, max_norm)


def train_loop(model, optimizer, train_ids, val_ids, config):
    return train(model, train_ids, val_ids, config, progress=False)
'''
