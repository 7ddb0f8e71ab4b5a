"""GPT-2 in numpy, every gradient written by hand.

Each layer has `forward(x) -> (y, cache)` and `backward(dy, cache) -> dx`; backward adds the
gradients of the layer's parameters into `layer.grads` (same names as the parameters).
As in torch, a model is in training mode (dropout on) until `eval()`, and `train()` turns it back.
Read it beside `lib/torch_twin/model.py`: same classes, same names, same order.

Shapes: B batch, T time (tokens), C = n_embd, H = n_head, D = C // H (head size), V vocab,
G = key/value heads (H in GPT-2), F = hidden_dim (feed-forward width).

The config chooses each block's layers by name (lib.config.CHOICES); `LAYERS` gives, for each
such field, the table here that maps its names to layers. Chapter 8's pieces (RMSNorm, SwiGLU,
RoPE, ALiBi, shared key/value heads) live in `lib/numpy_twin/modern.py`, which adds them to these
tables; this module never imports it.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..config import GPTConfig, check_positions
from ..dropout import check_dropout, dropout_mask
from ..weights import init_state, load_hf_gpt2, load_state, save_state


# ---- activations: forward and backward side by side -----------------------------------------
_GELU_C = math.sqrt(2.0 / math.pi)   # 0.7978845608...


def gelu(x):
    """GPT-2's GELU, the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x * x * x)))   # x * x * x: numpy's x ** 3 is slow


def gelu_backward(dy, x):
    """dy * d/dx gelu(x). With t = tanh u and u = sqrt(2/pi) (x + 0.044715 x^3), the product
    and chain rules give 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)."""
    t = np.tanh(_GELU_C * (x + 0.044715 * x * x * x))
    du_dx = _GELU_C * (1.0 + 3 * 0.044715 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du_dx)


_erf64 = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """erf without scipy: exact (math.erf) in float64; in float32 Abramowitz & Stegun 7.1.26,
    whose absolute error (<= 1.5e-7) is below float32's resolution near 1."""
    if x.dtype == np.float64:
        return _erf64(x).astype(np.float64)
    s, a = np.sign(x), np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (s * (1.0 - poly * np.exp(-a * a))).astype(x.dtype, copy=False)


def gelu_exact(x):
    """GELU as defined: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_exact_backward(dy, x):
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)         # phi(x)
    return dy * (0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * pdf)


def relu(x):
    return np.maximum(x, 0)


def relu_backward(dy, x):
    return dy * (x > 0)


ACTIVATIONS = {"gelu": (gelu, gelu_backward), "gelu_exact": (gelu_exact, gelu_exact_backward),
               "relu": (relu, relu_backward)}


def softmax(x, axis=-1):
    """Numerically stable: subtracting the row max makes every exponent <= 0."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


def causal_mask(T, start, dtype):
    """(T, start + T) additive mask: query i sits at position start + i and may see keys
    0 .. start + i; later keys get -inf, which the softmax turns into weight 0."""
    return np.triu(np.full((T, start + T), -np.inf, dtype), k=start + 1)


# ---- layers ------------------------------------------------------------------------------------
# Chapter 8's fixed position tables (no weights), added to the embeddings in wpe's place, by
# config.position: function (start, T, n_embd, dtype) -> (T, n_embd). lib.numpy_twin.modern fills it.
FIXED_POSITIONS = {}
class Module:
    """Parameters are the ndarray attributes named in `param_names`; sub-layers are Module
    attributes or lists of Modules. `grads` holds each parameter's gradient by name; like
    torch, backward adds into it and `zero_grad()` clears it, and `training` says whether dropout
    is on (`train()`, `eval()`)."""
    param_names: tuple[str, ...] = ()
    training = True

    def children(self):
        for name, child in vars(self).items():
            if isinstance(child, Module):
                yield name, child
            elif isinstance(child, list):
                for i, c in enumerate(child):
                    yield f"{name}.{i}", c

    def modules(self):
        yield self
        for _, child in self.children():
            yield from child.modules()

    def named_parameters(self, prefix=""):
        for name in self.param_names:
            yield prefix + name, getattr(self, name)
        for name, child in self.children():
            yield from child.named_parameters(f"{prefix}{name}.")

    def named_grads(self, prefix=""):
        for name in self.param_names:
            yield prefix + name, self.grads[name]
        for name, child in self.children():
            yield from child.named_grads(f"{prefix}{name}.")

    def zero_grad(self):
        for m in self.modules():
            if not m.param_names:
                continue
            if "grads" not in vars(m):
                m.grads = {n: np.zeros_like(getattr(m, n)) for n in m.param_names}
            for g in m.grads.values():
                g.fill(0)

    def train(self, mode=True):
        """Training mode (dropout on) or, with mode=False, evaluation mode, for this layer and
        all its sub-layers, as torch's `train`. Returns the layer."""
        for m in self.modules():
            m.training = mode
        return self

    def eval(self):
        return self.train(False)

    def state_dict(self):
        """{name: parameter}, as torch's `state_dict` (the arrays themselves, not copies)."""
        return dict(self.named_parameters())

    def astype(self, dtype):
        """Convert every parameter (and gradient) to `dtype`, e.g. float64 for gradient checks."""
        for m in self.modules():
            for n in m.param_names:
                setattr(m, n, getattr(m, n).astype(dtype, copy=False))
            vars(m).pop("grads", None)
        self.zero_grad()
        return self


class Linear(Module):
    """y = x W^T + b with W stored (out, in), as torch.nn.Linear stores it (bias=False: no b)."""
    param_names = ("weight", "bias")

    def __init__(self, n_in, n_out, bias=True):
        self.weight = np.zeros((n_out, n_in), np.float32)
        self.bias = np.zeros(n_out, np.float32) if bias else None
        if not bias:
            self.param_names = ("weight",)

    def forward(self, x):                                    # x: (..., in)
        y = x.reshape(-1, x.shape[-1]) @ self.weight.T       # (N, out): one matrix product
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], -1), x               # (..., out)

    def backward(self, dy, x):                               # dy: (..., out)
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
        self.grads["weight"] += dy2.T @ x2                   # (out, in)
        if self.bias is not None:
            self.grads["bias"] += dy2.sum(axis=0)            # (out,)
        return (dy2 @ self.weight).reshape(*x.shape)          # (..., in)


class Embedding(Module):
    """A lookup table: row i is the vector of token (or position) i."""
    param_names = ("weight",)

    def __init__(self, n_rows, n_embd):
        self.weight = np.zeros((n_rows, n_embd), np.float32)

    def forward(self, idx):                                  # idx: (B, T) ints
        return self.weight[idx], idx                         # (B, T, C)

    def backward(self, dy, idx):                             # dy: (B, T, C)
        np.add.at(self.grads["weight"], idx.reshape(-1), dy.reshape(-1, dy.shape[-1]))


class Dropout(Module):
    """In training mode, zero each value with probability p and divide the kept ones by 1 - p
    (their expectation stays x); in evaluation mode, or with p = 0, pass x through, drawing
    nothing. The mask is drawn from `rng` (the model gives all its Dropout layers one generator,
    see GPT.seed_dropout), or is the one given by `lib.dropout.use_masks`."""

    def __init__(self, p, seed=0):
        self.p = check_dropout(p)
        self.rng = np.random.default_rng(seed)
        self.mask = None                                     # a given mask, used instead of a drawn one

    def forward(self, x):                                    # x: any shape
        if not self.training or self.p == 0:
            return x, None
        if self.mask is None:
            mask = dropout_mask(x.shape, self.p, self.rng, x.dtype)
        elif self.mask.shape == x.shape:
            mask = self.mask.astype(x.dtype, copy=False)
        else:
            raise ValueError(f"the given dropout mask has shape {self.mask.shape}, the input {x.shape}")
        return x * mask, mask

    def backward(self, dy, mask):
        return dy if mask is None else dy * mask             # the kept values' gradient, scaled alike


class LayerNorm(Module):
    """Normalise each vector to mean 0, variance 1, then scale and shift (eps 1e-5)."""
    param_names = ("weight", "bias")

    def __init__(self, n_embd, eps=1e-5):
        self.weight = np.ones(n_embd, np.float32)
        self.bias = np.zeros(n_embd, np.float32)
        self.eps = eps

    def forward(self, x):                                    # x: (B, T, C)
        mu = x.mean(axis=-1, keepdims=True)                  # (B, T, 1)
        xc = x - mu
        rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + self.eps)  # (B, T, 1)
        xhat = xc * rstd
        return xhat * self.weight + self.bias, (xhat, rstd)

    def backward(self, dy, cache):
        xhat, rstd = cache
        self.grads["weight"] += (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)
        self.grads["bias"] += dy.reshape(-1, dy.shape[-1]).sum(axis=0)
        dxhat = dy * self.weight
        # d/dx of (x - mean) / std: remove the parts of dxhat along 1 and along xhat
        return rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                       - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))


NORMS = {"layernorm": LayerNorm}                    # lib.numpy_twin.modern adds "rmsnorm"


class AttentionCache(NamedTuple):
    """What CausalSelfAttention.backward needs from its forward; `att` (B, H, T, S) are the
    attention weights (S = start + T keys), which the attention viewer also reads; `turn` is
    what `turn` kept for its backward."""
    c_attn: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    att: np.ndarray
    att_mask: np.ndarray | None
    c_proj: np.ndarray
    resid_mask: np.ndarray | None
    turn: tuple | None


class CausalSelfAttention(Module):
    """Multi-head attention where each position sees only itself and earlier positions.
    GPT-2 has G = H key/value heads, one per query head, and its positions are in x already, so
    `turn` and `share` pass q, k, v through and `score_bias` is the causal mask;
    lib.numpy_twin.modern's ModernAttention turns q and k by position (RoPE), shares G < H
    key/value heads among the query heads (GQA) and biases the scores (ALiBi, a sliding window)."""

    def __init__(self, config: GPTConfig, n_kv_head=None):
        self.n_head = config.n_head
        self.n_kv_head = n_kv_head or config.n_head          # G: H in GPT-2
        n_qkv = (config.n_head + 2 * self.n_kv_head) * config.head_dim
        self.c_attn = Linear(config.n_embd, n_qkv, config.bias)   # fused q, k, v: (H + 2G) D = 3C outputs
        self.c_proj = Linear(config.n_embd, config.n_embd, config.bias)
        self.attn_dropout = Dropout(config.dropout)          # on the attention weights
        self.resid_dropout = Dropout(config.dropout)         # on the output, before the residual add

    def forward(self, x, kv_cache=None, layer=0):            # x: (B, T, C)
        B, T, C = x.shape
        H, G, D = self.n_head, self.n_kv_head, C // self.n_head
        qkv, c_attn_cache = self.c_attn.forward(x)           # (B, T, (H + 2G) D)
        qkv = qkv.reshape(B, T, H + 2 * G, D).transpose(0, 2, 1, 3)  # (B, H + 2G, T, D)
        q, k, v = qkv[:, :H], qkv[:, H:H + G], qkv[:, H + G:]  # (B, H, T, D), (B, G, T, D), (B, G, T, D)
        start = 0 if kv_cache is None else kv_cache.length  # the first new query's position
        q, k, turned = self.turn(q, k, start)                # GPT-2: as they are
        if kv_cache is not None:                             # decode: append, attend to all kept
            k, v = kv_cache.update(layer, k, v)              # (B, G, S, D): S = keys kept before + T
        k, v = self.share(k, v)                              # (B, H, S, D) each
        S = k.shape[2]
        att = q @ k.transpose(0, 1, 3, 2)                    # (B, H, T, S)
        att *= 1.0 / math.sqrt(D)
        att += self.score_bias(T, S - T, att.dtype)          # -inf where a key is hidden from a query
        att = softmax(att)
        kept, att_mask = self.attn_dropout.forward(att)      # (B, H, T, S)
        y = kept @ v                                         # (B, H, T, D)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)         # (B, T, C): heads side by side
        out, c_proj_cache = self.c_proj.forward(y)           # (B, T, C)
        out, resid_mask = self.resid_dropout.forward(out)
        return out, AttentionCache(c_attn_cache, q, k, v, att, att_mask, c_proj_cache, resid_mask, turned)

    def backward(self, dout, cache):                         # dout: (B, T, C)
        q, k, v, att, att_mask = cache.q, cache.k, cache.v, cache.att, cache.att_mask
        B, H, T, D = q.shape
        dout = self.resid_dropout.backward(dout, cache.resid_mask)
        dy = self.c_proj.backward(dout, cache.c_proj)        # (B, T, C)
        dy = dy.reshape(B, T, H, D).transpose(0, 2, 1, 3)    # (B, H, T, D)
        kept = att if att_mask is None else att * att_mask   # the weights that multiplied v
        dv = kept.transpose(0, 1, 3, 2) @ dy                 # (B, H, T, D)
        datt = self.attn_dropout.backward(dy @ v.transpose(0, 1, 3, 2), att_mask)  # (B, H, T, T)
        # softmax backward: ds = p * (dp - sum(dp * p)); masked entries have p = 0
        ds = att * (datt - (datt * att).sum(axis=-1, keepdims=True))
        ds *= 1.0 / math.sqrt(D)
        dq = ds @ k                                          # (B, H, T, D)
        dk = ds.transpose(0, 1, 3, 2) @ q                    # (B, H, T, D)
        dk, dv = self.share_backward(dk, dv)                 # (B, G, T, D) each
        dq, dk = self.turn_backward(dq, dk, cache.turn)
        dqkv = np.concatenate([dq, dk, dv], axis=1).transpose(0, 2, 1, 3).reshape(B, T, -1)  # (B, T, (H + 2G) D)
        return self.c_attn.backward(dqkv, cache.c_attn)      # (B, T, C)

    def score_bias(self, T, start, dtype):                   # -> (T, start + T), added to the scores
        """What is added to the scores of T queries after `start` earlier keys: the causal mask.
        A constant, so the backward needs nothing of it."""
        return causal_mask(T, start, dtype)

    def turn(self, q, k, start):                             # -> q, k, what turn_backward needs
        return q, k, None

    def turn_backward(self, dq, dk, turned):
        return dq, dk

    def share(self, k, v):                                   # (B, G, S, D) -> (B, H, S, D) each
        return k, v

    def share_backward(self, dk, dv):                        # (B, H, S, D) -> (B, G, S, D) each
        return dk, dv


# Chapter 8's attention for each kind of position, which every config that leaves GPT-2's attention
# (positions other than learned ones, or shared key/value heads) gets; lib.numpy_twin.modern fills it.
ATTENTIONS = {}


class MLP(Module):
    """Position-wise feed-forward: C -> F (4C in GPT-2), activation, F -> C."""

    def __init__(self, config: GPTConfig):
        self.act, self.act_backward = ACTIVATIONS[config.activation]
        self.c_fc = Linear(config.n_embd, config.hidden_dim, config.bias)
        self.c_proj = Linear(config.hidden_dim, config.n_embd, config.bias)
        self.dropout = Dropout(config.dropout)               # on the output, before the residual add

    def forward(self, x):                                    # x: (B, T, C)
        h, c_fc_cache = self.c_fc.forward(x)                 # (B, T, F)
        a = self.act(h)                                      # (B, T, F)
        out, c_proj_cache = self.c_proj.forward(a)           # (B, T, C)
        out, drop_mask = self.dropout.forward(out)
        return out, (c_fc_cache, h, c_proj_cache, drop_mask)

    def backward(self, dout, cache):
        c_fc_cache, h, c_proj_cache, drop_mask = cache
        dout = self.dropout.backward(dout, drop_mask)
        da = self.c_proj.backward(dout, c_proj_cache)        # (B, T, F)
        dh = self.act_backward(da, h)                        # (B, T, F)
        return self.c_fc.backward(dh, c_fc_cache)            # (B, T, C)


MLPS = {"mlp": MLP}                                  # lib.numpy_twin.modern adds "swiglu"
LAYERS = {"activation": ACTIVATIONS, "norm": NORMS, "position": ATTENTIONS, "mlp": MLPS}  # by GPTConfig field


class BlockCache(NamedTuple):
    """What Block.backward needs: each sub-layer's cache, by the sub-layer's name."""
    ln_1: tuple
    attn: AttentionCache
    ln_2: tuple
    mlp: tuple


class Block(Module):
    """Pre-norm residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, config: GPTConfig):
        self.ln_1 = NORMS[config.norm](config.n_embd, config.layer_norm_eps)
        gpt2 = (config.position == "learned" and config.kv_heads == config.n_head
                and config.sliding_window is None)           # GPT-2's attention
        self.attn = CausalSelfAttention(config) if gpt2 else ATTENTIONS[config.position](config)
        self.ln_2 = NORMS[config.norm](config.n_embd, config.layer_norm_eps)
        self.mlp = MLPS[config.mlp](config)

    def forward(self, x, kv_cache=None, layer=0):            # x: (B, T, C)
        a, ln_1_cache = self.ln_1.forward(x)
        a, attn_cache = self.attn.forward(a, kv_cache, layer)
        x = x + a
        m, ln_2_cache = self.ln_2.forward(x)
        m, mlp_cache = self.mlp.forward(m)
        return x + m, BlockCache(ln_1_cache, attn_cache, ln_2_cache, mlp_cache)

    def backward(self, dx, cache):                           # dx: (B, T, C)
        ln_1_cache, attn_cache, ln_2_cache, mlp_cache = cache
        dx = dx + self.ln_2.backward(self.mlp.backward(dx, mlp_cache), ln_2_cache)
        return dx + self.ln_1.backward(self.attn.backward(dx, attn_cache), ln_1_cache)


class KVCache:
    """Keys and values of every layer, pre-allocated for `positions` (n_ctx unless given; more
    for a model that extrapolates): k[layer], v[layer] have shape (B, G, positions, D), G = kv_heads;
    `length` positions are filled."""

    def __init__(self, config: GPTConfig, batch: int, dtype=np.float32, positions=None):
        self.capacity = config.n_ctx if positions is None else positions
        shape = (batch, config.kv_heads, self.capacity, config.head_dim)
        self.k = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.v = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                           # k, v: (B, G, T, D) new positions
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

    def __init__(self, config: GPTConfig, batch: int, dtype=np.float32):
        if config.sliding_window is None:
            raise ValueError("RollingKVCache needs a config with a sliding_window, got sliding_window=None")
        self.window = config.sliding_window
        shape = (batch, config.kv_heads, 0, config.head_dim)
        self.k = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.v = [np.zeros(shape, dtype) for _ in range(config.n_layer)]
        self.length = 0

    def update(self, layer, k, v):                           # k, v: (B, G, T, D) new positions
        kept = min(self.length, self.k[layer].shape[2])      # 0 after length was set back to 0
        k = np.concatenate([self.k[layer][:, :, self.k[layer].shape[2] - kept:], k], axis=2)  # (B, G, kept + T, D)
        v = np.concatenate([self.v[layer][:, :, self.v[layer].shape[2] - kept:], v], axis=2)  # (B, G, kept + T, D)
        self.k[layer], self.v[layer] = k[:, :, -self.window:], v[:, :, -self.window:]  # (B, G, <= W, D)
        return k, v                                          # the mask hides what lies W or more back


class Outputs(NamedTuple):
    """What GPT.forward_outputs returns: the logits (B, T, V), the hidden states after ln_f
    (B, T, C), which a task head reads (chapter 7), and, when asked for, every layer's attention
    weights (n_layer x (B, H, T, S), S = keys seen), else None."""
    logits: np.ndarray
    hidden: np.ndarray
    attentions: list | None


class ForwardCache(NamedTuple):
    """What GPT.backward needs from the last forward without a KV cache."""
    tok: np.ndarray
    pos: np.ndarray | None
    drop_mask: np.ndarray | None
    blocks: list
    ln_f: tuple
    hidden: np.ndarray


class GPT(Module):
    """GPT-2: token + position embeddings, n_layer blocks, final LayerNorm, head tied to wte.
    (Only learned positions have wpe: sinusoidal ones are a fixed table added in its place, RoPE
    and ALiBi act in the attention; the config chooses the norm and the feed-forward.)"""

    def __init__(self, config: GPTConfig, seed: int = 0, dtype=np.float32):
        self.config = config
        self.wte = Embedding(config.vocab_size, config.n_embd)
        self.wpe = Embedding(config.n_ctx, config.n_embd) if config.position == "learned" else None
        self.drop = Dropout(config.dropout)                  # on the embeddings
        self.h = [Block(config) for _ in range(config.n_layer)]
        self.ln_f = NORMS[config.norm](config.n_embd, config.layer_norm_eps)
        self.astype(dtype)
        self.load_state_dict(init_state(config, seed, dtype))
        self.seed_dropout(seed)
        self._cache = None

    def seed_dropout(self, seed):
        """One generator, seeded with `seed`, for every Dropout layer's masks (`dropout_rng`)."""
        self.dropout_rng = np.random.default_rng([seed, 1])   # not the weights' stream (init_state's)
        for m in self.modules():
            if isinstance(m, Dropout):
                m.rng = self.dropout_rng

    # ---- forward and backward -------------------------------------------------------------
    def forward(self, idx, kv_cache=None, extrapolate=False):
        """idx: (B, T) token ids -> logits (B, T, V). With a `kv_cache`, idx holds only the new
        positions, which attend to everything cached. Without one, what backward needs is kept.
        Positions go up to n_ctx - 1; extrapolate=True lets sinusoidal, RoPE and ALiBi positions
        go past it, to evaluate beyond the training length (learned positions have no rows there)."""
        return self.forward_outputs(idx, kv_cache, extrapolate=extrapolate).logits

    def forward_outputs(self, idx, kv_cache=None, return_attention=False, extrapolate=False) -> Outputs:
        """The same forward pass, returning its `Outputs`: logits, hidden states and, with
        return_attention, every layer's attention weights."""
        idx = self._check_idx(idx, kv_cache, extrapolate)
        B, T = idx.shape
        start = 0 if kv_cache is None else kv_cache.length
        x, tok_cache = self.wte.forward(idx)                 # (B, T, C)
        pos_cache = None
        if self.wpe is not None:                             # learned positions (RoPE turns q, k instead)
            pos, pos_cache = self.wpe.forward(np.arange(start, start + T)[None])  # (1, T, C)
            x = x + pos                                      # (B, T, C)
        elif self.config.position in FIXED_POSITIONS:        # chapter 8's sinusoids: a formula, no weights
            table = FIXED_POSITIONS[self.config.position]
            x = x + table(start, T, self.config.n_embd, x.dtype)  # (B, T, C) + (T, C)
        x, drop_mask = self.drop.forward(x)
        block_caches = []
        for layer, block in enumerate(self.h):
            x, cache = block.forward(x, kv_cache, layer)
            block_caches.append(cache)
        hidden, ln_f_cache = self.ln_f.forward(x)            # (B, T, C)
        logits = self.lm_head(hidden)                        # (B, T, V)
        if kv_cache is None:
            self._cache = ForwardCache(tok_cache, pos_cache, drop_mask, block_caches, ln_f_cache, hidden)
        else:
            kv_cache.length += T
        attentions = [c.attn.att for c in block_caches] if return_attention else None  # n_layer x (B, H, T, S)
        return Outputs(logits, hidden, attentions)

    def lm_head(self, hidden):                               # (B, T, C) -> (B, T, V)
        """The output head, tied to wte."""
        B, T, C = hidden.shape
        return (hidden.reshape(B * T, C) @ self.wte.weight.T).reshape(B, T, -1)

    def backward(self, dlogits, dhidden=None):
        """dlogits: (B, T, V), the loss's gradient w.r.t. the last forward's logits; dhidden
        (B, T, C), optional, its gradient w.r.t. the hidden states (`forward_outputs`) where a
        task head reads them (chapter 7). Adds into `self.grads` ({name: gradient};
        `zero_grad()` clears them, as in torch) and releases the forward's cache."""
        if self._cache is None:
            raise RuntimeError("backward() needs a forward() without kv_cache first")
        cache, self._cache = self._cache, None
        hidden = cache.hidden
        C = hidden.shape[-1]
        self.wte.grads["weight"] += dlogits.reshape(-1, dlogits.shape[-1]).T @ hidden.reshape(-1, C)  # (V, C)
        dhidden_lm = dlogits @ self.wte.weight                # (B, T, C)
        dx = self.ln_f.backward(dhidden_lm if dhidden is None else dhidden_lm + dhidden, cache.ln_f)  # (B, T, C)
        for block, block_cache in zip(reversed(self.h), reversed(cache.blocks)):
            dx = block.backward(dx, block_cache)
        dx = self.drop.backward(dx, cache.drop_mask)
        self.wte.backward(dx, cache.tok)
        if self.wpe is not None:
            self.wpe.backward(dx.sum(axis=0, keepdims=True), cache.pos)

    @property
    def grads(self) -> dict[str, np.ndarray]:
        return dict(self.named_grads())

    def _check_idx(self, idx, kv_cache, extrapolate):
        idx = np.asarray(idx)
        if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"idx must be a (B, T) array of integer token ids, got shape {idx.shape} dtype {idx.dtype}")
        # a cache needs only `length` and `update`; `capacity` is optional (a rolling cache has none)
        start, capacity = (0, None) if kv_cache is None else (kv_cache.length, getattr(kv_cache, "capacity", None))
        check_positions(self.config, start, idx.shape[1], capacity, extrapolate)
        if idx.size and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), "
                             f"got min {idx.min()} max {idx.max()}")
        return idx

    # ---- generation (lib/numpy_twin/generate.py) ------------------------------------------
    def generate(self, idx, max_new_tokens, **options):
        """(B, T) prompts -> (B, T + n) array: each prompt then its new tokens. Options:
        temperature, top_k, top_p, repetition_penalty, use_cache, seed, stop_token."""
        from .generate import generate
        return generate(self, idx, max_new_tokens, **options)

    def stream(self, idx, max_new_tokens, **options):
        """The same, one (B,) array of new ids per step (a Stream, which reports cropping)."""
        from .generate import stream
        return stream(self, idx, max_new_tokens, **options)

    # ---- parameters and files -------------------------------------------------------------
    def state_dict_numpy(self) -> dict[str, np.ndarray]:
        """{name: array}: the parameters under the course's names (lib.config.param_shapes), as
        numpy arrays in either twin. Here they are the model's own arrays, as `state_dict()` gives."""
        return self.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        from ..weights import check_state
        check_state(self.config, state)
        for name, param in self.named_parameters():
            param[...] = state[name]                         # in place: layers hold these arrays

    def num_params(self) -> int:
        return sum(p.size for _, p in self.named_parameters())

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
