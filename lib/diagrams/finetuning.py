"""Chapter 7's diagram: GPT-1's input format for classification, and the head on the last token."""
from __future__ import annotations

from .. import finetune as ft
from .svg import MUTED, SMALL, Canvas


def gpt1_classification():
    start, delim, classify = ft.special_ids()
    passage = ft.TASK["passage_len"]
    T = passage + 2
    config = ft.PRETRAIN_CONFIG
    C, K = config.n_embd, len(ft.LABELS)
    lm_weight = ft.FINETUNE.lm_weight
    c = Canvas()
    special_w, text_w, gap, top = 96, 160, 6, 30
    parts = [("[start]", f"id {start}", special_w, "head"),
             ("passage", f"{passage} bytes, as written or shuffled", 2 * text_w + special_w + 2 * gap, "data"),
             ("[classify]", f"id {classify}", special_w, "head")]
    c.text(10, 10, f"one example: T = {T} token ids", size=SMALL, anchor="start", color=MUTED)
    x, centres = 10, []
    for name, note, w, role in parts:
        c.box(x, top, w, 46, name, note, role=role, mono=name.startswith("["), strength=0.25 if role == "head" else 0.3)
        centres.append(x + w / 2)
        x += w + gap
    right = x - gap
    model_y = top + 100
    for cx in centres:
        c.arrow((cx, top + 46), (cx, model_y - 2))
    c.box(10, model_y, right - 10, 54, f"the pre-trained model: {config.n_layer} blocks, C = {C}",
          f"3 new rows in wte for the markers; hidden states (B, {T}, {C})", role="plain")
    heads_y = model_y + 110
    last = centres[-1]
    lm_right = last - special_w / 2 - gap
    for cx in centres[:-1]:
        c.arrow((cx, model_y + 54), (cx, heads_y - 2))
    c.box(10, heads_y, lm_right - 10, 50, "lm_head at each position but the last",
          "predicts the next byte: loss L1", role="head", strength=0.15)
    c.arrow((last, model_y + 54), (last, heads_y - 2))
    c.box(lm_right + gap, heads_y, right - lm_right - gap, 50, "classifier", f"{C} → {K}: L2", role="attn",
          emphasis=True)
    c.text(last - 6, model_y + 80, "hidden[:, -1]", size=SMALL, mono=True, anchor="end")
    c.text(10, heads_y + 72, f"loss L3 = L2 + {lm_weight} × L1;  {K} classes: {', '.join(ft.LABELS)}", size=SMALL,
           anchor="start")
    alt = (f"Fine-tuning for classification, GPT-1's way, as lib.finetune does it. One example is one sequence of "
           f"{T} token ids: a [start] marker (id {start}), a passage of {passage} bytes, as written or with its "
           f"words shuffled, and a [classify] marker (id {classify}); the markers (with [delim], id {delim}, which "
           f"joins inputs in several parts) get new rows in the token table. The pre-trained model ({config.n_layer} blocks, {C} wide) turns them "
           f"into hidden states (B, {T}, {C}). At every position but the last, the language-model head predicts "
           f"the next byte (loss L1); the hidden state of the last position, the classify token's, goes through a "
           f"linear classifier, {C} to {K} scores, one per class (loss L2), outlined thickly. Training minimises "
           f"L3 = L2 + {lm_weight} × L1. The classes: {', '.join(ft.LABELS)}.")
    return c.diagram("gpt1_classification", alt)
