"""Chapter 6b's diagram: one multiple-choice item scored by likelihood, choice by choice."""
from __future__ import annotations

from .. import evaluate as ev
from .svg import MUTED, SMALL, Canvas


def _shown(text: str, limit: int) -> str:
    """A line as the diagram prints it: newlines as ⏎, cut to `limit` characters."""
    text = text.replace("\n", "⏎")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def likelihood_scoring():
    item = ev.next_line_items(1)[0]
    choices, label = item["choices"], item["label"]
    K = len(choices)
    lengths = [len(choice.encode("utf-8")) for choice in choices]       # byte tokens per choice
    neutral = ev.NEXT_LINE_NEUTRAL.replace("\n", "⏎")
    c = Canvas()
    c.text(10, 10, f"one item of the next-line benchmark: a context and K = {K} choices", size=SMALL,
           anchor="start", color=MUTED)
    c.box(10, 24, 640, 40, _shown(item["context"], 70), "context", role="data", mono=True)
    choice_w, score_w, top, row_h, gap = 270, 230, 100, 38, 8
    c.arrow((10 + choice_w / 2, 64), (10 + choice_w / 2, top - 2))
    for k, choice in enumerate(choices):
        y = top + k * (row_h + gap)
        right = k == label
        c.box(10, y, choice_w, row_h, _shown(choice, 34), f"choice {k}: {lengths[k]} tokens", role="table",
              mono=True, emphasis=right)
        c.arrow((10 + choice_w, y + row_h / 2), (10 + choice_w + 40, y + row_h / 2))
        c.box(10 + choice_w + 42, y, score_w, row_h, f"log p(choice {k} | context)",
              f"summed over its {lengths[k]} tokens", role="head", strength=0.2)
        if right:
            c.text(10 + choice_w + 42 + score_w + 10, y + row_h / 2, "the right one", size=SMALL,
                   anchor="start", color=MUTED)
    bottom = top + K * (row_h + gap)
    c.box(10, bottom + 6, 640, 56, "pick the choice with the highest score: sum, mean per token, or gain",
          f"gain = log p(choice | context) − log p(choice | {neutral}); chance = 1/{K}", role="attn",
          strength=0.2)
    c.arrow((10 + choice_w + 42 + score_w / 2, bottom - gap), (10 + choice_w + 42 + score_w / 2, bottom + 4))
    c.text(10, bottom + 84, f"one forward pass scores them all: {2 * K} rows, each choice after the context",
           size=SMALL, anchor="start", color=MUTED)
    c.text(10, bottom + 102, f"and after {neutral}, padded on the right and masked", size=SMALL, anchor="start",
           color=MUTED)
    alt = (f"Scoring a multiple-choice item by likelihood, as lib.evaluate does for the next-line benchmark. "
           f"The item's context is the line {item['context']!r}; its {K} choices are the lines "
           + "; ".join(f"{k}: {choice!r} ({lengths[k]} byte tokens)" for k, choice in enumerate(choices))
           + f". Choice {label} is the line that follows, outlined thickly. For each choice the model gives "
           f"log p(choice | context), the sum of its tokens' log-probabilities after the context; the mean "
           f"divides by the number of tokens, and the gain subtracts log p(choice | neutral text), the "
           f"same choice after a newline. The pick is the choice with the highest score; picking at random "
           f"is right 1 time in {K}. One forward pass of {2 * K} rows, padded on the right and masked, "
           f"scores every choice after the context and after the neutral text.")
    return c.diagram("likelihood_scoring", alt)
