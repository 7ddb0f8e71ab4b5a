"""Chapter 6's diagrams: prefill against decode, and what the KV cache holds per layer."""
from __future__ import annotations

from ..config import GPTConfig, kv_cache_bytes
from .svg import MUTED, SMALL, Canvas, fill_of

PROMPT = 5          # prompt tokens drawn
DECODE_STEPS = 3    # decode steps drawn
SLOT = 38           # px per cache slot


def slot(c, x, y, h, state, label=""):
    """One cache position: "old" (written earlier), "new" (written now) or "empty" (allocated)."""
    if state == "empty":
        c.rect(x + 2, y, SLOT - 4, h, fill="white", dash=True, width=1)
    else:
        c.box(x + 2, y, SLOT - 4, h, label, role="attn" if state == "new" else "data", emphasis=state == "new",
              mono=True)


def prefill_decode():
    config = GPTConfig.gpt2()
    n_ctx = config.n_ctx
    c = Canvas()
    left, row_h, gap = 230, 40, 26
    shown = PROMPT + DECODE_STEPS
    c.text(left, 12, f"one layer's cache: k and v per position, {n_ctx:,} slots allocated once",
           size=SMALL, anchor="start", color=MUTED)
    for s in range(shown):
        c.text(left + (s + 0.5) * SLOT, 34, str(s), size=11, mono=True, color=MUTED)
    c.text(left + (shown + 0.5) * SLOT, 34, "…", size=11, color=MUTED)
    c.text(left + (shown + 1.5) * SLOT, 34, f"{n_ctx - 1:,}", size=11, mono=True, color=MUTED)
    for step in range(DECODE_STEPS + 1):
        y = 48 + step * (row_h + gap)
        length = PROMPT + step                       # positions cached after this step
        new = PROMPT if step == 0 else 1             # positions this step writes
        if step == 0:
            title, inputs = "prefill", f"the {PROMPT} prompt tokens in one pass"
        else:
            title, inputs = f"decode step {step}", "one new token"
        c.text(left - 14, y + 6, title, anchor="end", bold=True)
        c.text(left - 14, y + 24, inputs, anchor="end", size=SMALL, color=MUTED)
        c.text(left - 14, y + 40, f"scores ({new}, {length})", anchor="end", size=SMALL, mono=True, color=MUTED)
        for s in range(shown + 2):
            state = "old" if s < length - new else "new" if s < length else "empty"
            slot(c, left + s * SLOT, y, row_h, state, "k v" if state != "empty" else "")
    alt = (f"Prefill against decode, seen in the KV cache of one layer of GPT-2 Small, which has a slot for each "
           f"of its {n_ctx:,} positions, allocated once. Prefill runs the {PROMPT} prompt tokens through the model "
           f"in one pass: it writes the keys and values of positions 0 to {PROMPT - 1} (thick outlines) and computes "
           f"a {PROMPT} by {PROMPT} score matrix. Each decode step then runs one new token: it writes one more "
           f"slot and computes one row of scores against every cached position, 1 by {PROMPT + 1}, then 1 by "
           f"{PROMPT + 2}, and so on; the slots not yet written are dashed.")
    return c.diagram("prefill_decode", alt)


def kv_cache():
    config = GPTConfig.gpt2()
    L, G, D, n_ctx = config.n_layer, config.kv_heads, config.head_dim, config.n_ctx
    filled = n_ctx * 3 // 8                          # positions drawn as cached
    per_token = kv_cache_bytes(config, 1) // 4       # float32 values
    full = kv_cache_bytes(config, n_ctx)
    c = Canvas()
    left, bar, row_h = 80, 250, 20
    for k, name in enumerate(("K", "V")):
        x = left + k * (bar + 30)
        c.text(x + bar / 2, 12, f"{name}[layer]  (B, {G}, {n_ctx:,}, {D})", size=SMALL, mono=True, bold=True)
    for layer in range(L):
        y = 28 + layer * row_h
        c.text(left - 10, y + row_h / 2 - 1, f"layer {layer}", size=SMALL, anchor="end")
        for k in range(2):
            x = left + k * (bar + 30)
            cut = bar * filled / n_ctx
            c.rect(x, y + 2, bar, row_h - 4, fill="white", dash=True, width=0.8, rx=0)
            c.rect(x, y + 2, cut, row_h - 4, fill=fill_of("data", 0.5), width=0.8, rx=0)
            c.rect(x + cut, y + 2, 5, row_h - 4, fill=fill_of("attn", 1.0), width=0.8, rx=0)
    bottom = 28 + L * row_h
    cut = left + bar * filled / n_ctx
    c.text(left, bottom + 14, f"0 … t−1: cached", size=SMALL, anchor="start", color=MUTED)
    c.arrow((cut + 40, bottom + 30), (cut + 3, bottom + 2))
    c.text(cut + 44, bottom + 32, "slot t: the next token's k and v, in every layer", size=SMALL, anchor="start")
    c.text(left + bar - 4, bottom + 14, f"… {n_ctx - 1:,}: empty", size=SMALL, anchor="end", color=MUTED)
    lines = [f"per token: 2 (K and V) × {L} layers × {G} heads × {D} = {per_token:,} values, "
             f"{per_token * 4:,} bytes in float32",
             f"full context, {n_ctx:,} tokens: {full:,} bytes ({full / 1e6:.1f} MB) per sequence"]
    for i, line in enumerate(lines):
        c.text(left - 60, bottom + 64 + 20 * i, line, size=SMALL, anchor="start")
    alt = (f"What GPT-2 Small's KV cache holds. Each of its {L} layers keeps a key array K and a value array V of "
           f"shape (B, {G}, {n_ctx:,}, {D}): {G} heads of {D} numbers for each of {n_ctx:,} positions, allocated "
           f"at the start. The first t positions are filled; the next token writes slot t in every layer. Per "
           f"token that is 2 × {L} × {G} × {D} = {per_token:,} values, {per_token * 4:,} bytes in float32; the "
           f"full context of {n_ctx:,} tokens takes {full:,} bytes ({full / 1e6:.1f} MB) per sequence.")
    return c.diagram("kv_cache", alt)
