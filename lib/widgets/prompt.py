"""A prompt as the widgets read it: encoded and cropped to the context, and its tokens as
readable labels. (The model runs on it through `lib.twins.forward`, with either twin.)"""
from __future__ import annotations

import numpy as np


class PromptError(ValueError):
    """A prompt the widgets cannot use; its message is shown in a live widget."""


def encode_prompt(tokenizer, prompt, n_ctx):
    """prompt text -> (ids (1, T) with T <= n_ctx, note). A prompt longer than the context is
    cropped to its last n_ctx tokens, as generation does; the note says so ('' otherwise)."""
    ids = tokenizer.encode(prompt, allowed_special="all")
    if not ids:
        raise PromptError("The prompt is empty: type at least one character, so the model has a token to read.")
    note = ""
    if len(ids) > n_ctx:
        note = (f"The prompt is {len(ids)} tokens, longer than the model's context of {n_ctx}: "
                f"like generation, the model sees only its last {n_ctx} tokens.")
    return np.array([ids[-n_ctx:]]), note                    # (1, T)


def token_label(tokenizer, token_id):
    """A token as readable text: spaces, newlines and tabs made visible; bytes that are not
    printable UTF-8 text on their own (control bytes, a piece of a multi-byte character)
    written as \\xNN."""
    raw = tokenizer.decode_bytes([int(token_id)])
    text = raw.decode("utf-8", errors="replace")
    text = text.replace(" ", "\u2423").replace("\n", "\u21b5").replace("\t", "\u21e5")
    if "\ufffd" in text or not text.isprintable():
        return "".join(f"\\x{b:02x}" for b in raw)
    return text
