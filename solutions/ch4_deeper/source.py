"""Exercise 4.2: count a GPT's parameters by formula, then compare doubling depth with doubling width."""
from build_notebooks import check, code, graded, md, setup, uses


STUB = '''
def count_params(config):
    """The number of parameters of a GPT-2-style model with this config
    (lib.config.GPTConfig), counting the output head, which shares the token
    embedding's matrix, zero times. -> int"""
    raise NotImplementedError("exercise 4.2: write count_params")
'''

ANSWER = '''
def count_params(config):
    """The number of parameters of a GPT-2-style model with this config
    (lib.config.GPTConfig), counting the output head, which shares the token
    embedding's matrix, zero times. -> int"""
    C = config.n_embd
    layer_norm = 2 * C                                  # gain and bias
    # c_attn: C -> 3C (q, k, v); c_proj: C -> C
    attention = (C * 3 * C + 3 * C) + (C * C + C)
    mlp = (C * 4 * C + 4 * C) + (4 * C * C + C)         # c_fc: C -> 4C; c_proj: 4C -> C
    block = layer_norm + attention + layer_norm + mlp   # 12 C^2 + 13 C
    embeddings = config.vocab_size * C + config.n_ctx * C  # wte (also the head) and wpe
    return embeddings + config.n_layer * block + layer_norm  # + ln_f
'''

CELLS = [
    md(r"""
    # Exercise 4.2: Deeper or wider?

    *This exercise follows [chapter 4, The full model](../chapters/04_model.ipynb).*

    How many parameters does a GPT have, and where are they? In this exercise you write a function
    that answers from the configuration alone, check it against real models, and then use it to
    compare two ways of making GPT-2 bigger: twice as deep (24 layers and 16 heads: GPT-2
    Medium's depth and heads, at Small's width) or twice as wide. You compare them in parameters and in measured time per
    training step.

    **What is graded.** The cell tagged `graded:ch4_deeper` (the one defining `count_params`). A grader
    runs that cell alone, in a sandbox, and calls `count_params` on hidden configurations; nothing
    else in this notebook is graded. Write your answer in that cell and keep the cell. An edge test
    (a model with one head, whose count a constant could match) counts only once every other test
    passes, so that an answer that does almost nothing cannot collect points.
    """),
    setup(),
    md("""
    The next cell is the one place that chooses the exercise's sizes: with a GPU, GPT-2 Small and its
    two bigger variants are timed on it; on a CPU, the same shapes at a width of 128, so that each
    step takes milliseconds.
    """),
    code('''
    from dataclasses import replace

    import torch

    from lib.config import GPTConfig
    from lib.scale import device, gpu_or_tiny, gpu_scale, where

    GPU = gpu_scale()
    DEVICE = device()
    if GPU:                              # a CPU standing in for a GPU (lib.scale): 2 layers
        # 12 layers, 12 heads, 768 wide
        BASE = gpu_or_tiny(GPTConfig.gpt2(), GPTConfig.small(n_layer=2))
        BATCH, T, STEPS = gpu_or_tiny((4, 1024, 10), (2, 32, 2))
    else:
        BASE = GPTConfig.small(n_layer=12)        # 12 layers, 4 heads, 128 wide, context 64
        BATCH, T, STEPS = 8, 64, 5
    DEEPER = replace(BASE, n_layer=2 * BASE.n_layer, n_head=16)   # 24 layers, 16 heads
    # twice the width, same layers and heads
    WIDER = replace(BASE, n_embd=2 * BASE.n_embd)
    print(f"{where()}; base: {BASE.n_layer} layers, {BASE.n_head} heads, {BASE.n_embd} "
          "wide")
    '''),
    md(r"""
    ## Counting by formula

    A parameter count is a sum over the model's tensors. Everything you need is in the code of the
    layers: which tensors each layer creates, and their shapes. These are the lines of the numpy
    twin's constructors that create them, for GPT-2's layout (the torch twin has the same tensors
    under the same names; C = `n_embd`, V = `vocab_size`):

    ```python
    Linear(n_in, n_out)         # self.weight (n_out, n_in), self.bias (n_out,)
    LayerNorm(C)                # self.weight (C,), self.bias (C,)
    Embedding(n_rows, C)        # self.weight (n_rows, C)

    CausalSelfAttention:  self.c_attn = Linear(C, 3 * C); self.c_proj = Linear(C, C)
    MLP:                  self.c_fc = Linear(C, 4 * C);   self.c_proj = Linear(4 * C, C)
    Block:                self.ln_1 = LayerNorm(C); self.attn; self.ln_2 = LayerNorm(C); self.mlp
    GPT:                  self.wte = Embedding(V, C); self.wpe = Embedding(n_ctx, C)
                          self.h = [Block(config) for _ in range(n_layer)]; self.ln_f = LayerNorm(C)
                          # the head: logits = hidden @ self.wte.weight.T, no tensor of its own
    ```
    """),
    md(r"""
    Write `count_params(config)`.

    - `config` is a `lib.config.GPTConfig` with GPT-2's layout. Its fields `vocab_size`, `n_ctx`,
      `n_layer`, `n_head` and `n_embd` are all that matter; the fields for chapter 8's modern block
      keep their defaults (GPT-2's) in every test.
    - Count every weight and every bias. The output head multiplies by the token embedding's matrix
      (the weights are tied), so it adds nothing.
    - Return a Python `int`, by arithmetic. While grading, lib's own counts (`param_counts`,
      `param_shapes`, `num_params`) raise an error, and no model can be built.
    - Tip: write the count of one block as a polynomial in $C$ = `n_embd`. Does the number of heads
      appear in it?
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    One cell per property, the targeted ones first: what one more token, one more block and more
    heads add, what lies outside the blocks, then the counts of real models. The expected values
    come from models that the torch twin builds (seeded random weights), counted tensor by tensor
    with `num_params()`; GPT-2 Small's published count, with the head tied, is 124,439,808, and
    Hugging Face's GPT-2 class, built at a small size, counts its parameters with tied weights
    counted once.
    """),
    code('''
    from lib.checks import CheckFailed, expect_equal
    from lib.torch_twin import GPT


    def twin_count(config):
        """The parameters of the model the torch twin builds with this config."""
        return GPT(config).num_params()


    TINY = GPTConfig.small(n_layer=1, n_embd=32, vocab_size=10)    # 4 heads, context 64
    '''),
    check('''
    # the output head: one more token adds one row of wte, and nothing to the tied head
    more = replace(TINY, vocab_size=TINY.vocab_size + 1)
    added = count_params(more) - count_params(TINY)
    want = twin_count(more) - twin_count(TINY)
    if added == 2 * want:
        raise CheckFailed(
            f"one more token adds {added} parameters, expected {want} (one row "
            "of wte): the head is counted as a matrix of its own, but it "
            "multiplies by wte's (tied weights) and adds nothing"
        )
    expect_equal("parameters one more token adds", added, want)
    '''),
    check('''
    # the heads split the width: their number changes no count
    counts = {h: count_params(replace(TINY, n_head=h)) for h in (1, 2, 4, 8)}
    if len(set(counts.values())) > 1:
        raise CheckFailed(f"the count changes with n_head: {counts}; the heads split "
                          "c_attn's 3C outputs between them and add no parameters")
    print("ok: the count does not depend on n_head")
    '''),
    check('''
    # one block: its count is a polynomial a C^2 + b C in the width C
    def block_count(config):
        """What a second block adds to count_params(config) (config has one)."""
        return count_params(replace(config, n_layer=2)) - count_params(config)


    got = {C: block_count(replace(TINY, n_embd=C)) for C in (32, 64)}
    want = {C: twin_count(replace(TINY, n_embd=C, n_layer=2))
            - twin_count(replace(TINY, n_embd=C)) for C in (32, 64)}
    if got != want:
        a, b = (got[64] - 2 * got[32]) / 2048, (4 * got[32] - got[64]) / 64  # a C^2 + b C
        wa, wb = (want[64] - 2 * want[32]) // 2048, (4 * want[32] - want[64]) // 64
        why = (f"the weights are right, the C terms are not: {b:g} C, expected {wb} C "
               "(a bias or a LayerNorm is missing or extra)" if a == wa else
               f"the weights give {a:g} C^2, expected {wa} C^2 (a matrix missing, extra, "
               "or of the wrong shape)")
        raise CheckFailed(f"one more block adds {got[32]} parameters at C = 32, expected "
                          f"{want[32]}: {why}")
    print(f"ok: one block holds {want[32]} parameters at C = 32, {want[64]} at C = 64")
    '''),
    check('''
    # outside the blocks: wte, wpe and the final LayerNorm, ln_f
    two = replace(TINY, n_layer=2)
    outside = 2 * count_params(TINY) - count_params(two)       # the count minus one block
    want = 2 * twin_count(TINY) - twin_count(two)
    C = TINY.n_embd
    if outside == want - 2 * C:
        raise CheckFailed(f"outside the blocks: {outside} parameters, expected {want}: "
                          "2 C short, the final LayerNorm ln_f (weight and bias)")
    expect_equal("parameters outside the blocks (wte, wpe, ln_f)", outside, want)
    '''),
    check('''
    from transformers import GPT2Config, GPT2LMHeadModel

    expect_equal("count_params(GPTConfig.gpt2())", count_params(GPTConfig.gpt2()),
                 124_439_808)
    for name, config in (("small", GPTConfig.small()), ("BASE", BASE), ("DEEPER", DEEPER),
                         ("WIDER", WIDER), ("TINY", TINY)):
        if config.n_embd <= 256:          # building the 124M-parameter models takes a while
            expect_equal(f"count_params({name}) against GPT({name}).num_params()",
                         count_params(config), twin_count(config))
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=32, n_embd=64, n_layer=2,
                                    n_head=4))
    ours = GPTConfig.small(vocab_size=100, n_ctx=32, n_embd=64, n_layer=2)   # 4 heads
    expect_equal("count_params against transformers' GPT-2 class, 2 layers, 64 wide",
                 count_params(ours), hf.num_parameters())
    '''),
    md(r"""
    ## Twice as deep, or twice as wide?

    Doubling the number of layers doubles the blocks' parameters and leaves the embeddings alone.
    Doubling the width multiplies each block's parameters by about four (they grow with $C^2$) and
    the embeddings by two. The heads only split the width: 16 heads instead of 12 change no count.
    The cell below checks these statements with your function, then times a training step (forward,
    backward and AdamW, on random tokens) of each model.
    """),
    uses('''
    import time

    from lib.scale import synchronize
    from lib.torch_twin.train import AdamW, train_step

    per_block = count_params(replace(BASE, n_layer=BASE.n_layer + 1)) - count_params(BASE)
    C = BASE.n_embd
    expect_equal("parameters of one more block", per_block, 12 * C * C + 13 * C)
    expect_equal("DEEPER's parameters minus BASE's",
                 count_params(DEEPER) - count_params(BASE), BASE.n_layer * per_block)
    expect_equal("BASE with 1 head instead of BASE", count_params(replace(BASE, n_head=1)),
                 count_params(BASE))


    def seconds_per_step(config):
        """Median time of one training step: BATCH x T random tokens, after one warm-up
        step."""
        torch.manual_seed(0)
        model = GPT(config).to(DEVICE)
        optimizer = AdamW(model.named_parameters(), lr=1e-4)
        x = torch.randint(config.vocab_size, (BATCH, T), device=DEVICE)   # (B, T)
        times = []
        for step in range(STEPS + 1):
            synchronize()                # wait for the GPU (a CPU computes as it is called)
            start = time.perf_counter()
            train_step(model, optimizer, [(x, x)], 1e-4, 1.0)
            synchronize()
            times.append(time.perf_counter() - start)
        return sorted(times[1:])[STEPS // 2]


    rows = []
    for name, config in (("base", BASE), ("deeper", DEEPER), ("wider", WIDER)):
        rows.append((name, config, count_params(config), seconds_per_step(config)))
    base_params, base_time = rows[0][2], rows[0][3]
    print(f"{'model':7s} {'layers':>6s} {'heads':>5s} {'width':>5s} {'parameters':>13s} "
          f"{'x base':>7s} {'ms/step':>8s} {'x base':>7s}")
    for name, config, n, seconds in rows:
        print(f"{name:7s} {config.n_layer:6d} {config.n_head:5d} {config.n_embd:5d} "
              f"{n:13,d} {n / base_params:7.2f} {1000 * seconds:8.1f} "
              f"{seconds / base_time:7.2f}")
    expect_equal("the models from fewest to most parameters",
                 [name for name, *_ in sorted(rows, key=lambda r: r[2])],
                 ["base", "deeper", "wider"])
    '''),
    md(r"""
    What to look for in the table:

    - In parameters, the wider model is the bigger one: its blocks grow about four times, the deeper
      model's two times.
    - In time, a step costs roughly in proportion to the arithmetic, about $6N$ floating-point
      operations per token for $N$ parameters (forward and backward), plus attention's share, which
      grows with the context. How close the measured ratios come to the parameter ratios depends on
      the machine: small matrices keep a CPU (and even more a GPU) from running at full speed, so the
      wide model often costs less per parameter than the deep one, whose layers must run one after
      the other.

    ## Going further

    - Which share of GPT-2 Small's parameters is the token embedding? Of GPT-2 XL's (48 layers,
      1,600 wide)?
    - Extend `count_params` to the untied head (`GPT-2 Small untied: 163,037,184`) and check it.
    """),
]
