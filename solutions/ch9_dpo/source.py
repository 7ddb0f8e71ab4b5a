"""Exercise 9.2: the DPO loss and its gradient with respect to the four log-probabilities."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp,
             ref_rejected_logp, beta):
    """DPO's loss over a batch of B preference pairs, and its gradient.

    The four arguments are (B,) arrays of log-probabilities of whole responses: the
    policy's and the frozen reference's, for the chosen and the rejected response of
    each pair; beta > 0. Returns (loss, (d_policy_chosen, d_policy_rejected,
    d_ref_chosen, d_ref_rejected)): the loss a float, each gradient a (B,) array in
    the inputs' dtype."""
    raise NotImplementedError("exercise 9.2: write dpo_loss")
'''

ANSWER = '''
import numpy as np


def dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp,
             ref_rejected_logp, beta):
    """DPO's loss over a batch of B preference pairs, and its gradient.

    The four arguments are (B,) arrays of log-probabilities of whole responses: the
    policy's and the frozen reference's, for the chosen and the rejected response of
    each pair; beta > 0. Returns (loss, (d_policy_chosen, d_policy_rejected,
    d_ref_chosen, d_ref_rejected)): the loss a float, each gradient a (B,) array in
    the inputs' dtype."""
    logps = [np.asarray(a) for a in (policy_chosen_logp, policy_rejected_logp,
                                     ref_chosen_logp, ref_rejected_logp)]
    if len({a.shape for a in logps}) != 1 or logps[0].ndim != 1 or len(logps[0]) == 0:
        raise ValueError("expected four (B,) arrays of one shape, B >= 1; got "
                         f"{[a.shape for a in logps]}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    pc, pr, rc, rr = (a.astype(np.float64) for a in logps)
    z = beta * ((pc - rc) - (pr - rr))                   # (B,): beta times the margin
    # -log sigmoid(z) = log(1 + e^-z), no overflow
    loss = float(np.mean(np.logaddexp(0.0, -z)))
    sigmoid_minus_z = 0.5 * (1.0 - np.tanh(0.5 * z))     # sigmoid(-z), finite for any z
    # (B,): dloss / d policy_chosen
    g = (-beta * sigmoid_minus_z / len(z)).astype(logps[0].dtype)
    return loss, (g, -g, -g, g)
'''

# The formulas the answer is, as the hints write them: shown only in a hint's last stage
# (tests/test_staged_hints.py).
FINAL_FORMULAS = [
    r"-\beta \sigma(-z) / B",
    "np.logaddexp(0, -z)",
    r"\frac12(1 + \tanh(t/2))",
]

CELLS = [
    md(r"""
    # Exercise 9.2: the DPO loss and its gradient

    This exercise follows [chapter 9](../chapters/09_post_training.ipynb), whose last tuning is DPO
    {cite}`rafailov2023direct`: it tunes a model on preference pairs, a chosen and a rejected response to
    the same prompt, with a loss on the log-probabilities of the two responses under the model being
    tuned (the policy, $\pi$) and under a frozen reference ($\pi_\text{ref}$):

    $$L = \frac{1}{B} \sum_{i=1}^{B} -\log \sigma(z_i), \qquad
    z_i = \beta \big[(\log \pi(c_i) - \log \pi_\text{ref}(c_i)) - (\log \pi(r_i) - \log \pi_\text{ref}(r_i))\big].$$

    You write the loss and its gradient with respect to the four log-probabilities, which is all a
    training step needs before the model's own backward pass.

    **What is graded.** The cell tagged `graded:ch9_dpo`. A grader runs that cell alone, in a sandbox,
    and calls `dpo_loss` with hidden tests; nothing else in this notebook is graded. The checks
    below it are a first test you can run yourself. Some hidden tests are *edge tests* (bad input
    that must raise; pairs whose margins are all zero, where a constant answer is also right):
    they count only once every other test passes.
    """),
    setup(),
    md(r"""
    ## The contract

    - `dpo_loss(policy_chosen_logp, policy_rejected_logp, ref_chosen_logp, ref_rejected_logp, beta)`
      takes four (B,) arrays and $\beta > 0$, and returns `(loss, grads)`: the loss as a float, and
      `grads` the four gradients $\partial L / \partial$ (each argument), in the arguments' order,
      each a (B,) array in the inputs' dtype.
    - Margins get large: a model sure of itself gives log-probabilities in the hundreds or thousands
      of nats apart, and the hidden tests go to $|z| = 10^4$. Loss and gradients must stay finite
      and right there, for a pair ranked right ($z \gg 0$) and for one ranked wrong ($z \ll 0$).
    - Raise `ValueError` when the four arrays are not one (B,) shape with $B \ge 1$, and when
      $\beta \le 0$.
    - Grading is in float64 within $10^{-9}$ relative (and $10^{-15}$ absolute, for gradients that
      are 0 to the last bit); float32 inputs must give float32 gradients within $10^{-5}$.

    :::{admonition} The gradient, hint 1 of 3: the idea
    :class: dropdown
    The loss depends on the four log-probabilities only through each pair's $z_i$: differentiate
    $-\log\sigma(z)$ with respect to $z$, then $z$ with respect to each argument (the chain
    rule), and remember the mean over the $B$ pairs. Two facts about the sigmoid help:
    $\sigma'(t) = \sigma(t)\,(1 - \sigma(t))$ and $1 - \sigma(t) = \sigma(-t)$.
    :::

    :::{admonition} The gradient, hint 2 of 3: the two derivatives
    :class: dropdown
    $\frac{d}{dz}\big[-\log\sigma(z)\big] = -\sigma'(z)/\sigma(z)$, which the two facts turn into
    one sigmoid. $z$ is $\beta$ times a sum of the four log-probabilities with signs $+, -, -, +$
    (the policy's chosen, the reference's chosen, the policy's rejected, the reference's
    rejected): each argument's $\partial z_i/\partial$ is $\pm\beta$, and pair $i$'s loss
    depends on pair $i$'s arguments only.
    :::

    :::{admonition} The gradient, hint 3 of 3: the formula
    :class: dropdown
    The derivative of $-\log\sigma(z)$ is $-\sigma(-z)$, so the gradient with respect to the
    policy's chosen log-probability is $-\beta \sigma(-z) / B$ (each pair its own $z$), with the
    opposite sign for the rejected one and for the reference's chosen one, and the same sign
    for the reference's rejected one.
    :::

    :::{admonition} Stability, hint 1 of 2: the idea
    :class: dropdown
    $-\log \sigma(z) = \log(1 + e^{-z})$, the softplus of $-z$. Written as it stands it overflows
    for $z = -1000$: $e^{1000}$ is `inf` in float64. It is the logarithm of a sum of two
    exponentials, $e^0$ and $e^{-z}$; numpy has a function that computes exactly that without
    forming either. The sigmoid in the gradient needs the same care: write it with a function
    that never overflows.
    :::

    :::{admonition} Stability, hint 2 of 2: the formulas
    :class: dropdown
    `np.logaddexp(0, -z)` computes $\log(e^0 + e^{-z})$ without overflow, and
    $\sigma(t) = \frac12(1 + \tanh(t/2))$ never overflows.
    :::

    Use numpy only; while grading, torch is not installed and lib's DPO loss raises an error. The
    graded cell must hold everything the function uses, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Small random inputs: the loss against the formula written out, the gradients against central
    differences, margins of $\pm 5000$, and bad input.
    """),
    code('''
    from lib.checks import (CheckFailed, expect_close, expect_grad, expect_raises,
                            expect_shape)

    rng = np.random.default_rng(92)
    B, beta = 5, 0.5
    # policy chosen, rejected; reference chosen, rejected
    logps = [rng.standard_normal(B) * 3 for _ in range(4)]
    '''),
    check('''
    loss, grads = dpo_loss(*logps, beta)
    moved = dpo_loss(logps[0], logps[1], logps[2] - 1.0, logps[3], beta)[0]
    if moved == loss:
        raise CheckFailed("the loss does not change when the reference's log-probabilities"
                          " do: the reference terms are missing; the margin compares each "
                          "response's log-probability under the policy with the "
                          "reference's")
    z = beta * ((logps[0] - logps[2]) - (logps[1] - logps[3]))
    expect_close("the loss on 5 random pairs", loss,
                 np.mean(-np.log(1 / (1 + np.exp(-z)))), rtol=1e-12)
    '''),
    check('''
    names = ("d_policy_chosen", "d_policy_rejected", "d_ref_chosen", "d_ref_rejected")
    if (grads[0] > 0).all() and (grads[1] < 0).all():
        raise CheckFailed("d_policy_chosen is positive and d_policy_rejected negative: a "
                          "step against your gradient would make the rejected response "
                          "likelier and the chosen one less likely; the gradient's sign is"
                          " flipped")
    for k, name in enumerate(names):
        expect_shape(name, grads[k], (B,), np.float64)

        def loss_of(value, k=k):
            return dpo_loss(*(value if j == k else a for j, a in enumerate(logps)), beta)[0]

        def grad_of(value, k=k):
            return dpo_loss(*(value if j == k else a for j, a in enumerate(logps)),
                            beta)[1][k]

        expect_grad(f"{name} against central differences", loss_of, grad_of, logps[k])
    '''),
    check('''
    # z = 5000, -5000, 0
    pc, pr = np.array([0.0, 0.0, -1.0]), np.array([-5000.0, 5000.0, -1.0])
    zero = np.zeros(3)
    loss, grads = dpo_loss(pc, pr, zero, zero, 1.0)
    expect_close("the loss at margins +5000, -5000, 0", loss,
                 (0.0 + 5000.0 + np.log(2.0)) / 3, rtol=1e-12)
    expect_close("d_policy_chosen at margins +5000, -5000, 0", grads[0],
                 np.array([0.0, -1.0, -0.5]) / 3, rtol=1e-12, atol=1e-15)
    '''),
    check('''
    expect_raises("beta = 0", ValueError, dpo_loss, *logps, 0.0)
    expect_raises("beta = -0.1", ValueError, dpo_loss, *logps, -0.1)
    expect_raises("a rejected array of 4 for B = 5", ValueError, dpo_loss, logps[0],
                  logps[1][:4], logps[2], logps[3], beta)
    '''),
    md("""
    ## Compare with lib

    lib's numpy twin computes the same loss and gradient (its DPO step then sends the two policy
    gradients into the model through the responses' log-probabilities); the torch twin writes the
    loss with `softplus` and lets autograd find the gradient. Open the cell below once your checks
    pass.
    """),
    collapsed('''
    from lib.display import side_by_side
    from lib.numpy_twin import posttrain as npt
    from lib.torch_twin import posttrain as tpt

    side_by_side(npt.dpo_loss, tpt.dpo_loss)
    '''),
    md("""
    ## Going further

    - The gradient with respect to the policy's chosen log-probability is $-\\beta\\sigma(-z)/B$.
      Which pairs does a DPO step push hardest: those the model already ranks right, or those it
      ranks wrong? Compare with the gradient of a plain margin loss, $-z$.
    - Without a reference (its log-probabilities all 0), what does the loss reward? Why can that
      make a model drift from what it was?
    """),
]
