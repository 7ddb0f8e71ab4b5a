"""Exercise ch9_dpo's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("no_reference", "the reference's log-probabilities left out of the margin",
     (("z = beta * ((pc - rc) - (pr - rr))", "z = beta * (pc - pr)"),),
     "the reference terms are missing"),
    ("sum_not_mean", "the loss summed over the pairs, not averaged",
     (("loss = float(np.mean(np.logaddexp(0.0, -z)))", "loss = float(np.sum(np.logaddexp(0.0, -z)))"),)),
    ("gradient_sign", "the gradient's sign flipped: a step would make the rejected response likelier",
     (("g = (-beta * sigmoid_minus_z / len(z))", "g = (beta * sigmoid_minus_z / len(z))"),),
     "the gradient's sign is flipped"),
    ("naive_log_sigmoid", "-log(1 / (1 + exp(-z))) as written: inf once exp overflows",
     (("loss = float(np.mean(np.logaddexp(0.0, -z)))", "loss = float(np.mean(-np.log(1.0 / (1.0 + np.exp(-z)))))"),)),
    ("no_beta_check", "beta <= 0 accepted",
     (("    if not beta > 0:\n        raise ValueError(f\"beta must be > 0, got {beta!r}\")\n", ""),)),
]

TRIVIAL = {
    "log_two": '''
import numpy as np


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp, beta):
    g = np.full(len(policy_chosen_logp), -beta / (2 * len(policy_chosen_logp)))
    return float(np.log(2.0)), (g, -g, -g, g)
''',
}

IMPORT_REFERENCE = '''
from lib.numpy_twin.posttrain import dpo_loss
'''
