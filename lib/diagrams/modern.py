"""Chapter 8's diagrams: RoPE as a rotation of pairs, and grouped-query attention's shared heads."""
from __future__ import annotations

import math

import numpy as np

from ..config import GPTConfig, kv_cache_bytes, param_shapes
from ..numpy_twin.modern import rope_cos_sin
from .svg import INK, MUTED, SMALL, Canvas, fill_of

POSITIONS = 4     # positions m drawn on each circle


def rope():
    config = GPTConfig.gpt2(position="rope")
    D, base = config.head_dim, config.rope_base
    cos, sin = rope_cos_sin(0, POSITIONS, D, base, np.float64)   # (POSITIONS, D/2) each
    angles = np.arctan2(sin, cos)                                  # (POSITIONS, D/2): m θ_i
    half = D // 2
    pairs = (0, half // 4, half - 1)
    c = Canvas()
    cell, left, bar_y = 9, 40, 100
    c.text(left, 12, f"one head's query or key, D = {D}; pair i is (x[i], x[i + {half}])", size=SMALL,
           anchor="start", color=MUTED)
    for d in range(D):
        first = d < half
        c.rect(left + d * cell, bar_y, cell, 22, fill=fill_of("data" if first else "attn", 0.35), width=0.6, rx=0)
    c.text(left + half * cell / 2, bar_y + 36, f"dims 0 … {half - 1}", size=SMALL)
    c.text(left + half * cell * 1.5, bar_y + 36, f"dims {half} … {D - 1}", size=SMALL)
    for k, i in enumerate(pairs):   # an arc over each drawn pair
        a, b = left + (i + 0.5) * cell, left + (i + half + 0.5) * cell
        rise = 16 + 22 * k
        c.line((a, bar_y), (a, bar_y - rise), (b, bar_y - rise), (b, bar_y), width=1.2)
        c.text((a + b) / 2, bar_y - rise - 9, f"pair {i}", size=11)
    radius, circles_y = 62, bar_y + 140
    for k, i in enumerate(pairs):
        cx = left + radius + 20 + k * 2.1 * (radius + 40)
        theta = angles[1, i]
        c.circle(cx, circles_y, radius, fill="white", stroke=MUTED, width=1, dash=True)
        c.line((cx - radius - 6, circles_y), (cx + radius + 6, circles_y), color=MUTED, width=0.8)
        c.line((cx, circles_y - radius - 6), (cx, circles_y + radius + 6), color=MUTED, width=0.8)
        for m in range(POSITIONS):
            a = angles[m, i]
            tip = (cx + radius * math.cos(a), circles_y - radius * math.sin(a))
            c.arrow((cx, circles_y), tip, color=fill_of("data", 1.0) if m else INK)
            if m == 0 or a - angles[m - 1, i] > 0.3:
                label = (cx + (radius + 14) * math.cos(a), circles_y - (radius + 14) * math.sin(a))
                c.text(*label, f"m={m}", size=11)
        c.text(cx, circles_y + radius + 24, f"pair {i}: θ = {theta:.3g} rad", size=SMALL, mono=True)
        c.text(cx, circles_y + radius + 42, "per position", size=SMALL, color=MUTED)
    c.text(left, circles_y + radius + 72, f"at position m, pair i turns by m·θᵢ, θᵢ = {base:g} ^ (−2i / {D}); "
           f"arrows: m = 0 … {POSITIONS - 1}", size=SMALL, anchor="start")
    speeds = ", ".join(f"pair {i} by {angles[1, i]:.3g}" for i in pairs)
    alt = (f"Rotary position embeddings on a head of size {D}. The vector's {D} dimensions form {half} pairs, "
           f"dimension i with dimension i + {half}. At position m, RoPE rotates pair i by the angle m θ_i, with "
           f"θ_i = {base:g} to the power −2i/{D}. Three circles show one pair's two numbers as an arrow at positions "
           f"0 to {POSITIONS - 1}: per position, {speeds} radians, so the first pair turns fast and the last "
           f"hardly at all.")
    return c.diagram("rope", alt)


def kv_group_counts(n_head):
    """(H, a middle divisor of H, 1): plain multi-head, grouped-query and multi-query attention."""
    divisors = [g for g in range(2, n_head) if n_head % g == 0]
    return (n_head, divisors[len(divisors) // 2], 1) if divisors else (n_head, 1)


def gqa():
    gpt2 = GPTConfig.gpt2()
    H = gpt2.n_head
    c = Canvas()
    left, q_w, gap, row = 150, 26, 4, 130
    step = q_w + gap
    c.text(left + H * step / 2, 10, f"{H} query heads of {gpt2.head_dim}; below them the key/value heads they read",
           size=SMALL, color=MUTED)
    names = {H: "MHA (GPT-2)", 1: "MQA"}
    lines = []
    for r, G in enumerate(kv_group_counts(H)):
        config = GPTConfig.gpt2(n_kv_head=G)
        per_token = kv_cache_bytes(config, 1) // 4
        qkv = param_shapes(config)["h.0.attn.c_attn.weight"][0]
        y = 30 + r * row
        group = H // G
        c.text(left - 14, y + 30, names.get(G, "GQA"), anchor="end", bold=True)
        c.text(left - 14, y + 50, f"G = {G}", anchor="end", size=SMALL, mono=True, color=MUTED)
        for h in range(H):
            g = h // group
            c.box(left + h * step, y, q_w, 24, str(h), role="data" if g % 2 else "table", strength=0.5)
        for g in range(G):
            x = left + g * group * step
            w = group * step - gap
            c.box(x, y + 64, w, 26, f"kv {g}" if w > 40 else str(g), role="attn" if g % 2 else "optim",
                  strength=0.5)
            for h in range(g * group, (g + 1) * group):
                c.line((left + h * step + q_w / 2, y + 24), (x + w / 2, y + 64), width=0.9)
        right = left + H * step + 16
        c.text(right, y + 18, f"{per_token:,} values per token", anchor="start", size=SMALL)
        c.text(right, y + 38, "in the KV cache", anchor="start", size=SMALL, color=MUTED)
        c.text(right, y + 62, f"c_attn: {gpt2.n_embd} → {qkv:,}", anchor="start", size=SMALL, mono=True)
        lines.append(f"{names.get(G, 'GQA')} with {G} key/value head{'s' if G > 1 else ''}, each shared by "
                     f"{group} query head{'s' if group > 1 else ''}: {per_token:,} values per token in the cache, "
                     f"c_attn making {qkv:,} outputs")
    alt = (f"Grouped-query attention on GPT-2 Small's shape, {H} query heads of {gpt2.head_dim}. Three rows draw "
           f"the query heads above the key/value heads they read, with a line from each query head to its "
           f"key/value head: " + "; ".join(lines) + ".")
    return c.diagram("gqa", alt)
