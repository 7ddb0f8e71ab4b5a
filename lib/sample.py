"""`python -m lib.sample MODEL [options]`: text from a trained or published GPT-2.

MODEL is a folder: an output folder of `python -m lib.train` (its newest checkpoint is used),
one checkpoint folder or a folder written by `model.save()`, or a Hugging Face GPT-2 folder
(`config.json` + `model.safetensors`, as `save_pretrained` writes or as published).
The tokenizer follows the model's vocabulary: 256 ids are UTF-8 bytes, 50,257 are GPT-2's BPE.

The text (prompt and continuation) goes to stdout; notes (a cropped prompt, cache refills,
speed) go to stderr. With `--json` the last line of stdout is one JSON object: ids (prompt
and new), text, tokens_per_s, and the counts behind them. `--help` lists every option.
"""
from __future__ import annotations

import argparse
import codecs
import importlib.util
import json
import sys
import time
from pathlib import Path

from .config import kv_cache_bytes
from .sampling import Sampling
from .scale import device
from .twins import TWINS, as_model_ids, default_twin, twin_module


def build_parser():
    p = argparse.ArgumentParser(prog="python -m lib.sample", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="lib.train output folder, checkpoint / model.save() folder, or Hugging Face GPT-2 folder")
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline); it may hold <|endoftext|>")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    p.add_argument("--top-k", type=int, help="keep the k most likely tokens (default: all)")
    p.add_argument("--top-p", type=float, help="keep the most likely tokens holding this probability (default: all)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="1: none; 1.1 is a common choice")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--stop-token", type=int, help="stop after this token id (e.g. 50256, GPT-2's <|endoftext|>)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole window for every token")
    p.add_argument("--stream", action="store_true", help="print each token as it comes")
    p.add_argument("--json", action="store_true", help="end with one JSON line: ids, text, tokens_per_s, ...")
    p.add_argument("--twin", choices=TWINS, help="default: torch when installed, else numpy")
    p.add_argument("--device", help="torch twin: cpu, cuda, ... (default: cuda if available, else cpu)")
    return p


def load_model(folder, twin):
    """The model in `folder`, whichever of the three kinds it is, as `twin`'s GPT."""
    from .checkpoint import POINTER, latest_checkpoint

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: expected a lib.train output folder, a "
                                f"checkpoint folder or a Hugging Face GPT-2 folder")
    if (folder / POINTER).is_file():
        folder = latest_checkpoint(folder)
    GPT = twin_module(twin).GPT
    config_file = folder / "config.json"
    is_ours = config_file.is_file() and json.loads(config_file.read_text()).get("format") == "gpt2-course"
    return (GPT.load(folder) if is_ours else GPT.from_pretrained(folder)), folder


def tokenizer_for(vocab_size):
    """UTF-8 bytes for 256 ids, GPT-2's BPE for 50,257 (tiktoken's when installed: faster)."""
    from .tokenizer import BPETokenizer, gpt2_tiktoken, gpt2_tokenizer

    if vocab_size == 256:
        return BPETokenizer()
    if vocab_size == 50257:
        return gpt2_tiktoken() if importlib.util.find_spec("tiktoken") else gpt2_tokenizer()
    raise ValueError(f"no tokenizer for a vocabulary of {vocab_size} ids: expected 256 (bytes) or 50257 (GPT-2)")


def note(text):
    print(text, file=sys.stderr, flush=True)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    twin = args.twin or default_twin()
    try:
        if args.device and twin != "torch":
            raise ValueError(f"--device {args.device} applies to the torch twin only (this run uses the "
                             f"{twin} twin)")
        Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty)  # checks them
        if args.max_new_tokens < 0:
            raise ValueError(f"--max-new-tokens {args.max_new_tokens}: expected 0 or more")
        model, folder = load_model(args.model, twin)
        config = model.config
        tokenizer = tokenizer_for(config.vocab_size)
    except (OSError, ValueError) as e:                       # no such folder, no weights, a bad setting
        parser.error(str(e))
    prompt = tokenizer.encode(args.prompt, allowed_special="all")   # list of T ids
    if twin == "torch":
        model.to(args.device or device())
    idx = as_model_ids(model, [prompt])                              # (1, T)
    cache_bytes = 0 if args.no_cache else kv_cache_bytes(config, config.n_ctx, model.wte.weight.dtype)
    note(f"{folder} ({twin} twin): {config.n_layer} layers, n_ctx {config.n_ctx}, vocab {config.vocab_size}; "
         + ("no cache" if args.no_cache else f"KV cache of {cache_bytes / 2**20:.1f} MiB"))

    start = time.perf_counter()
    stream = model.stream(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                          top_p=args.top_p, repetition_penalty=args.repetition_penalty,
                          use_cache=not args.no_cache, seed=args.seed, stop_token=args.stop_token)
    if stream.cropped:
        note(f"the prompt's {len(prompt)} tokens are more than the context: cropped to the last "
             f"{config.n_ctx} ({stream.cropped} dropped)")
    text_out = codecs.getincrementaldecoder("utf-8")(errors="replace")  # bytes may split characters
    if args.stream:
        print(text_out.decode(tokenizer.decode_bytes(prompt)), end="", flush=True)
    new = []
    for token in stream:
        new.append(int(token[0]))
        if args.stream:
            print(text_out.decode(tokenizer.decode_bytes(new[-1:])), end="", flush=True)
    seconds = time.perf_counter() - start
    tokens_per_s = len(new) / seconds

    text = tokenizer.decode(prompt + new)
    print(text_out.decode(b"", final=True) if args.stream else text, flush=True)
    if stream.refills:
        note(f"the context filled up: the cache was refilled {stream.refills} time(s)")
    note(f"{len(new)} new tokens in {seconds:.2f} s (prefill included): {tokens_per_s:.1f} tokens/s")
    if args.json:
        print(json.dumps({"ids": prompt + new, "text": text, "tokens_per_s": tokens_per_s,
                          "prompt_tokens": len(prompt), "new_tokens": len(new), "seconds": seconds,
                          "cropped": stream.cropped, "refills": stream.refills, "twin": twin,
                          "use_cache": not args.no_cache, "kv_cache_bytes": cache_bytes}))

if __name__ == "__main__":
    main()
