"""Chapter 4's diagrams: the pre-norm block, and the whole model with its parameter count."""
from __future__ import annotations

import math

from ..config import GPTConfig, param_counts, param_shapes
from .svg import INK, MUTED, SMALL, Canvas, fill_of


def sublayer_counts(config):
    """{"ln_1": n, "attn": n, "ln_2": n, "mlp": n}: the parameters of one block's parts."""
    shapes = param_shapes(config)
    return {part: sum(math.prod(s) for name, s in shapes.items() if name.startswith(f"h.0.{part}."))
            for part in ("ln_1", "attn", "ln_2", "mlp")}


def block():
    config = GPTConfig.gpt2()
    C, H, D, F = config.n_embd, config.n_head, config.head_dim, config.hidden_dim
    counts = sublayer_counts(config)
    per_block = param_counts(config)["per_block"]
    c = Canvas()
    stream, bx, bw, px = 90, 170, 330, 530      # the stream's x; the boxes' left and width; the counts' x
    c.text(stream, 16, f"x  (B, T, {C})", mono=True, bold=True)
    c.text(px, 16, "parameters", anchor="start", bold=True)
    branches = [("ln_1", ("ln_1: LayerNorm", f"gain and bias, {C} each"), "norm"),
                ("attn", ("attn: causal self-attention", f"c_attn {C} → {3 * C:,} (q, k, v), {H} heads of {D}",
                          f"c_proj {C} → {C}"), "attn"),
                ("ln_2", ("ln_2: LayerNorm", f"gain and bias, {C} each"), "norm"),
                ("mlp", ("mlp", f"c_fc {C} → {F:,}, GELU", f"c_proj {F:,} → {C}"), "mlp")]
    y = 40
    for i in range(2):
        (norm, norm_lines, norm_role), (layer, layer_lines, layer_role) = branches[2 * i:2 * i + 2]
        c.circle(stream, y + 20, 3.5, fill=INK)
        c.arrow((stream, y + 20), (bx - 2, y + 20))
        c.box(bx, y, bw, 40, *norm_lines, role=norm_role)
        c.arrow((bx + bw / 2, y + 40), (bx + bw / 2, y + 58))
        c.box(bx, y + 60, bw, 66, *layer_lines, role=layer_role)
        plus_y = y + 156
        c.arrow((bx + bw / 2, y + 126), (bx + bw / 2, plus_y), (stream + 13, plus_y))
        c.plus(stream, plus_y)
        c.text(px, y + 20, f"{counts[norm]:,}", anchor="start", mono=True)
        c.text(px, y + 93, f"{counts[layer]:,}", anchor="start", mono=True)
        c.line((stream, y - 19 if i else 28), (stream, plus_y - 11), width=2.2)
        y = plus_y + 30
    c.arrow((stream, y - 19), (stream, y + 6))
    c.text(stream, y + 20, f"x  (B, T, {C})", mono=True, bold=True)
    c.text(stream, y + 40, "to the next block", size=SMALL, color=MUTED)
    c.line((px - 6, y - 6), (px + 170, y - 6), width=1)
    c.text(px, y + 10, f"{per_block:,}", anchor="start", mono=True, bold=True)
    c.text(px, y + 30, f"per block, × {config.n_layer}", anchor="start", size=SMALL, color=MUTED)
    alt = (f"A pre-norm block of GPT-2 Small. The residual stream x, shaped (B, T, {C}), runs straight down and is "
           f"only added to. The first branch takes x through ln_1 (LayerNorm, {counts['ln_1']:,} parameters) and "
           f"causal self-attention ({H} heads of {D}: c_attn {C} to {3 * C:,}, c_proj {C} to {C}; "
           f"{counts['attn']:,} parameters) and adds the result back into x. The second branch takes the new x "
           f"through ln_2 ({counts['ln_2']:,}) and the MLP (c_fc {C} to {F:,}, GELU, c_proj {F:,} to {C}; "
           f"{counts['mlp']:,} parameters) and adds it back too. One block holds {per_block:,} parameters; "
           f"the model has {config.n_layer} of them.")
    return c.diagram("block", alt)


def model():
    config = GPTConfig.gpt2()
    V, n_ctx, C, L = config.vocab_size, config.n_ctx, config.n_embd, config.n_layer
    counts = param_counts(config)
    total = counts["total"]

    def share(n):
        return f"{100 * n / total:.1f}%"

    c = Canvas()
    cx, bw, px = 250, 300, 424           # the stack's centre and box width; the counts' x
    x0 = cx - bw / 2
    c.text(px, 14, "parameters", anchor="start", bold=True)
    rows = [
        (10, 36, ("idx  (B, T)",), "plain", None),
        (76, 50, ("embeddings: wte[idx] + wpe[0:T]", "chapter 2"), "table",
         [f"wte {counts['wte']:,} ({share(counts['wte'])})", f"wpe {counts['wpe']:,} ({share(counts['wpe'])})"]),
        (166, 56, (f"{L} blocks", "attention and MLP, each a residual branch"), "plain",
         [f"{L} × {counts['per_block']:,}", f"= {counts['blocks']:,} ({share(counts['blocks'])})"]),
        (262, 40, ("ln_f: final LayerNorm",), "norm", [f"{counts['ln_f']:,}"]),
        (342, 50, ("lm_head: x · wteᵀ", "tied: wte read a second time"), "head", ["0 (tied to wte)"]),
        (432, 36, (f"logits  (B, T, {V:,})",), "data", None),
    ]
    for i, (y, h, lines, role, notes) in enumerate(rows):
        if i == 2:   # the stack of blocks, drawn as cards behind one another
            for k in (2, 1):
                c.rect(x0 + 6 * k, y - 6 * k, bw, h, fill=fill_of(role, 0.3))
        c.box(x0, y, bw, h, *lines, role=role, mono=i in (0, 5))
        for k, note in enumerate(notes or []):
            c.text(px, y + h / 2 + 20 * (k - (len(notes) - 1) / 2), note, anchor="start", mono=True, size=SMALL)
        if i:
            previous_bottom = rows[i - 1][0] + rows[i - 1][1]
            c.arrow((cx, previous_bottom), (cx, y - (14 if i == 2 else 2)))
    c.text(cx + 10, 146, f"x  (B, T, {C})", anchor="start", size=SMALL, mono=True, color=MUTED)
    c.line((x0, 101), (x0 - 40, 101), (x0 - 40, 367), (x0 - 2, 367), dash=True, width=1.6, arrow=True)
    c.text(x0 - 46, 234, "same wte", size=SMALL, anchor="end", color=MUTED)
    c.text(x0 - 46, 252, f"{V:,} × {C}", size=SMALL, anchor="end", mono=True, color=MUTED)
    c.line((px - 6, 462), (px + 200, 462), width=1)
    c.text(px, 478, f"total {total:,}", anchor="start", mono=True, bold=True)
    # where the parameters sit, as one bar
    bar_y, bar_w, bar_x = 520, 600, 20
    c.text(bar_x, bar_y - 14, f"all {total:,} parameters, to scale", size=SMALL, anchor="start", color=MUTED)
    x = bar_x
    parts = [("wte", counts["wte"], "table", False), ("wpe", counts["wpe"], "table", True),
             ("blocks", counts["blocks"], "plain", False), ("ln_f", counts["ln_f"], "norm", False)]
    for name, n, role, hatch in parts:
        w = bar_w * n / total
        c.rect(x, bar_y, w, 30, fill=fill_of(role, 0.5), hatch=hatch, width=0.8, rx=0)
        if w > 60:
            c.text(x + w / 2, bar_y + 15, f"{name} {share(n)}", size=SMALL)
        x += w
    wpe_x = bar_x + bar_w * (counts["wte"] + counts["wpe"] / 2) / total
    c.line((wpe_x, bar_y + 30), (wpe_x, bar_y + 44), width=1)
    c.text(wpe_x, bar_y + 54, f"wpe {share(counts['wpe'])} (hatched); ln_f {counts['ln_f']:,}, too thin to see",
           size=SMALL, anchor="start", color=MUTED)
    alt = (f"GPT-2 Small from token ids to logits. Ids (B, T) enter the embeddings, wte[idx] + wpe[0:T] "
           f"(wte {counts['wte']:,} parameters, {share(counts['wte'])} of all; wpe {counts['wpe']:,}, "
           f"{share(counts['wpe'])}), giving x of shape (B, T, {C}); then {L} blocks of {counts['per_block']:,} "
           f"parameters each ({counts['blocks']:,}, {share(counts['blocks'])}); the final LayerNorm ln_f "
           f"({counts['ln_f']:,}); and the head, which multiplies by the transpose of the same token table wte "
           f"(tied, a dashed line back to the embeddings; no parameters of its own), giving logits of shape "
           f"(B, T, {V:,}). Total: {total:,} parameters, also drawn as one bar to scale.")
    return c.diagram("model", alt)
