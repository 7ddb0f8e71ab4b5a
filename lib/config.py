"""GPTConfig: the one description of a model's shape, shared by both twins (no framework here).

Also the parameter count by formula (`param_counts`), the canonical list of every
parameter's name and shape (`param_shapes`), and the KV-cache size (`kv_cache_bytes`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

ACTIVATIONS = ("gelu", "gelu_exact", "relu")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50257     # 50,000 merges + 256 bytes + <|endoftext|>
    n_ctx: int = 1024           # context length (learned positions cap it)
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    activation: str = "gelu"    # "gelu" (GPT-2's tanh form), "gelu_exact" (erf), "relu"
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        for name in ("vocab_size", "n_ctx", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"GPTConfig.n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"GPTConfig.activation={self.activation!r}; expected one of {ACTIVATIONS}")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"GPTConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {unknown}; known fields are {sorted(known)}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def param_shapes(config: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in the order both twins create them.

    Linear weights are stored (out, in), as in torch.nn.Linear. The output head is tied to
    `wte.weight`, so it has no entry of its own.
    """
    C, V = config.n_embd, config.vocab_size
    shapes = {"wte.weight": (V, C), "wpe.weight": (config.n_ctx, C)}
    for i in range(config.n_layer):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (3 * C, C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (C, 4 * C), p + "mlp.c_proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def param_counts(config: GPTConfig) -> dict[str, int]:
    """Parameter count by formula, per component; 'total' counts the tied head once.

    For GPT-2 Small: wte 38,597,376 + wpe 786,432 + 12 x 7,087,872 + ln_f 1,536 = 124,439,808.
    """
    C, L = config.n_embd, config.n_layer
    ln = 2 * C                                   # weight and bias
    attn = (C * 3 * C + 3 * C) + (C * C + C)     # fused qkv, output projection (with biases)
    mlp = (C * 4 * C + 4 * C) + (4 * C * C + C)  # up, down (with biases)
    counts = {
        "wte": config.vocab_size * C,
        "wpe": config.n_ctx * C,
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
    """Bytes a KV cache needs: keys and values, every layer, every position.

    Per token that is 2 x n_layer x n_embd values (18,432 for GPT-2 Small).
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
    return 2 * config.n_layer * config.n_embd * seq_len * batch * _DTYPE_BYTES[name]
