"""Chapter 1's diagram: byte-pair encoding on a small example, merge by merge."""
from __future__ import annotations

from .. import tokenizer as tk
from .svg import MUTED, SMALL, Canvas

BPE_TEXT = "aaabdaaabac"   # the chapter's toy string
BPE_MERGES = 3
CELL = 40                  # px per byte


def bpe_steps(text, num_merges):
    """[(merge, count, ids)]: the token ids of `text` before any merge (merge and count None), then
    after each merge that lib's trainer learns, with the pair merged and how often it occurred."""
    tok = tk.BPETokenizer.train(text, vocab_size=256 + num_merges)
    ids = list(text.encode("utf-8"))
    steps = [(None, None, ids)]
    for new_id, pair in enumerate(tok.merge_list(), start=256):
        count = tk.pair_counts([ids], [1])[pair]
        ids = tk.merge_pair(ids, pair, new_id)
        steps.append(((pair, new_id), count, ids))
    return tok, steps


def bpe_merges():
    tok, steps = bpe_steps(BPE_TEXT, BPE_MERGES)
    text_of = {i: tok.decode([i]) for ids in (s[2] for s in steps) for i in ids}
    c = Canvas()
    left, row_h, gap = 270, 50, 26
    sentences = []
    for row, (merge, count, ids) in enumerate(steps):
        y = 10 + row * (row_h + gap)
        if merge is None:
            c.text(left - 14, y + row_h / 2 - 9, f"{len(ids)} bytes", anchor="end", bold=True)
            c.text(left - 14, y + row_h / 2 + 10, "one token per byte", size=SMALL, anchor="end", color=MUTED)
        else:
            (a, b), new_id = merge
            c.text(left - 14, y + row_h / 2 - 9, f"merge {row}: ({a}, {b}) → {new_id}", anchor="end", bold=True)
            c.text(left - 14, y + row_h / 2 + 10, f"“{text_of[new_id]}”, seen {count}×; {len(ids)} tokens",
                   size=SMALL, anchor="end", color=MUTED)
            times = "once" if count == 1 else f"{count} times"
            sentences.append(f"merge {row} joins {a} and {b} (“{text_of[a]}” and “{text_of[b]}”, seen {times}) "
                             f"into token {new_id}, “{text_of[new_id]}”, leaving {len(ids)} tokens")
        x = left
        for i in ids:
            width = len(tok.decode_bytes([i])) * CELL
            new = merge is not None and i == merge[1]
            c.box(x + 2, y, width - 4, row_h, text_of[i], str(i), role="attn" if new else "data",
                  emphasis=new, mono=True)
            x += width
    final = " ".join(text_of[i] if i < 256 else str(i) for i in steps[-1][2])
    alt = (f"Byte-pair encoding of “{BPE_TEXT}”, one row per step, each token a box as wide as its bytes. "
           f"The first row holds the {len(steps[0][2])} bytes; " + "; ".join(sentences)
           + f". The new tokens of each row are outlined thickly. The text ends as: {final}.")
    return c.diagram("bpe_merges", alt)
