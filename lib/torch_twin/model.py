"""GPT-2 in torch: the fast, GPU-ready twin. Autograd does the backward passes.

Read it beside `lib/numpy_twin/model.py`: same classes, same names, same order.
Shapes: B batch, T time (tokens), C = n_embd, H = n_head, D = C // H (head size), V vocab.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import GPTConfig
from ..weights import check_state, init_state, load_hf_gpt2, load_state, save_state


# ---- activations ---------------------------------------------------------------------------------
def gelu(x):
    """GPT-2's GELU, the tanh approximation (torch computes the same formula)."""
    return F.gelu(x, approximate="tanh")


def gelu_exact(x):
    return F.gelu(x)


def relu(x):
    return F.relu(x)


ACTIVATIONS = {"gelu": gelu, "gelu_exact": gelu_exact, "relu": relu}


def softmax(x, axis=-1):
    return torch.softmax(x, dim=axis)


# ---- layers ----------------------------------------------------------------------------------------
Linear = nn.Linear          # y = x W^T + b, W stored (out, in), as in the numpy twin
Embedding = nn.Embedding    # row i is the vector of token (or position) i
LayerNorm = nn.LayerNorm    # normalise to mean 0, variance 1, then scale and shift


class CausalSelfAttention(nn.Module):
    """Multi-head attention where each position sees only itself and earlier positions."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = Linear(config.n_embd, 3 * config.n_embd)   # fused q, k, v
        self.c_proj = Linear(config.n_embd, config.n_embd)

    def forward(self, x, kv_cache=None, layer=0, return_attention=False):  # x: (B, T, C)
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        start = 0
        if kv_cache is not None:                              # decode: append, attend to all so far
            start = kv_cache.length
            k, v = kv_cache.update(layer, k, v)               # (B, H, start + T, D)
        att = None
        if return_attention:                                  # explicit path, for the viewer
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, start + T)
            future = torch.ones(T, start + T, dtype=torch.bool, device=x.device).triu(start + 1)
            att = torch.softmax(att.masked_fill(future, float("-inf")), dim=-1)
            y = att @ v                                       # (B, H, T, D)
        elif start == 0 or T == 1:                            # plain causal, or one new query seeing all
            y = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and T > 1)
        else:                                                 # a chunk after cached positions
            seen = torch.ones(T, start + T, dtype=torch.bool, device=x.device).tril(start)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=seen)
        y = y.transpose(1, 2).reshape(B, T, C)                # (B, T, C): heads side by side
        return self.c_proj(y), att


class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C, activation, 4C -> C."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.act = ACTIVATIONS[config.activation]
        self.c_fc = Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):                                     # (B, T, C) -> (B, T, C)
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, kv_cache=None, layer=0, return_attention=False):  # x: (B, T, C)
        a, att = self.attn(self.ln_1(x), kv_cache, layer, return_attention)
        x = x + a
        return x + self.mlp(self.ln_2(x)), att


class KVCache:
    """Keys and values of every layer, pre-allocated for the whole context:
    k[layer], v[layer] have shape (B, H, n_ctx, D); `length` positions are filled."""

    def __init__(self, config: GPTConfig, batch: int, dtype=torch.float32, device="cpu"):
        shape = (batch, config.n_head, config.n_ctx, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                            # k, v: (B, H, T, D) new positions
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]  # (B, H, end, D)


class GPT(nn.Module):
    """GPT-2: token + position embeddings, n_layer blocks, final LayerNorm, head tied to wte."""

    def __init__(self, config: GPTConfig, seed: int = 0):
        super().__init__()
        self.config = config
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.n_ctx, config.n_embd)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.load_state_dict(init_state(config, seed))        # same seed, same weights as numpy

    def forward(self, idx, return_attention=False, return_hidden=False, kv_cache=None):
        """idx: (B, T) token ids -> logits (B, T, V). With a `kv_cache`, idx holds only the new
        positions, which attend to everything cached."""
        start = 0 if kv_cache is None else kv_cache.length
        self._check_idx(idx, start)
        B, T = idx.shape
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.wte(idx) + self.wpe(pos)                     # (B, T, C)
        attentions = []
        for layer, block in enumerate(self.h):
            x, att = block(x, kv_cache, layer, return_attention)
            attentions.append(att)
        hidden = self.ln_f(x)                                 # (B, T, C)
        logits = self.lm_head(hidden)                         # (B, T, V)
        if kv_cache is not None:
            kv_cache.length += T
        extras = []
        if return_attention:
            extras.append(attentions)                         # n_layer x (B, H, T, T)
        if return_hidden:
            extras.append(hidden)
        return (logits, *extras) if extras else logits

    def lm_head(self, hidden):                                # (B, T, C) -> (B, T, V)
        """The output head, tied to wte (the GPU training path swaps in a padded one)."""
        return hidden @ self.wte.weight.T

    def _check_idx(self, idx, start):
        if not isinstance(idx, torch.Tensor) or idx.ndim != 2 or idx.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"idx must be a (B, T) integer tensor of token ids, got "
                             f"{type(idx).__name__} {getattr(idx, 'shape', '')} {getattr(idx, 'dtype', '')}")
        if idx.shape[1] == 0 or start + idx.shape[1] > self.config.n_ctx:
            raise ValueError(f"sequence of {start + idx.shape[1]} positions ({idx.shape[1]} new) does not fit "
                             f"the context: expected 1 to n_ctx={self.config.n_ctx}")
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), got min {lo} max {hi}")

    # ---- generation (lib/torch_twin/generate.py) ------------------------------------------
    def generate(self, idx, max_new_tokens, **options):
        """(B, T) prompts -> (B, T + n) tensor: each prompt then its new tokens. Options:
        temperature, top_k, top_p, repetition_penalty, use_cache, seed, stop_token."""
        from .generate import generate
        return generate(self, idx, max_new_tokens, **options)

    def stream(self, idx, max_new_tokens, **options):
        """The same, one (B,) tensor of new ids per step (a Stream, which reports cropping)."""
        from .generate import stream
        return stream(self, idx, max_new_tokens, **options)

    # ---- parameters and files -------------------------------------------------------------
    def state_dict_numpy(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().float().numpy() for k, v in self.named_parameters()}

    def load_state_dict(self, state, strict=True):
        """Accepts numpy arrays or tensors under the course's names (see lib.config.param_shapes)."""
        check_state(self.config, state)
        with torch.no_grad():
            for name, param in self.named_parameters():
                param.copy_(torch.as_tensor(np.asarray(state[name]) if not torch.is_tensor(state[name])
                                            else state[name]))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save(self, path) -> None:
        save_state(path, self.config, self.state_dict_numpy())

    @classmethod
    def load(cls, path) -> "GPT":
        config, state = load_state(path)
        model = cls(config)
        model.load_state_dict(state)
        return model

    @classmethod
    def from_pretrained(cls, folder) -> "GPT":
        """A Hugging Face GPT-2 folder (either key layout); see lib.weights.load_hf_gpt2."""
        config, state = load_hf_gpt2(folder)
        model = cls(config)
        model.load_state_dict(state)
        return model
