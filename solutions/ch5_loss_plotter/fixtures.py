"""Exercise ch5_loss_plotter's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("centered_smoothing", "a centred window instead of a trailing one",
     (("    end = np.arange(1, len(x) + 1)                  # (N,): each window is x[start:end]\n"
       "    start = np.maximum(0, end - window)",
       "    centre = np.arange(len(x))\n"
       "    start = np.maximum(0, centre - window // 2)\n"
       "    end = np.minimum(len(x), start + window)"),)),
    ("window_plus_one", "each window averages window + 1 losses",
     (("start = np.maximum(0, end - window)", "start = np.maximum(0, end - window - 1)"),)),
    ("one_step_rate", "the rate as the one-step drop of the smoothed loss",
     (("r[window:] = (s[:-window] - s[window:]) / window", "r[window:] = s[window - 1:-1] - s[window:]"),)),
    ("first_rate_reference", "thresholds relative to the first rate, not the largest",
     (("    peak = int(np.nanargmax(r))                         # the first of the largest rates",
       "    peak = window"),)),
    ("search_from_start", "the fast phase's end searched from the first rate, not after the peak",
     (("after = np.flatnonzero(r[peak + 1:] < fast * r[peak])", "after = np.flatnonzero(r[window:] < fast * r[peak])"),
      ("end_fast = peak + 1 + int(after[0])", "end_fast = window + int(after[0])"))),
]

TRIVIAL = {
    "raises": '''
def smooth(losses, window):
    raise ValueError(window)


def drop_rate(losses, window):
    raise ValueError(window)


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    raise ValueError(window)
''',
    "identity_and_no_phases": '''
import numpy as np


def smooth(losses, window):
    if window < 1:
        raise ValueError(window)
    return np.asarray(losses, np.float64)


def drop_rate(losses, window):
    return np.full(len(losses), np.nan)


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    if len(losses) <= window or not 0 < plateau < fast < 1 or losses[-1] >= losses[0]:
        raise ValueError(window)
    return None, None
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.plotting import moving_average


def smooth(losses, window):
    x = np.asarray(losses, np.float64)
    full = moving_average(x, max(1, min(window, len(x))))      # the windows that are complete
    if window < 1:
        raise ValueError(window)
    head = np.cumsum(x[:window - 1]) / np.arange(1, len(x[:window - 1]) + 1)
    return np.concatenate([head, full])[:len(x)] if len(x) >= window else head


def drop_rate(losses, window):
    s = smooth(losses, window)
    r = np.full(len(s), np.nan)
    r[window:] = (s[:-window] - s[window:]) / window
    return r


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    r = drop_rate(losses, window)
    if not 0 < plateau < fast < 1 or len(losses) <= window:
        raise ValueError((fast, plateau))
    peak = int(np.nanargmax(r))
    if not r[peak] > 0:
        raise ValueError("never falls")
    after = np.flatnonzero(r[peak + 1:] < fast * r[peak])
    if not len(after):
        return None, None
    end = peak + 1 + int(after[0])
    flat = np.flatnonzero(r[end:] < plateau * r[peak])
    return end, (end + int(flat[0]) if len(flat) else None)
'''
