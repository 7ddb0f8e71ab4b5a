"""Alpaca's instructions for GPT-2 (chapter 9's GPU branch): read, downloaded, and in its template.

A published instruction dataset in the common JSON format (records with "instruction", "input",
"output"; a JSON list or JSON lines), in Alpaca's text template for GPT-2's tokenizer: the GPU
branch of the chapter fine-tunes GPT-2 Small on it.
"""
from __future__ import annotations

import json

import numpy as np

from ..assets import cache_dir
from ..atomic import write_atomic

ALPACA_URL = "https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/main/alpaca_data.json"


def load_instructions(path):
    """[{"instruction", "input", "output"}] from a JSON list of such records or from JSON lines
    (one record a line); "input" may be missing or empty."""
    text = open(path, encoding="utf-8").read()
    try:
        records = json.loads(text) if text.lstrip().startswith("[") else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON nor JSON lines ({e.msg} at line {e.lineno})") from None
    for k, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in ("instruction", "output")):
            raise ValueError(f"{path}: record {k} needs string fields instruction and output (and optional input)")
    return [{"instruction": r["instruction"], "input": r.get("input") or "", "output": r["output"]} for r in records]


def download_alpaca():
    """Alpaca's 52,002 instructions (Taori et al. 2023), downloaded once into the cache; needs the internet."""
    import urllib.request

    path = cache_dir() / "downloads" / "alpaca_data.json"
    if not path.is_file():
        try:
            with urllib.request.urlopen(ALPACA_URL, timeout=120) as response:
                write_atomic(path, response.read())
        except OSError as e:
            raise ConnectionError(f"downloading {ALPACA_URL} failed ({e}); it needs the internet (Colab)") from None
    return path


def alpaca_prompt(record):
    """Alpaca's template: the instruction, the input when there is one, then the response header."""
    if record["input"]:
        return (f"### Instruction:\n{record['instruction']}\n\n### Input:\n{record['input']}\n\n"
                "### Response:\n")
    return f"### Instruction:\n{record['instruction']}\n\n### Response:\n"


def gpt2_pairs(records, encode, end_id, n_ctx):
    """[(prompt ids, response ids)] in Alpaca's template for a GPT-2 tokenizer (`encode`: text ->
    ids), each response ending in end_id (GPT-2's <|endoftext|>); records whose prompt and
    response do not fit n_ctx + 1 tokens are left out."""
    pairs = []
    for record in records:
        prompt = np.array(encode(alpaca_prompt(record)), np.int64)
        response = np.array([*encode(record["output"]), end_id], np.int64)
        if len(prompt) + len(response) <= n_ctx + 1:
            pairs.append((prompt, response))
    return pairs
