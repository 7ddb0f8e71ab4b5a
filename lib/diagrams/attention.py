"""Chapter 3's diagrams: one head's causal attention, and the split into heads and back."""
from __future__ import annotations

from ..config import GPTConfig
from .svg import INK, MUTED, SMALL, Canvas, fill_of

T = 6          # positions drawn
CELL = 28      # px per score


def grid(c, x, y, role, future_label, masked=lambda t, s: s > t):
    """A (T, T) grid: query position t down, key position s across; the cells that
    `masked(t, s)` removes (by default those above the diagonal, s > t, the future) hatched and
    labelled `future_label`."""
    for t in range(T):
        for s in range(T):
            hidden = masked(t, s)
            c.rect(x + s * CELL, y + t * CELL, CELL, CELL, fill=fill_of(role, 0.35), hatch=hidden, width=0.8, rx=0)
            if hidden:
                c.text(x + (s + 0.5) * CELL, y + (t + 0.5) * CELL, future_label, size=11)


def matrix(c, x, y, w, h, name, shape, role, numbered_rows=False):
    """A named matrix drawn as a box with its shape under it; `numbered_rows` labels its rows t."""
    c.rect(x, y, w, h, fill=fill_of(role, 0.35))
    c.text(x + w / 2, y + h / 2, name, bold=True)
    c.text(x + w / 2, y + h + 14, shape, size=SMALL, mono=True, color=MUTED)
    if numbered_rows:
        for t in range(T):
            c.text(x - 8, y + (t + 0.5) * CELL, str(t), size=11, anchor="end", color=MUTED)


def causal_attention():
    config = GPTConfig.gpt2()
    D = config.head_dim
    c = Canvas()
    top = 106                             # the grids' top edge
    side = T * CELL
    c.text(14, 14, f"one head of GPT-2 Small: head size D = {D}, T = {T} positions", size=SMALL, anchor="start",
           color=MUTED)
    matrix(c, 40, top, 50, side, "Q", f"(T, {D})", "data", numbered_rows=True)
    c.text(24, top - 12, "t", size=SMALL, italic=True, color=MUTED)
    scores_x = 110
    c.rect(scores_x, 44, side, 50, fill=fill_of("data", 0.35))
    c.text(scores_x + side / 2, 69, "Kᵀ", bold=True)
    c.text(scores_x + side + 8, 69, f"({D}, T)", size=SMALL, mono=True, anchor="start", color=MUTED)
    for s in range(T):
        c.text(scores_x + (s + 0.5) * CELL, 34, str(s), size=11, color=MUTED)
    c.text(scores_x - 10, 34, "s", size=SMALL, italic=True, color=MUTED)
    grid(c, scores_x, top, "data", "−∞")
    c.text(scores_x + side / 2, top + side + 14, f"S = QKᵀ / √{D}", size=SMALL, mono=True)
    c.text(scores_x + side / 2, top + side + 32, "−∞ where s > t", size=SMALL, color=MUTED)
    weights_x = scores_x + side + 80
    c.arrow((scores_x + side + 8, top + side / 2), (weights_x - 8, top + side / 2))
    c.text((scores_x + side + weights_x) / 2, top + side / 2 - 14, "softmax", size=SMALL)
    c.text((scores_x + side + weights_x) / 2, top + side / 2 + 14, "each row", size=SMALL, color=MUTED)
    grid(c, weights_x, top, "attn", "0")
    c.text(weights_x + side / 2, top + side + 14, "weights P", size=SMALL)
    c.text(weights_x + side / 2, top + side + 32, "each row sums to 1", size=SMALL, color=MUTED)
    v_x = weights_x + side + 34
    c.text(v_x - 17, top + side / 2, "×", size=18)
    matrix(c, v_x, top, 50, side, "V", f"(T, {D})", "data")
    out_x = v_x + 50 + 34
    c.text(out_x - 17, top + side / 2, "=", size=18)
    matrix(c, out_x, top, 56, side, "out", f"(T, {D})", "attn")
    alt = (f"Causal attention in one head of GPT-2 Small, head size {D}, drawn for {T} positions. The queries Q "
           f"(T by {D}), one row per query position t, times the transposed keys K (one column per key position s) "
           f"give the T by T score matrix S = Q K-transpose / √{D}. Every score above the diagonal, where the key "
           f"comes after the query (s > t), is set to minus infinity (hatched). A softmax over each row turns the "
           f"scores into weights that sum to 1, with weight 0 above the diagonal (hatched); the weights times the "
           f"values V (T by {D}) give the head's output (T by {D}).")
    return c.diagram("causal_attention", alt)


def multi_head():
    config = GPTConfig.gpt2()
    C, H, D = config.n_embd, config.n_head, config.head_dim
    c = Canvas()
    left, seg, rows = 150, max(24, 480 // H), 4
    width = H * seg
    row_h = rows * 14

    def label(y, name, shape):
        c.text(left - 12, y + row_h / 2 - 9, name, anchor="end", bold=True)
        c.text(left - 12, y + row_h / 2 + 9, shape, anchor="end", size=SMALL, mono=True, color=MUTED)

    def stream(y, role, name, shape):
        """(B, T, C) for one sequence: T rows, the C columns in H groups of D, numbered by head."""
        for h in range(H):
            c.rect(left + h * seg, y, seg, row_h, fill=fill_of(role, 0.45 if h % 2 else 0.2), width=0.8, rx=0)
            c.text(left + (h + 0.5) * seg, y + row_h / 2, str(h), size=11)
        label(y, name, shape)

    def heads(y, role, name, shape):
        """(B, H, T, D) for one sequence: H separate (T, D) blocks."""
        for h in range(H):
            c.rect(left + h * seg + 3, y, seg - 6, row_h, fill=fill_of(role, 0.35), width=1)
            c.text(left + (h + 0.5) * seg, y + row_h / 2, str(h), size=11)
        label(y, name, shape)

    def step(y, *lines):
        c.arrow((left + width / 2, y), (left + width / 2, y + 40))
        for i, line in enumerate(lines):
            c.text(left + width / 2 + 12, y + 11 + 18 * i, line, size=SMALL, anchor="start",
                   color=MUTED if i else INK)

    c.text(left + width / 2, 14, f"{C} columns = {H} heads × {D}", size=SMALL)
    c.line((left, 26), (left, 32), (left + width, 32), (left + width, 26), width=1)
    ys = [40 + k * (row_h + 64) for k in range(4)]
    stream(ys[0], "data", "q (or k, v)", f"(B, T, {C})")
    step(ys[0] + row_h + 8, f"reshape to (B, T, {H}, {D}), transpose", f"each head gets its own {D} columns")
    heads(ys[1], "data", f"{H} heads", f"(B, {H}, T, {D})")
    step(ys[1] + row_h + 8, "attention, each (sequence, head) on its own", "one head's attention, run for all")
    heads(ys[2], "attn", "outputs", f"(B, {H}, T, {D})")
    step(ys[2] + row_h + 8, "transpose back, reshape", "the heads side by side again")
    stream(ys[3], "attn", "merged", f"(B, T, {C})")
    alt = (f"Splitting GPT-2 Small's attention into heads and merging them back. A (B, T, {C}) array of queries "
           f"(keys and values alike) has its {C} columns cut into {H} groups of {D}, one per head; a reshape to "
           f"(B, T, {H}, {D}) and a transpose to (B, {H}, T, {D}) make {H} separate (T, {D}) problems. Each head "
           f"attends on its own, then a transpose back to (B, T, {H}, {D}) and a reshape give (B, T, {C}), the "
           f"heads' outputs side by side in the same columns.")
    return c.diagram("multi_head", alt)
