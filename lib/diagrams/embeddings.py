"""Chapter 2's diagram: token and position embeddings summed into the residual stream."""
from __future__ import annotations

from ..config import GPTConfig, param_counts
from .svg import MUTED, SMALL, Canvas, fill_of

T = 4                               # positions drawn
TOKEN_ROWS = (0.2, 0.64, 0.38, 0.83)  # where in wte the drawn ids' rows sit (any rows will do)


def table(c, x, y, w, h, rows, role):
    """An embedding table with the rows being read drawn as stripes; returns their centres."""
    c.rect(x, y, w, h, fill="white")
    centres = []
    for r in rows:
        c.rect(x + 1, y + r * h - 3, w - 2, 6, fill=fill_of(role, 0.7), width=0.8, rx=0)
        centres.append(y + r * h)
    return centres


def embeddings():
    config = GPTConfig.gpt2()
    counts = param_counts(config)
    V, n_ctx, C = config.vocab_size, config.n_ctx, config.n_embd
    c = Canvas()
    columns = {"tok": 175, "pos": 525}
    box_w, gap = 62, 8
    starts = {k: x - (T * box_w + (T - 1) * gap) / 2 for k, x in columns.items()}
    c.text(columns["tok"], 14, "token ids idx  (B, T)", bold=True)
    c.text(columns["pos"], 14, "positions 0, 1, …, T−1", bold=True)
    for t in range(T):
        c.box(starts["tok"] + t * (box_w + gap), 32, box_w, 32, f"idx[{t}]", role="plain", mono=True, strength=0.15)
        c.box(starts["pos"] + t * (box_w + gap), 32, box_w, 32, str(t), role="plain", mono=True, strength=0.15)
    # the tables: ids pick scattered rows of wte, positions the first T rows of wpe
    top = 110
    wte_rows = table(c, columns["tok"] - 110, top, 220, 150, TOKEN_ROWS, "table")
    wpe_rows = table(c, columns["pos"] - 110, top, 220, 90, [(4 + 9 * t) / 90 for t in range(T)], "table")
    for key, rows in (("tok", wte_rows), ("pos", wpe_rows)):
        for t, y in enumerate(rows):
            x = starts[key] + t * (box_w + gap) + box_w / 2
            c.arrow((x, 64), (x, y - 4))
    c.text(columns["tok"], top + 168, f"wte: {V:,} × {C}", mono=True, bold=True)
    c.text(columns["tok"], top + 188, f"one row per token id; {counts['wte']:,} parameters", size=SMALL, color=MUTED)
    c.text(columns["pos"], top + 108, f"wpe: {n_ctx:,} × {C}", mono=True, bold=True)
    c.text(columns["pos"], top + 128, f"one row per position; {counts['wpe']:,} parameters", size=SMALL,
           color=MUTED)
    # the rows read, summed
    y = top + 246
    c.arrow((columns["tok"], top + 200), (columns["tok"], y - 2))
    c.arrow((columns["pos"], top + 140), (columns["pos"], y - 2))
    c.box(columns["tok"] - 100, y, 200, 46, f"wte[idx]  (B, T, {C})", "the token's vector", role="table", mono=True)
    c.box(columns["pos"] - 100, y, 200, 46, f"wpe[0:T]  (T, {C})", "the same for every sequence",
          role="table", mono=True)
    middle, plus_y = (columns["tok"] + columns["pos"]) / 2, y + 90
    c.arrow((columns["tok"], y + 46), (columns["tok"], plus_y), (middle - 13, plus_y))
    c.arrow((columns["pos"], y + 46), (columns["pos"], plus_y), (middle + 13, plus_y))
    c.plus(middle, plus_y)
    c.arrow((middle, plus_y + 11), (middle, plus_y + 40))
    c.box(middle - 170, plus_y + 42, 340, 50, f"x  (B, T, {C})",
          "the residual stream, into block 1", role="data", mono=True, emphasis=True)
    alt = (f"Token and position embeddings of GPT-2 Small. {T} token ids, idx[0] to idx[{T - 1}], each select a row "
           f"of the token table wte ({V:,} rows of {C}, {counts['wte']:,} parameters); the positions 0 to {T - 1} "
           f"select the first {T} rows of the position table wpe ({n_ctx:,} rows of {C}, {counts['wpe']:,} "
           f"parameters). The rows read, shaped (B, T, {C}) and (T, {C}), are added, the positions broadcast over "
           f"the batch, into x of shape (B, T, {C}): the residual stream that enters the first block.")
    return c.diagram("embeddings", alt)
