"""GPTConfig and TrainConfig: a model's shape and how it trains, shared by both twins (no framework).

`TrainConfig` holds `lib.train.train`'s settings (its fields' help texts are the command line's
`--help`), with presets beside GPTConfig's: `TrainConfig.small()`, the small preset's recipe, and
`TrainConfig.gpt2()`, GPT-3's settings for its 125M model. `CHOICES` names the layers a GPTConfig
can choose among. The fields added after chapter 8's (`LATER_FIELDS`: a sliding attention window,
RoPE's scaling) are left out of `to_dict` while at their defaults, so every config that does not
use them serialises, and so is cached (lib.pretrained), exactly as before they existed. Also the
parameter count by formula (`param_counts`), the canonical list of every parameter's name and
shape (`param_shapes`), which of them AdamW decays (`uses_weight_decay`), the KV-cache size
(`kv_cache_bytes`), and which positions a model can be asked for (`check_positions`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .dropout import check_dropout

# The layers a GPTConfig chooses among: field -> the names it accepts. Each twin maps every name to
# its layer once, in the table its model.py's `LAYERS` gives for the field (chapter 8's layers are
# added by its modern.py); tests/test_model.py checks that both twins cover every name here.
CHOICES = {
    "activation": ("gelu", "gelu_exact", "relu"),
    "norm": ("layernorm", "rmsnorm"),
    "position": ("learned", "rope", "sinusoidal", "alibi"),
    "mlp": ("mlp", "swiglu"),
}

# Fields added after chapter 8's models were cached, with their defaults: to_dict leaves them out
# while at these values, so that older configs keep their dict, their config.json and their cache key.
LATER_FIELDS = {"sliding_window": None, "rope_scaling": None, "rope_factor": 1.0}


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50257     # 50,000 merges + 256 bytes + <|endoftext|>
    n_ctx: int = 1024           # context length (learned positions cap it)
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    activation: str = "gelu"    # the plain MLP's: "gelu" (GPT-2's tanh form), "gelu_exact" (erf), "relu"
    layer_norm_eps: float = 1e-5  # the norm's epsilon (LayerNorm or RMSNorm)
    dropout: float = 0.0        # while training only (lib.dropout); GPT-1 trained with 0.1
    # ---- beyond GPT-2 (chapter 8); every default is GPT-2's ----------------------------
    norm: str = "layernorm"     # "layernorm", or "rmsnorm" (no mean, no bias)
    position: str = "learned"   # "learned" (wpe), "rope" (q and k rotated), "sinusoidal" (a fixed table
                                # added to the embeddings), "alibi" (a bias on the scores); only "learned" has wpe
    mlp: str = "mlp"            # "mlp" (C -> hidden, activation, -> C), or "swiglu" (SiLU-gated, always)
    mlp_hidden: int | None = None  # feed-forward width; None: see `hidden_dim`
    n_kv_head: int | None = None   # key/value heads; None: n_head (MHA), 1: MQA, in between: GQA
    rope_base: float = 10000.0  # RoPE's frequencies are rope_base ** (-2i / head_dim)
    bias: bool = True           # biases in the linear layers (attention and feed-forward)
    # ---- later fields (LATER_FIELDS): to_dict leaves each out while it is at its default ---
    sliding_window: int | None = None  # W: each query sees its last W keys (itself included); None: all
    rope_scaling: str | None = None    # RoPE past the training length: "interpolation" or "ntk"
    rope_factor: float = 1.0           # s, the factor by which the context is stretched

    def __post_init__(self):
        for name in ("vocab_size", "n_ctx", "n_layer", "n_head", "n_embd", "mlp_hidden", "n_kv_head", "sliding_window"):
            value = getattr(self, name)
            if value is None and name in ("mlp_hidden", "n_kv_head", "sliding_window"):
                continue
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig.n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"GPTConfig.{name}={getattr(self, name)!r}; expected one of {allowed}")
        check_dropout(self.dropout, "GPTConfig.dropout")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"GPTConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.n_head % self.kv_heads:
            raise ValueError(f"GPTConfig.n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}: "
                             f"each key/value head must serve the same number of query heads")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"GPTConfig.position='rope' needs an even head size (RoPE rotates pairs of "
                             f"dimensions), got n_embd / n_head = {self.n_embd} / {self.n_head} = {self.head_dim}")
        if self.position == "sinusoidal" and self.n_embd % 2:
            raise ValueError(f"GPTConfig.position='sinusoidal' needs an even n_embd (sines and cosines in "
                             f"pairs), got {self.n_embd}")
        if self.rope_scaling not in (None, "interpolation", "ntk"):
            raise ValueError(f"GPTConfig.rope_scaling={self.rope_scaling!r}; expected None, 'interpolation' or 'ntk'")
        if self.rope_scaling is not None and self.position != "rope":
            raise ValueError(f"GPTConfig.rope_scaling={self.rope_scaling!r} scales RoPE's angles; "
                             f"expected position='rope', got {self.position!r}")
        if isinstance(self.rope_factor, bool) or not isinstance(self.rope_factor, (int, float)) \
                or not self.rope_factor >= 1:
            raise ValueError(f"GPTConfig.rope_factor must be a number >= 1, got {self.rope_factor!r}")
        if self.rope_factor != 1 and self.rope_scaling is None:
            raise ValueError(f"GPTConfig.rope_factor={self.rope_factor!r} needs rope_scaling "
                             f"('interpolation' or 'ntk'), got None")
        if not self.rope_base > 1:
            raise ValueError(f"GPTConfig.rope_base must be > 1, got {self.rope_base!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"GPTConfig.bias must be True or False, got {self.bias!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_head, or n_head when that is None (plain multi-head attention)."""
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def hidden_dim(self) -> int:
        """The feed-forward width: mlp_hidden if set, else 4 C for the plain MLP and, for SwiGLU,
        8/3 C rounded up to a multiple of 64 (its three matrices then hold about as many weights
        as the plain MLP's two)."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.mlp == "mlp":
            return 4 * self.n_embd
        return -(-8 * self.n_embd // (3 * 64)) * 64

    # ---- presets ---------------------------------------------------------------------
    @classmethod
    def gpt2(cls, **overrides) -> "GPTConfig":
        """GPT-2 Small, 124,439,808 parameters."""
        return cls(**{**dict(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, n_embd=768), **overrides})

    @classmethod
    def gpt2_medium(cls, **overrides) -> "GPTConfig":
        """GPT-2 Medium, 354,823,168 parameters."""
        return cls(**{**dict(vocab_size=50257, n_ctx=1024, n_layer=24, n_head=16, n_embd=1024), **overrides})

    @classmethod
    def small(cls, **overrides) -> "GPTConfig":
        """A CPU-sized model over bytes: 4 layers, 4 heads, 128 wide, context 64."""
        return cls(**{**dict(vocab_size=256, n_ctx=64, n_layer=4, n_head=4, n_embd=128), **overrides})

    @classmethod
    def preset(cls, name: str, **overrides) -> "GPTConfig":
        presets = {"gpt2": cls.gpt2, "gpt2_medium": cls.gpt2_medium, "small": cls.small}
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; expected one of {sorted(presets)}")
        return presets[name](**overrides)

    # ---- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict:
        """The fields as a dict in their order, less each of LATER_FIELDS at its default."""
        return {name: value for name, value in dataclasses.asdict(self).items()
                if not (name in LATER_FIELDS and value == LATER_FIELDS[name])}

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}; known fields are {sorted(known)}")
        return cls(**d)


def check_positions(config: GPTConfig, start: int, T: int, capacity: int | None, extrapolate: bool) -> None:
    """Raise one ValueError line unless positions start .. start + T - 1 exist for this model:
    below n_ctx, or past it with extrapolate=True and positions given by a formula (not learned),
    and within a KV cache's `capacity` (None: no cache, or one without a limit)."""
    end = start + T
    if T == 0:
        raise ValueError("idx holds no positions: expected a (B, T) array with T >= 1")
    if end > config.n_ctx and config.position == "learned":
        raise ValueError(f"sequence of {end} positions ({T} new) does not fit the context: expected 1 to "
                         f"n_ctx={config.n_ctx} (learned positions have wpe rows for 0 to {config.n_ctx - 1} only)")
    if end > config.n_ctx and not extrapolate:
        raise ValueError(f"sequence of {end} positions ({T} new) does not fit the context: expected 1 to "
                         f"n_ctx={config.n_ctx}, or extrapolate=True to evaluate position={config.position!r} past it")
    if capacity is not None and end > capacity:
        raise ValueError(f"sequence of {end} positions ({T} new) does not fit the KV cache: expected at most "
                         f"{capacity} (KVCache's `positions`)")


def _setting(default, help, /, *, command_line=True, **argparse_options):
    """A TrainConfig field: its default, its help text, and what its option of `python -m lib.train`
    needs beyond them (argparse's type, nargs, choices, ...; its default there if it differs), or
    command_line=False for a setting with no option."""
    return dataclasses.field(default=default, metadata={"help": help,
                                                        "command_line": argparse_options if command_line else None})


# The settings each training preset names; the rest are TrainConfig's defaults. lib.pretrained
# caches a trained model under a digest of such a dict, so changing one trains a new model.
TRAIN_PRESETS = {
    # nanoGPT's Shakespeare-on-a-CPU settings (its README) at byte level, with the peak learning rate
    # doubled: on this corpus 1e-3 ends at validation loss 1.866, 2e-3 at 1.781 (torch twin; lib.bench train)
    "small": dict(max_iters=2000, batch_size=12, lr=2e-3, min_lr=1e-4, warmup_iters=100, weight_decay=0.1,
                  betas=(0.9, 0.99), grad_clip=1.0, eval_interval=250, eval_iters=20, seed=1337),
    # GPT-2 Small with the settings the GPT-3 paper gives for its 125M model (Brown et al. 2020,
    # Table 2.1 and Appendix B): 2^19 = 524,288 tokens (0.5M) per optimizer step (16 windows of 1,024
    # tokens, 32 micro-batches on one process), peak learning rate 6e-4 after a linear warmup over
    # 375M tokens (715 steps), cosine decay to 10% of the peak, AdamW with betas (0.9, 0.95) and
    # weight decay 0.1, clipping at 1.0. 19,073 steps are 10B tokens.
    "gpt2": dict(batch_size=16, grad_accum=32, max_iters=19073, lr=6e-4, min_lr=6e-5, warmup_iters=715,
                 betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0, eval_interval=250, eval_iters=20),
}
_COUNTS = {"max_iters": 0, "batch_size": 1, "block_size": 1, "grad_accum": 1, "warmup_iters": 0,
           "eval_interval": 1, "eval_iters": 1, "checkpoint_interval": 1, "callback_every": 1}  # name: minimum


@dataclass(frozen=True)
class TrainConfig:
    """How `lib.train.train` trains; the defaults are the small preset's recipe. Every bad value
    raises ValueError here, in one line naming it."""
    max_iters: int = _setting(2000, "optimizer steps (%(default)s)")
    batch_size: int = _setting(12, "windows per micro-batch per process (%(default)s)")
    block_size: int | None = _setting(None, "training context (default: the model's n_ctx)", type=int)
    grad_accum: int = _setting(1, "micro-batches per optimizer step (default: from --tokens-per-step, else 1)",
                               default=None)
    lr: float = _setting(2e-3, "peak learning rate (%(default)s)")
    min_lr: float = _setting(1e-4, "floor of the cosine decay (%(default)s)")
    warmup_iters: int = _setting(100, "steps of linear warmup (%(default)s)")
    weight_decay: float = _setting(0.1, "AdamW, 2-D weights only (%(default)s)")
    betas: tuple[float, float] = _setting((0.9, 0.99), "AdamW's moment decay rates (%(default)s)", type=float,
                                          nargs=2, metavar=("BETA1", "BETA2"))
    grad_clip: float = _setting(1.0, "global-norm clipping, 0: off (%(default)s)")
    eval_interval: int = _setting(250, "steps between validations (%(default)s)")
    eval_iters: int = _setting(20, "batches per validation (%(default)s)")
    checkpoint_interval: int | None = _setting(None, "steps between checkpoints in --out (default: "
                                                     "--eval-interval); one is also written at the end", type=int)
    seed: int = _setting(1337, "weights, batches, sample (%(default)s)")
    device: str | None = _setting(None, "torch twin: cpu, cuda, cuda:1 ... (default: cuda if available)", type=str)
    dtype: str | None = _setting(None, "torch twin on CUDA (default: bfloat16 from compute capability 8.0, float16 "
                                       "below), or on the CPU under GPT2_COURSE_GPU_ON_CPU=1 (default there: "
                                       "bfloat16)", choices=("float32", "bfloat16", "float16"))
    compile: bool = _setting(False, "torch twin: torch.compile the model", action="store_true")
    callback_every: int = _setting(1, "steps between calls of train's callback", command_line=False)

    def __post_init__(self):
        for name, minimum in _COUNTS.items():
            value = getattr(self, name)
            if value is None and name in ("block_size", "checkpoint_interval"):
                continue                                     # resolved by train: n_ctx, eval_interval
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"learning rates must satisfy 0 <= min_lr <= lr, got lr={self.lr!r}, min_lr={self.min_lr!r}")

    # ---- presets ---------------------------------------------------------------------
    @classmethod
    def small(cls, **overrides) -> "TrainConfig":
        """The small preset's recipe: 2,000 steps of 12 windows, peak rate 2e-3 (the defaults)."""
        return cls(**{**TRAIN_PRESETS["small"], **overrides})

    @classmethod
    def gpt2(cls, **overrides) -> "TrainConfig":
        """GPT-3's settings for its 125M model: 19,073 steps of 2^19 tokens, peak rate 6e-4."""
        return cls(**{**TRAIN_PRESETS["gpt2"], **overrides})

    @classmethod
    def preset(cls, name: str, **overrides) -> "TrainConfig":
        if name not in TRAIN_PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {sorted(TRAIN_PRESETS)}")
        return cls(**{**TRAIN_PRESETS[name], **overrides})


def param_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in the order both twins create them.

    Linear weights are stored (out, in), as in torch.nn.Linear. The output head is tied to
    `wte.weight`, so it has no entry of its own. Beyond GPT-2: RoPE has no `wpe`, RMSNorm no
    norm bias, `bias=False` no linear biases; with G = kv_heads the fused c_attn makes
    C queries + 2 G D keys and values; SwiGLU has a gate `c_gate` beside `c_fc`.
    """
    C, V, F = config.n_embd, config.vocab_size, config.hidden_dim
    QKV = (config.n_head + 2 * config.kv_heads) * config.head_dim   # 3 C for plain multi-head attention

    def norm(name):
        return {name + ".weight": (C,), **({name + ".bias": (C,)} if config.norm == "layernorm" else {})}

    def linear(name, n_in, n_out):
        return {name + ".weight": (n_out, n_in), **({name + ".bias": (n_out,)} if config.bias else {})}

    shapes = {"wte.weight": (V, C), **({"wpe.weight": (config.n_ctx, C)} if config.position == "learned" else {})}
    for i in range(config.n_layer):
        p = f"h.{i}."
        shapes.update({**norm(p + "ln_1"), **linear(p + "attn.c_attn", C, QKV), **linear(p + "attn.c_proj", C, C),
                       **norm(p + "ln_2"), **(linear(p + "mlp.c_gate", C, F) if config.mlp == "swiglu" else {}),
                       **linear(p + "mlp.c_fc", C, F), **linear(p + "mlp.c_proj", F, C)})
    shapes.update(norm("ln_f"))
    return shapes


def uses_weight_decay(name: str, ndim: int) -> bool:
    """AdamW decays the 2-D weight matrices and embeddings; biases and LayerNorm gains
    (1-D) are left alone, since pulling them toward 0 only hurts."""
    return ndim == 2 and name.endswith(".weight")


def param_counts(config: GPTConfig) -> dict[str, int]:
    """Parameter count by formula, per component; 'total' counts the tied head once.

    For GPT-2 Small: wte 38,597,376 + wpe 786,432 + 12 x 7,087,872 + ln_f 1,536 = 124,439,808.
    """
    C, L, F, b = config.n_embd, config.n_layer, config.hidden_dim, int(config.bias)
    QKV = (config.n_head + 2 * config.kv_heads) * config.head_dim   # 3 C for plain multi-head attention
    ln = 2 * C if config.norm == "layernorm" else C   # LayerNorm: gain and bias; RMSNorm: gain
    attn = (C * QKV + b * QKV) + (C * C + b * C)      # fused qkv, output projection
    ups = 2 if config.mlp == "swiglu" else 1          # SwiGLU's gate beside the up projection
    mlp = ups * (C * F + b * F) + (F * C + b * C)     # up (and gate), down
    counts = {
        "wte": config.vocab_size * C,
        "wpe": config.n_ctx * C if config.position == "learned" else 0,
        "per_block": ln + attn + ln + mlp,
        "blocks": L * (ln + attn + ln + mlp),
        "ln_f": ln,
        "lm_head (tied to wte)": 0,
    }
    counts["total"] = counts["wte"] + counts["wpe"] + counts["blocks"] + counts["ln_f"]
    counts["total if untied"] = counts["total"] + config.vocab_size * C
    return counts


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


def kv_cache_bytes(config: GPTConfig, seq_len: int, dtype="float32", batch: int = 1) -> int:
    """Bytes a KV cache needs: keys and values, every layer, every position (with a sliding window
    W, the last W positions only: the rolling cache's size, whatever seq_len).

    Per token that is 2 x n_layer x kv_heads x head_dim values: 2 x n_layer x n_embd with one
    K/V head per query head (18,432 for GPT-2 Small), n_head / kv_heads times fewer with GQA.
    `dtype` is a name ("float32", "bfloat16", ...), a numpy dtype or a torch dtype.
    """
    if seq_len < 0 or batch < 1:
        raise ValueError(f"kv_cache_bytes needs seq_len >= 0 and batch >= 1, got {seq_len=}, {batch=}")
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPE_BYTES:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPE_BYTES)}")
    per_token = 2 * config.n_layer * config.kv_heads * config.head_dim   # keys and values, every layer
    kept = seq_len if config.sliding_window is None else min(seq_len, config.sliding_window)
    return per_token * kept * batch * _DTYPE_BYTES[name]
