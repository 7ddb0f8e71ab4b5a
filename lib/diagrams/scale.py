"""Chapter 11's diagram: the three attention masks, bidirectional, causal and prefix."""
from __future__ import annotations

from .attention import CELL, T, grid
from .svg import MUTED, SMALL, Canvas

PREFIX = 3     # positions of the prefix in the prefix mask


def attention_masks():
    c = Canvas()
    side, top = T * CELL, 40
    masks = [("bidirectional (BERT)", "reads every position", lambda t, s: False),
             ("causal (GPT)", "reads the past and itself", lambda t, s: s > t),
             (f"prefix of {PREFIX}", "the prefix both ways", lambda t, s: s > t and s >= PREFIX)]
    for k, (title, note, masked) in enumerate(masks):
        x = 30 + k * (side + 60)
        c.text(x + side / 2, top - 16, title, size=SMALL, bold=True)
        grid(c, x, top, "attn", "−∞", masked)
        c.text(x + side / 2, top + side + 16, note, size=SMALL, color=MUTED)
    c.text(30, top + side + 38, "query position t down, key position s across; hatched: masked",
           size=SMALL, anchor="start", color=MUTED)
    alt = (f"Three attention masks drawn for {T} positions, query position t down and key position s across, "
           f"the cells a query cannot read hatched. Bidirectional, as in BERT: no cell hatched, every position "
           f"reads every other. Causal, as in GPT: every cell above the diagonal (s > t) hatched, each position "
           f"reads itself and the positions before it. Prefix, with a prefix of {PREFIX} positions: the first "
           f"{PREFIX} positions read each other both ways, and every later position reads the prefix and the "
           f"positions up to itself, the cells above the diagonal right of the prefix hatched.")
    return c.diagram("attention_masks", alt)
