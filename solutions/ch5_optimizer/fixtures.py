"""Exercise ch5_optimizer's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("no_max_subtraction", "log-softmax without taking out the row maximum: exp overflows for large logits",
     (("shifted = z - z.max(axis=-1, keepdims=True)", "shifted = z"),)),
    ("gradient_not_averaged", "dlogits of the summed loss, not of the mean (missing 1 / (B T))",
     (("    dlogits /= B * T                                          # the mean's 1 / N\n", ""),)),
    ("warmup_from_zero", "the warmup starts at 0: lr * step / warmup_iters",
     (("return lr * (step + 1) / warmup_iters", "return lr * step / warmup_iters"),)),
    ("cosine_to_zero", "the cosine decays to 0 instead of min_lr",
     (("return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))",
       "return lr * 0.5 * (1.0 + math.cos(math.pi * progress))"),)),
    ("no_bias_correction", "m and v used without dividing by 1 - beta^t",
     (("m_hat = m / (1 - b1 ** step)", "m_hat = m"), ("v_hat = v / (1 - b2 ** step)", "v_hat = v"))),
    ("coupled_weight_decay", "Adam with L2: the decay added to the gradient instead of to the weights",
     (("            p *= 1 - lr * weight_decay           # decoupled: the gradient never sees it",
       "            g = g + weight_decay * p"),),
     "the decay went into the gradient (Adam with L2)"),
    ("decays_every_weight", "LayerNorm's 1-D gains decayed too (every name ending in .weight)",
     (('return p.ndim == 2 and name.endswith(".weight")', 'return name.endswith(".weight")'),)),
    ("eps_inside_sqrt", "eps inside the square root: sqrt(v_hat + eps)",
     (("(np.sqrt(v_hat) + eps)", "np.sqrt(v_hat + eps)"),)),
]

TRIVIAL = {
    "constants": '''
import math

import numpy as np


def cross_entropy(logits, targets):
    if np.shape(targets) != logits.shape[:2] or np.min(targets) < 0 or np.max(targets) >= logits.shape[-1]:
        raise ValueError(targets)
    return math.log(logits.shape[-1]), np.zeros_like(logits)


def lr_at(step, lr, min_lr, warmup_iters, max_iters):
    return lr


def adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    pass
''',
}

IMPORT_REFERENCE = '''
from lib.numpy_twin.train import AdamW, cross_entropy
from lib.schedule import lr_at


def adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    optimizer = AdamW(params.items(), lr, betas, eps, weight_decay)
    optimizer.exp_avg, optimizer.exp_avg_sq, optimizer.steps = exp_avg, exp_avg_sq, step - 1
    optimizer.step(grads)
'''
