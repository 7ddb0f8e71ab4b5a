"""GPT-2 in torch: the fast, GPU-ready twin. Autograd does the backward passes.

Read it beside `lib/numpy_twin/model.py`: same classes, same names, same order.
A model is in training mode (dropout on) until `eval()`, and `train()` turns it back.
Shapes: B batch, T time (tokens), C = n_embd, H = n_head, D = C // H (head size), V vocab,
G = key/value heads (H in GPT-2), F = hidden_dim (feed-forward width).

The config chooses each block's layers by name (lib.config.CHOICES); `LAYERS` gives, for each
such field, the table here that maps its names to layers. Chapter 8's pieces (RMSNorm, SwiGLU,
RoPE, ALiBi, shared key/value heads) live in `lib/torch_twin/modern.py`, which adds them to these
tables; this module never imports it.
"""
from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import GPTConfig, check_positions
from ..dropout import check_dropout
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


def causal_mask(T, start, dtype, device="cpu"):
    """(T, start + T) additive mask: query i sits at position start + i and may see keys
    0 .. start + i; later keys get -inf, which the softmax turns into weight 0."""
    return torch.full((T, start + T), float("-inf"), dtype=dtype, device=device).triu(start + 1)  # (T, start + T)


# ---- layers ----------------------------------------------------------------------------------------
# Chapter 8's fixed position tables (no weights), added to the embeddings in wpe's place, by
# config.position: function (start, T, n_embd, dtype, device) -> (T, n_embd). lib.torch_twin.modern fills it.
FIXED_POSITIONS = {}
Linear = nn.Linear          # y = x W^T + b, W stored (out, in), as in the numpy twin
Embedding = nn.Embedding    # row i is the vector of token (or position) i
LayerNorm = nn.LayerNorm    # normalise to mean 0, variance 1, then scale and shift
NORMS = {"layernorm": LayerNorm}                              # lib.torch_twin.modern adds "rmsnorm"


class Dropout(nn.Dropout):
    """nn.Dropout: in training mode, zero each value with probability p and divide the kept ones
    by 1 - p; in evaluation mode, or with p = 0, pass x through, drawing nothing. Its masks come
    from torch's generator (torch.manual_seed), or are the one given by `lib.dropout.use_masks`."""
    mask = None                                               # a given mask, used instead of a drawn one

    def __init__(self, p):
        super().__init__(check_dropout(p))

    def forward(self, x):                                     # x: any shape
        if not self.training or self.p == 0:
            return x
        if self.mask is None:
            return super().forward(x)
        if self.mask.shape != tuple(x.shape):
            raise ValueError(f"the given dropout mask has shape {self.mask.shape}, the input {tuple(x.shape)}")
        return x * torch.as_tensor(self.mask, dtype=x.dtype, device=x.device)


class CausalSelfAttention(nn.Module):
    """Multi-head attention where each position sees only itself and earlier positions.
    GPT-2 has G = H key/value heads, one per query head, and its positions are in x already, so
    `turn` and `share` pass q, k, v through and `score_bias` adds nothing to the causal mask;
    lib.torch_twin.modern's ModernAttention turns q and k by position (RoPE), shares G < H
    key/value heads among the query heads (GQA) and biases the scores (ALiBi, a sliding window).
    forward returns (output, weights): the weights (B, H, T, S) when they were computed
    explicitly (`keep_attention`, set by GPT.forward_outputs, or a given dropout mask), else None."""
    keep_attention = False

    def __init__(self, config: GPTConfig, n_kv_head=None):
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = n_kv_head or config.n_head           # G: H in GPT-2
        n_qkv = (config.n_head + 2 * self.n_kv_head) * config.head_dim
        self.c_attn = Linear(config.n_embd, n_qkv, bias=config.bias)   # fused q, k, v: (H + 2G) D = 3C outputs
        self.c_proj = Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = Dropout(config.dropout)           # on the attention weights
        self.resid_dropout = Dropout(config.dropout)          # on the output, before the residual add

    def forward(self, x, kv_cache=None, layer=0):             # x: (B, T, C)
        B, T, C = x.shape
        H, G, D = self.n_head, self.n_kv_head, C // self.n_head
        qkv = self.c_attn(x).view(B, T, H + 2 * G, D).transpose(1, 2)  # (B, H + 2G, T, D)
        q, k, v = qkv.split([H, G, G], dim=1)                 # (B, H, T, D), (B, G, T, D), (B, G, T, D)
        start = 0 if kv_cache is None else kv_cache.length   # the first new query's position
        q, k = self.turn(q, k, start)                         # GPT-2: as they are
        if kv_cache is not None:                              # decode: append, attend to all kept
            k, v = kv_cache.update(layer, k, v)               # (B, G, S, D): S = keys kept before + T
        k, v = self.share(k, v)                               # (B, H, S, D) each
        S = k.shape[2]
        bias = self.score_bias(T, S - T, q.dtype, x.device)   # (T, S) or (H, T, S); None: plain causal
        att = None
        p = self.attn_dropout.p if self.training else 0.0     # SDPA drops attention weights itself
        if self.keep_attention or self.attn_dropout.mask is not None:  # explicit path: the viewer, given masks
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, S)
            att = torch.softmax(att + (causal_mask(T, S - T, q.dtype, device=x.device) if bias is None else bias),
                                dim=-1)
            y = self.attn_dropout(att) @ v                    # (B, H, T, D)
        elif bias is None and (S == T or T == 1):             # plain causal, or one new query seeing all
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=S == T and T > 1)
        else:                                                 # a chunk after cached keys, a window, ALiBi
            bias = causal_mask(T, S - T, q.dtype, device=x.device) if bias is None else bias
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, T, C)                # (B, T, C): heads side by side
        return self.resid_dropout(self.c_proj(y)), att

    def score_bias(self, T, start, dtype, device):           # -> None: the plain causal mask
        """What is added to the scores of T queries after `start` earlier keys, the causal mask
        included: None for GPT-2, whose mask SDPA applies by itself."""
        return None

    def turn(self, q, k, start):                              # -> q, k
        return q, k

    def share(self, k, v):                                    # (B, G, S, D) -> (B, H, S, D) each
        return k, v


# Chapter 8's attention for each kind of position, which every config that leaves GPT-2's attention
# (positions other than learned ones, or shared key/value heads) gets; lib.torch_twin.modern fills it.
ATTENTIONS = {}


class MLP(nn.Module):
    """Position-wise feed-forward: C -> F (4C in GPT-2), activation, F -> C."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.act = ACTIVATIONS[config.activation]
        self.c_fc = Linear(config.n_embd, config.hidden_dim, bias=config.bias)
        self.c_proj = Linear(config.hidden_dim, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)                # on the output, before the residual add

    def forward(self, x):                                     # (B, T, C) -> (B, T, C)
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # via (B, T, F)


MLPS = {"mlp": MLP}                                           # lib.torch_twin.modern adds "swiglu"
LAYERS = {"activation": ACTIVATIONS, "norm": NORMS, "position": ATTENTIONS, "mlp": MLPS}  # by GPTConfig field


class Block(nn.Module):
    """Pre-norm residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = NORMS[config.norm](config.n_embd, eps=config.layer_norm_eps)
        gpt2 = (config.position == "learned" and config.kv_heads == config.n_head
                and config.sliding_window is None)            # GPT-2's attention
        self.attn = CausalSelfAttention(config) if gpt2 else ATTENTIONS[config.position](config)
        self.ln_2 = NORMS[config.norm](config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLPS[config.mlp](config)

    def forward(self, x, kv_cache=None, layer=0):             # x: (B, T, C)
        a, att = self.attn(self.ln_1(x), kv_cache, layer)
        x = x + a
        return x + self.mlp(self.ln_2(x)), att


class KVCache:
    """Keys and values of every layer, pre-allocated for `positions` (n_ctx unless given; more
    for a model that extrapolates): k[layer], v[layer] have shape (B, G, positions, D), G = kv_heads;
    `length` positions are filled."""

    def __init__(self, config: GPTConfig, batch: int, dtype=torch.float32, device="cpu", positions=None):
        self.capacity = config.n_ctx if positions is None else positions
        shape = (batch, config.kv_heads, self.capacity, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                            # k, v: (B, G, T, D) new positions
        end = self.length + k.shape[2]
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]  # (B, G, end, D)


class RollingKVCache:
    """The KV cache of a sliding-window model (config.sliding_window = W): each layer keeps the
    keys and values of the last W positions only, k[layer], v[layer] of shape (B, G, <= W, D), so
    its memory stops growing at W positions however long the generation. `length` counts every
    position seen (RoPE and the masks need the absolute count); setting it back to 0 empties the
    cache, as the plain KVCache's refill does. No capacity: the positions go on as long as the
    model's positions do."""

    def __init__(self, config: GPTConfig, batch: int, dtype=torch.float32, device="cpu"):
        if config.sliding_window is None:
            raise ValueError("RollingKVCache needs a config with a sliding_window, got sliding_window=None")
        self.window = config.sliding_window
        shape = (batch, config.kv_heads, 0, config.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                            # k, v: (B, G, T, D) new positions
        kept = min(self.length, self.k[layer].shape[2])       # 0 after length was set back to 0
        k = torch.cat([self.k[layer][:, :, self.k[layer].shape[2] - kept:], k], dim=2)  # (B, G, kept + T, D)
        v = torch.cat([self.v[layer][:, :, self.v[layer].shape[2] - kept:], v], dim=2)  # (B, G, kept + T, D)
        self.k[layer], self.v[layer] = k[:, :, -self.window:], v[:, :, -self.window:]  # (B, G, <= W, D)
        return k, v                                           # the mask hides what lies W or more back


class Outputs(NamedTuple):
    """What GPT.forward_outputs returns: the logits (B, T, V), the hidden states after ln_f
    (B, T, C), which a task head reads (chapter 7), and, when asked for, every layer's attention
    weights (n_layer x (B, H, T, S), S = keys seen), else None."""
    logits: torch.Tensor
    hidden: torch.Tensor
    attentions: list | None


class GPT(nn.Module):
    """GPT-2: token + position embeddings, n_layer blocks, final LayerNorm, head tied to wte.
    (Only learned positions have wpe: sinusoidal ones are a fixed table added in its place, RoPE
    and ALiBi act in the attention; the config chooses the norm and the feed-forward.)"""

    def __init__(self, config: GPTConfig, seed: int = 0):
        super().__init__()
        self.config = config
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.n_ctx, config.n_embd) if config.position == "learned" else None
        self.drop = Dropout(config.dropout)                   # on the embeddings
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = NORMS[config.norm](config.n_embd, eps=config.layer_norm_eps)
        self.load_state_dict(init_state(config, seed))        # same seed, same weights as numpy

    def forward(self, idx, kv_cache=None, extrapolate=False):
        """idx: (B, T) token ids -> logits (B, T, V). With a `kv_cache`, idx holds only the new
        positions, which attend to everything cached. Positions go up to n_ctx - 1;
        extrapolate=True lets sinusoidal, RoPE and ALiBi positions go past it, to evaluate beyond
        the training length (learned positions have no rows there)."""
        return self.forward_outputs(idx, kv_cache, extrapolate=extrapolate).logits

    def forward_outputs(self, idx, kv_cache=None, return_attention=False, extrapolate=False) -> Outputs:
        """The same forward pass, returning its `Outputs`: logits, hidden states and, with
        return_attention, every layer's attention weights (computed explicitly, not by SDPA)."""
        for block in self.h:
            block.attn.keep_attention = return_attention
        try:
            return self._forward(idx, kv_cache, return_attention, extrapolate)
        finally:
            for block in self.h:
                block.attn.keep_attention = False

    def _forward(self, idx, kv_cache, return_attention, extrapolate):  # -> Outputs
        start = 0 if kv_cache is None else kv_cache.length
        self._check_idx(idx, kv_cache, extrapolate)
        B, T = idx.shape
        x = self.wte(idx)                                     # (B, T, C)
        if self.wpe is not None:                              # learned positions (RoPE turns q, k instead)
            x = x + self.wpe(torch.arange(start, start + T, device=idx.device))  # (B, T, C) + (T, C)
        elif self.config.position in FIXED_POSITIONS:         # chapter 8's sinusoids: a formula, no weights
            table = FIXED_POSITIONS[self.config.position]
            x = x + table(start, T, self.config.n_embd, x.dtype, idx.device)  # (B, T, C) + (T, C)
        x = self.drop(x)
        attentions = []
        for layer, block in enumerate(self.h):
            x, att = block(x, kv_cache, layer)
            attentions.append(att)                            # (B, H, T, S), or None
        hidden = self.ln_f(x)                                 # (B, T, C)
        logits = self.lm_head(hidden)                         # (B, T, V)
        if kv_cache is not None:
            kv_cache.length += T
        return Outputs(logits, hidden, attentions if return_attention else None)

    def lm_head(self, hidden):                                # (B, T, C) -> (B, T, V)
        """The output head, tied to wte. A method, so that `replace_head` (at the end of this file)
        can swap in another way of computing the same logits for a while."""
        return hidden @ self.wte.weight.T

    def _check_idx(self, idx, kv_cache, extrapolate):
        if not isinstance(idx, torch.Tensor) or idx.ndim != 2 or idx.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"idx must be a (B, T) integer tensor of token ids, got "
                             f"{type(idx).__name__} {getattr(idx, 'shape', '')} {getattr(idx, 'dtype', '')}")
        # a cache needs only `length` and `update`; `capacity` is optional (a rolling cache has none)
        start, capacity = (0, None) if kv_cache is None else (kv_cache.length, getattr(kv_cache, "capacity", None))
        check_positions(self.config, start, idx.shape[1], capacity, extrapolate)
        # On a GPU, reading min and max would make the host wait for the device at every call, and
        # under torch.compile it would cut the graph in two; there the ids are checked once, before
        # the loop: lib.train checks its data, generate its prompt.
        if idx.device.type != "cpu" or torch.compiler.is_compiling():
            return
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
        """{name: array}: the parameters under the course's names (lib.config.param_shapes), as
        numpy arrays in either twin: here float32 arrays on the host (torch's own `state_dict`
        gives the tensors)."""
        return {k: v.detach().cpu().float().numpy() for k, v in self.named_parameters()}

    def load_state_dict(self, state):
        """Accepts numpy arrays or tensors under the course's names (see lib.config.param_shapes);
        every name must be there, and no other (lib.weights.check_state)."""
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


# ---- swapping the output head (torch only: CPU decoding, GPU training) ---------------------------
@contextlib.contextmanager
def replace_head(model, head):
    """Within this block `model.forward` computes its logits as head(hidden), (B, T, C) ->
    (B, T, V), instead of the tied product above: the function, set on the instance, hides the
    method, and leaving the block deletes it. Its two users: the CPU decode layout
    (cpu_decode.py) and GPU training's padded vocabulary (gpu.py's `pad_vocab`)."""
    model.lm_head = head
    try:
        yield
    finally:
        del model.lm_head
