"""Hidden tests of exercise 5.1 (the loss and the optimizer): cross-entropy, the schedule, AdamW.

- cross_entropy: the loss (a number) within 1e-10 + 1e-10 |ref| and dlogits within 1e-12 + 1e-8 |ref|
  in float64 (log-softmax in any order agrees to ~1e-15), on random logits, logits up to 1e4 (where
  exp overflows unless the row maximum is taken out first) and one position per row sure of its
  target; float32 logits must give float32 dlogits, within 1e-5 + 1e-4 |ref|. Bad targets (wrong
  shape, ids outside [0, V)) must raise ValueError: edge tests, as is the uniform logits case, whose
  loss ln V a constant gets right.
- lr_at: exact formula values within 1e-12 relative, across warmup, the cosine and after max_iters,
  including warmup_iters = 0. The last warmup step and the first cosine step are both `lr`, which
  an answer returning lr always gets right: edge tests.
- adamw_step: driven for 100 steps (the grader's `adamw` driver: gradients of a quadratic loss,
  the moments fed back, the learning rates of a warmup-cosine schedule), every parameter after every
  step within 1e-12 + 1e-8 |ref| of the reference trajectory. Measured: a formulation with lib's
  arithmetic (step size and denominator folded differently) stays within 1e-13 relative. Names and
  shapes decide the decay: 2-D `*.weight` decays; biases and 1-D `ln_*.weight` do not.
"""
import math

import numpy as np

from grader.drivers import drive_adamw
from grader.spec import Exercise, Test, close

EXERCISE = Exercise(
    notebook="ch5_optimizer", title="The loss and the optimizer",
    functions=("cross_entropy", "lr_at", "adamw_step"),
    blocked=("lib.numpy_twin.train:cross_entropy", "lib.numpy_twin.train:log_softmax",
             "lib.numpy_twin.train:AdamW", "lib.schedule:lr_at",
             "lib.torch_twin.train:cross_entropy", "lib.torch_twin.train:AdamW"),
)


def cross_entropy(logits, targets):
    z = np.asarray(logits, np.float64)
    B, T, V = z.shape
    z = z.reshape(B * T, V)
    m = z.max(axis=-1, keepdims=True)
    log_probs = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))      # (N, V)
    rows, cols = np.arange(B * T), np.asarray(targets).reshape(-1)
    dlogits = np.exp(log_probs)
    dlogits[rows, cols] -= 1.0
    return float(-log_probs[rows, cols].mean()), (dlogits / (B * T)).reshape(B, T, V)


def lr_at(step, lr, min_lr, warmup_iters, max_iters):
    if step < warmup_iters:
        return lr * (step + 1) / warmup_iters
    if step >= max_iters:
        return min_lr
    done = (step - warmup_iters) / max(1, max_iters - warmup_iters)       # 0 -> 1 over the cosine
    return min_lr + (lr - min_lr) * (1.0 + math.cos(done * math.pi)) / 2


def adamw_step(params, grads, m, v, step, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    b1, b2 = betas
    for name, p in params.items():
        g = grads[name]
        if p.ndim == 2 and name.endswith(".weight"):
            p *= 1 - lr * weight_decay
        m[name] = b1 * m[name] + (1 - b1) * g
        v[name] = b2 * v[name] + (1 - b2) * g * g
        m_hat = m[name] / (1 - b1 ** step)
        v_hat = v[name] / (1 - b2 ** step)
        p -= lr * m_hat / (np.sqrt(v_hat) + eps)


REFERENCE = {"cross_entropy": cross_entropy, "lr_at": lr_at, "adamw_step": adamw_step}


def loss_and_grad(expected, dtype, grad_tol):
    """Check: (loss, dlogits), the loss a number close to expected's, dlogits close, in `dtype`."""
    want_loss, want_grad = expected
    grad_check = close(want_grad, dtype=dtype, **grad_tol)

    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            return False, "expected a pair (loss, dlogits)"
        loss, dlogits = got
        if isinstance(loss, np.ndarray) and loss.shape == () and np.issubdtype(loss.dtype, np.floating):
            loss = float(loss)
        if not isinstance(loss, (int, float)) or isinstance(loss, bool):
            return False, f"the loss should be a number, got {type(loss).__name__}"
        if not math.isfinite(loss):
            return False, f"the loss is {loss}"
        rtol = 1e-10 if dtype == np.float64 else 1e-6
        if abs(loss - want_loss) > rtol * (1 + abs(want_loss)):
            return False, f"the loss {loss!r} is off (tolerance {rtol} (1 + |expected|))"
        verdict = grad_check(dlogits)
        return (True, "loss and dlogits close") if verdict[0] else (False, f"dlogits: {verdict[1]}")
    return check


def number(expected, rtol=1e-12):
    def check(got):
        if isinstance(got, np.ndarray) and got.shape == () and np.issubdtype(got.dtype, np.number):
            got = float(got)
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return False, f"expected a number, got {type(got).__name__}"
        if not abs(got - expected) <= rtol * abs(expected) + 1e-300:
            return False, f"got {got!r}: not the schedule's value (tolerance {rtol} relative)"
        return True, "close"
    return check


def trajectory(expected):
    """Check for the adamw driver: {name: (steps, *shape)} close to the reference's, name by name."""
    checks = {name: close(want, dtype=np.float64, rtol=1e-8, atol=1e-12) for name, want in expected.items()}

    def check(got):
        if not isinstance(got, dict) or set(got) != set(expected):
            return False, "the parameters could not be read back"
        for name, c in checks.items():
            verdict = c(got[name])
            if not verdict[0]:
                return False, f"{name} (flat index counts step by step, then within the parameter): {verdict[1]}"
        return True, "every parameter close at every step"
    return check


def _cross_entropy_tests():
    rng = np.random.default_rng(51)
    out = []
    sure = rng.normal(0, 1, (2, 3, 7))
    sure_targets = rng.integers(0, 7, (2, 3))
    sure[0, 0, sure_targets[0, 0]] = 60.0                                     # p(target) = 1 - 1e-26
    cases = {
        "(2, 5, 11) from N(0, 3^2)": (rng.normal(0, 3, (2, 5, 11)), rng.integers(0, 11, (2, 5))),
        "(1, 1, 2), two classes": (np.array([[[0.3, -1.2]]]), np.array([[1]])),
        "(3, 4, 50) around 1e4, spread 30": (1e4 + rng.normal(0, 30, (3, 4, 50)), rng.integers(0, 50, (3, 4))),
        "(2, 2, 6) with rows of -1e4 and 1e4": (rng.choice([-1e4, 0.0, 1e4], (2, 2, 6)) + rng.normal(0, 1, (2, 2, 6)),
                                                rng.integers(0, 6, (2, 2))),
        "(2, 3, 7), one position sure of its target": (sure, sure_targets),
    }
    for label, (logits, targets) in cases.items():
        out.append(Test(f"cross_entropy: {label}", "cross_entropy", (logits, targets),
                        loss_and_grad(cross_entropy(logits, targets), np.float64, dict(rtol=1e-8, atol=1e-12))))
    z32 = (rng.normal(0, 3, (2, 4, 9)) * np.array([1.0] * 8 + [3e3])).astype(np.float32)   # one column huge
    t32 = rng.integers(0, 9, (2, 4))
    out.append(Test("cross_entropy: float32 logits, some up to 1e4 (dlogits in float32)", "cross_entropy", (z32, t32),
                    loss_and_grad(cross_entropy(z32, t32), np.float32, dict(rtol=1e-4, atol=1e-5))))
    uniform, ut = np.zeros((2, 3, 256)), rng.integers(0, 256, (2, 3))
    out.append(Test("cross_entropy: uniform logits over 256 ids", "cross_entropy", (uniform, ut),
                    loss_and_grad(cross_entropy(uniform, ut), np.float64, dict(rtol=1e-8, atol=1e-12)), edge=True))
    z = rng.normal(0, 1, (2, 3, 5))
    out.append(Test("cross_entropy: targets of shape (3, 2) for logits (2, 3, 5)", "cross_entropy",
                    (z, rng.integers(0, 5, (3, 2))), expect_error="ValueError", edge=True))
    out.append(Test("cross_entropy: a target id equal to V", "cross_entropy",
                    (z, np.array([[0, 1, 5], [2, 3, 4]])), expect_error="ValueError", edge=True))
    out.append(Test("cross_entropy: a negative target id", "cross_entropy",
                    (z, np.array([[0, 1, 2], [-1, 3, 4]])), expect_error="ValueError", edge=True))
    return out


def _lr_tests():
    cases = [  # (label, args, edge)
        ("the first step of a 40-step warmup", (0, 3e-3, 3e-4, 40, 400), False),
        ("step 17 of a 40-step warmup", (17, 3e-3, 3e-4, 40, 400), False),
        ("the last warmup step", (39, 3e-3, 3e-4, 40, 400), True),
        ("the first cosine step", (40, 3e-3, 3e-4, 40, 400), True),
        ("a third into the cosine", (160, 3e-3, 3e-4, 40, 400), False),
        ("just before max_iters", (399, 3e-3, 3e-4, 40, 400), False),
        ("at max_iters", (400, 3e-3, 3e-4, 40, 400), False),
        ("long after max_iters", (5000, 3e-3, 3e-4, 40, 400), False),
        ("no warmup, step 250 of 1000", (250, 6e-4, 6e-5, 0, 1000), False),
        ("GPT-2's recipe at step 5,000", (5000, 6e-4, 6e-5, 715, 19073), False),
        ("min_lr = 0, three quarters in", (775, 1e-3, 0.0, 100, 1000), False),
    ]
    return [Test(f"lr_at: {label}", "lr_at", args, number(lr_at(*args)), edge=edge) for label, args, edge in cases]


def _adamw_case(seed, shapes, scale, n_steps, schedule, settings):
    rng = np.random.default_rng(seed)
    params = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    targets = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    scales = {name: scale * rng.uniform(0.1, 3.0, shape) for name, shape in shapes.items()}   # ill-conditioned
    lrs = [lr_at(s, **schedule) for s in range(n_steps)]
    args = (params, targets, scales, lrs)
    copies = ({n: p.copy() for n, p in params.items()}, targets, scales, lrs)
    return args, drive_adamw(adamw_step, copies, settings)


GPT_NAMES = {"h.0.attn.c_attn.weight": (6, 4), "h.0.attn.c_attn.bias": (6,), "h.0.ln_1.weight": (4,),
             "h.0.ln_1.bias": (4,), "wte.weight": (5, 4), "wpe.weight": (3, 4)}


def _adamw_tests():
    cases = {
        "100 steps, GPT names, warmup 10 and cosine, betas (0.9, 0.95), weight decay 0.1":
            (1, GPT_NAMES, 1.0, 100, dict(lr=1e-2, min_lr=1e-3, warmup_iters=10, max_iters=100),
             dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)),
        "100 steps, betas (0.8, 0.999), weight decay 0.5, eps 1e-6":
            (2, GPT_NAMES, 1.0, 100, dict(lr=3e-2, min_lr=0.0, warmup_iters=5, max_iters=80),
             dict(betas=(0.8, 0.999), eps=1e-6, weight_decay=0.5)),
        "60 steps of tiny gradients (1e-7), where eps matters":
            (3, {"h.1.mlp.c_fc.weight": (3, 5), "h.1.mlp.c_fc.bias": (3,), "ln_f.weight": (5,)}, 1e-7, 60,
             dict(lr=1e-2, min_lr=1e-3, warmup_iters=0, max_iters=60), dict(betas=(0.9, 0.99), eps=1e-7, weight_decay=0.2)),
        "40 steps without weight decay":
            (4, GPT_NAMES, 1.0, 40, dict(lr=5e-3, min_lr=5e-4, warmup_iters=8, max_iters=40),
             dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)),
    }
    out = []
    for label, (seed, shapes, scale, n_steps, schedule, settings) in cases.items():
        args, expected = _adamw_case(seed, shapes, scale, n_steps, schedule, settings)
        out.append(Test(f"adamw_step: {label}", "adamw_step", args, trajectory(expected), kwargs=settings,
                        driver="adamw", points=4))
    return out


def tests():
    return _cross_entropy_tests() + _lr_tests() + _adamw_tests()
