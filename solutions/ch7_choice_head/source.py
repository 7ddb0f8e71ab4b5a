"""Exercise 7.2: GPT-1's multiple-choice head, forward and backward."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def choice_head(hidden, extract, weight, bias, labels):
    """GPT-1's multiple-choice head on one batch, and its gradients.

    hidden (B, S, T, C): the final hidden states of each example's S choice sequences;
    extract (B, S): the position of each sequence's [extract] token (choices differ in
    length, so their positions differ; padding follows); weight (1, C) and bias (1,):
    the one linear head every choice shares; labels (B,): the right choice, in [0, S).
    Returns a dict with "scores" (B, S), "loss" (a float: the mean over the batch of
    -log softmax(scores)[label], the softmax across the choices) and the gradients of
    the loss "dhidden" (B, S, T, C), "dweight" (1, C), "dbias" (1,)."""
    raise NotImplementedError("exercise 7.2: write choice_head")
'''

ANSWER = '''
import numpy as np


def choice_head(hidden, extract, weight, bias, labels):
    """GPT-1's multiple-choice head on one batch, and its gradients.

    hidden (B, S, T, C): the final hidden states of each example's S choice sequences;
    extract (B, S): the position of each sequence's [extract] token (choices differ in
    length, so their positions differ; padding follows); weight (1, C) and bias (1,):
    the one linear head every choice shares; labels (B,): the right choice, in [0, S).
    Returns a dict with "scores" (B, S), "loss" (a float: the mean over the batch of
    -log softmax(scores)[label], the softmax across the choices) and the gradients of
    the loss "dhidden" (B, S, T, C), "dweight" (1, C), "dbias" (1,)."""
    B, S, T, C = hidden.shape
    extract, labels = np.asarray(extract), np.asarray(labels)
    if weight.shape != (1, C) or bias.shape != (1,):
        raise ValueError(f"weight must be (1, {C}) and bias (1,), got {weight.shape} "
                         f"and {bias.shape}")
    if extract.shape != (B, S) or extract.min() < 0 or extract.max() >= T:
        raise ValueError(f"extract must be (B, S) = {(B, S)} positions in [0, {T}), "
                         f"got {extract!r}")
    if labels.shape != (B,) or labels.min() < 0 or labels.max() >= S:
        raise ValueError(f"labels must be {B} choice indices in [0, {S}), "
                         f"got {labels!r}")
    rows, seqs = np.arange(B)[:, None], np.arange(S)   # (B, 1), (S,)
    states = hidden[rows, seqs, extract]               # (B, S, C): each [extract] state
    scores = states @ weight[0] + bias[0]              # (B, S): one number per choice
    # (B, S): the largest is 0, so exp cannot overflow
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))   # (B, S)
    loss = -log_p[np.arange(B), labels].mean()
    dscores = np.exp(log_p)                            # (B, S): softmax - one_hot, / B
    dscores[np.arange(B), labels] -= 1.0
    dscores /= B
    dhidden = np.zeros_like(hidden)                    # (B, S, T, C)
    dhidden[rows, seqs, extract] = dscores[..., None] * weight[0]
    # (1, C): one w shared by every choice, so its gradient is summed over them
    dweight = (dscores[..., None] * states).sum(axis=(0, 1))[None]
    # (1,): a softmax's rows of gradient sum to 0, so the bias learns nothing
    dbias = dscores.sum(keepdims=True).reshape(1)
    return {"scores": scores, "loss": float(loss), "dhidden": dhidden,
            "dweight": dweight, "dbias": dbias}
'''

CELLS = [
    md(r"""
    # Exercise 7.2: the multiple-choice head

    This exercise follows [chapter 7](../chapters/07_finetuning.ipynb), where GPT-1's four input
    formats {cite}`radford2018improving` are fine-tuned on the plays. The multiple-choice format
    writes one sequence per choice, `[start] context [delim] choice [extract]`, runs each through
    the model, and scores each by the **same** linear head to **one** number; a softmax **across
    the choices** turns the numbers into the probability that each is the right one. Here you write
    that head, forward and backward: what turns the model's states into a loss, and what the
    model's backward pass receives.

    **What is graded.** The cell tagged `graded:ch7_choice_head`. A grader runs that cell alone, in
    a sandbox, and calls `choice_head` with hidden tests; nothing else in this notebook is graded.
    The checks below it are a first test you can run yourself. Some hidden tests are *edge tests*
    (bad input that must raise, and the bias's gradient, which is zero): they count only once every
    other test of the same output passes, so that an answer that does almost nothing cannot collect
    points.
    """),
    setup(),
    md(r"""
    ## The contract

    A batch holds B examples of S choices each. The model has read every choice's sequence, so
    `hidden` $(B, S, T, C)$ holds the final hidden states (after the last LayerNorm). The choices
    differ in length: sequence $(b, s)$ ends in its `[extract]` token at position
    `extract[b, s]`, and padding follows it.

    - The head reads each sequence's state at its `[extract]` position, $h_{b,s}$ $(C,)$, and gives
      it one score, $s_{b,s} = h_{b,s} \cdot w + b_0$, with `weight` $(1, C)$ (its row $w$) and
      `bias` $(1,)$ (its $b_0$), the same for every choice.
    - The loss is the mean over the batch of $-\log \mathrm{softmax}(s_b)[\text{label}_b]$, the
      softmax taken over the S choices of example $b$.
    - `choice_head(hidden, extract, weight, bias, labels)` returns a dict: `"scores"` $(B, S)$,
      `"loss"` (a float), and the gradients of the loss `"dhidden"` $(B, S, T, C)$ (zero everywhere
      but the `[extract]` positions), `"dweight"` $(1, C)$ and `"dbias"` $(1,)$.
    - Raise `ValueError` for labels outside $[0, S)$ (or not B of them), for `extract` that is not
      $(B, S)$ or points outside $[0, T)$, and for a `weight` that is not $(1, C)$ or a `bias` that
      is not $(1,)$.

    **Rules.** Scores can be large (the hidden tests go to thousands): compute the log-softmax so
    that nothing overflows. Grading is in float64, within $10^{-9}$ relative. Use numpy only; while
    grading, torch is not installed and lib's format heads raise an error. The graded cell must hold
    everything the function uses, imports included.

    :::{admonition} Hint: the gradients
    :class: dropdown
    The gradient of the mean cross-entropy over B rows with respect to the scores is
    $(\mathrm{softmax} - \mathrm{onehot})/B$. Every choice used the same $w$: its gradient adds
    over the batch and the choices. What does adding one number to every choice's score do to a
    softmax across them?
    :::
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    On small random inputs, one property per cell: where the head reads, the softmax across the
    choices, the gradients against central differences of the loss, the bias, scores too large for a
    naive softmax, and bad input.
    """),
    code('''
    from lib.checks import expect_close, expect_grad, expect_raises, expect_shape

    rng = np.random.default_rng(1)
    B, S, T, C = 2, 3, 6, 5
    inputs = dict(hidden=rng.standard_normal((B, S, T, C)),
                  extract=np.array([[5, 2, 3], [1, 4, 5]]),   # choices of different lengths
                  weight=rng.standard_normal((1, C)), bias=rng.standard_normal(1),
                  labels=np.array([2, 0]))
    out = choice_head(**inputs)
    '''),
    check('''
    expect_shape("scores", out["scores"], (B, S), np.float64)
    # the padding after [extract] changes nothing
    padded = inputs["hidden"].copy()
    for b in range(B):
        for s in range(S):
            padded[b, s, inputs["extract"][b, s] + 1:] = 1e6
    expect_close("scores with other values after each [extract]",
                 choice_head(**{**inputs, "hidden": padded})["scores"], out["scores"])
    '''),
    check('''
    # one example's loss: -log of the right choice's share of the softmax across its choices
    s0 = out["scores"][0]
    p0 = np.exp(s0) / np.exp(s0).sum()
    s1 = out["scores"][1]
    p1 = np.exp(s1) / np.exp(s1).sum()
    expect_close("loss: the mean of -log softmax(scores)[label] over the batch",
                 out["loss"], -(np.log(p0[2]) + np.log(p1[0])) / 2, rtol=1e-12)
    '''),
    check('''
    for key, shape in (("dhidden", (B, S, T, C)), ("dweight", (1, C))):
        expect_shape(key, out[key], shape, np.float64)
    for key in ("hidden", "weight"):
        def loss_of(value, key=key):
            return choice_head(**{**inputs, key: value})["loss"]

        def grad_of(value, key=key):
            return choice_head(**{**inputs, key: value})[f"d{key}"]

        expect_grad(f"d{key} against central differences", loss_of, grad_of, inputs[key])
    '''),
    check('''
    # the same number added to every choice's score: the softmax does not see it
    shifted = choice_head(**{**inputs, "bias": inputs["bias"] + 7.0})
    expect_close("loss with the bias moved by 7", shifted["loss"], out["loss"], rtol=1e-12)
    expect_shape("dbias", out["dbias"], (1,), np.float64)
    expect_close("dbias", out["dbias"], np.zeros(1), atol=1e-12)
    '''),
    check('''
    big = {**inputs, "weight": 2000.0 * inputs["weight"]}     # scores in the thousands
    huge = choice_head(**big)
    z = huge["scores"] - huge["scores"].max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    expect_close("loss with scores in the thousands", huge["loss"],
                 -(log_p[0, 2] + log_p[1, 0]) / 2, rtol=1e-12)
    finite = np.isfinite(huge["dhidden"])
    expect_shape("dhidden with scores in the thousands (finite)",
                 huge["dhidden"][finite], (B * S * T * C,))
    '''),
    check('''
    expect_raises("a label equal to S = 3", ValueError, choice_head,
                  **{**inputs, "labels": np.array([3, 0])})
    expect_raises("a label of -1", ValueError, choice_head,
                  **{**inputs, "labels": np.array([-1, 0])})
    expect_raises("an extract position equal to T = 6", ValueError, choice_head,
                  **{**inputs, "extract": np.array([[6, 2, 3], [1, 4, 5]])})
    expect_raises("extract (B,) instead of (B, S)", ValueError, choice_head,
                  **{**inputs, "extract": np.array([5, 2])})
    expect_raises("a weight of two rows", ValueError, choice_head,
                  **{**inputs, "weight": np.ones((2, C))})
    '''),
    md("""
    ## Inside the model

    Now the real thing: a small float64 model reads a batch of chapter 7's multiple-choice
    examples. Your `dhidden` goes into the model's backward pass, and every gradient of the model
    and of the head must equal what lib's own step computes for the multiple-choice format with
    $\\lambda = 0$ (lib's gradients are copied before the model's are zeroed for yours).
    """),
    check('''
    from lib import gpt1_tasks
    from lib.config import GPTConfig
    from lib.numpy_twin import GPT
    from lib.numpy_twin.finetune import ClassifierHead
    from lib.numpy_twin.gpt1_formats import format_loss

    ex = gpt1_tasks.task_examples("choice", ["hamlet"], 3, seed=0)   # x (3, 4, T)
    config = GPTConfig(vocab_size=259, n_ctx=128, n_layer=1, n_head=2, n_embd=16)
    model = GPT(config, seed=2, dtype=np.float64)
    head = ClassifierHead(16, 1, seed=2).astype(np.float64)

    model.zero_grad()
    head.zero_grad()
    lib_loss = format_loss(model, head, ex.x, ex.extract, ex.labels, True, 0.0)[1]
    want = {name: g.copy() for name, g in model.named_grads()}
    want.update({"head.weight": head.grads["weight"].copy(),
                 "head.bias": head.grads["bias"].copy()})

    model.zero_grad()
    Bx, Sx, Tx = ex.x.shape
    states = model.forward_outputs(ex.x.reshape(Bx * Sx, Tx)).hidden   # (B S, T, C)
    mine = choice_head(states.reshape(Bx, Sx, Tx, -1), ex.extract, head.weight, head.bias,
                       ex.labels)
    model.backward(np.zeros((Bx * Sx, Tx, config.vocab_size)),
                   dhidden=mine["dhidden"].reshape(Bx * Sx, Tx, -1))
    got = {**dict(model.named_grads()), "head.weight": mine["dweight"],
           "head.bias": mine["dbias"]}
    expect_close("the loss", mine["loss"], lib_loss, rtol=1e-12)
    for name in want:
        expect_close(name, got[name], want[name], rtol=1e-9, atol=1e-13)
    '''),
    md("""
    ## Compare with lib

    lib splits the same computation into the states at `[extract]`, the per-choice scores and the
    cross-entropy, each with its backward, in `lib/numpy_twin/gpt1_formats.py`. Open the cell below
    once your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.numpy_twin import gpt1_formats as nf

    show(nf.extract_states, nf.extract_states_backward, nf.choice_scores,
         nf.choice_scores_backward)
    '''),
    md("""
    ## Going further

    - The similarity format adds the states of its two orders before a head of two scores. Write its
      backward: what does each order's `[extract]` state receive?
    - Why does the multiple-choice head have one output and not four, one per choice? What would
      four outputs learn about the *position* of the right answer, and why is that no help?
    """),
]
