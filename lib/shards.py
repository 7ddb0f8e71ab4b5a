"""GPT-2-token shards: a text dataset as token files that training memory-maps.

    python -m lib.shards OUT --files a.txt texts/ ...          # text files: one document per file
    python -m lib.shards OUT --hf HuggingFaceFW/fineweb-edu --hf-config sample-10BT --max-tokens 100000000

Documents: each becomes <|endoftext|> then its GPT-2 tokens (its text encoded as ordinary text),
so the end-of-text token separates documents as in GPT-2's training data. Text files (a folder
stands for its *.txt files, sorted) are read as UTF-8, one document each. A Hugging Face dataset
is streamed (it needs the `datasets` package and the network: Colab has both), one document per
row's `text`.

Splits: the first documents, until they hold `val_tokens`, are the validation split; the rest are
training data. Each split is cut into shards of at least `shard_tokens` tokens (a shard ends
where a document ends; the last shard of a split may be smaller).

Files in OUT: `val_000000.npy`, `train_000000.npy`, ...: 1-D uint16 .npy arrays, each written
aside and renamed into place; `progress.json`, replaced atomically after every shard, records
the shards and how many documents they hold. Run the same command again after an interruption
and it continues after the last shard written; `"complete": true` marks the end.

Reading: `load_shards(OUT)` gives (train, val), each a `TokenShards`: a split's shards read as
one 1-D token array, which `lib.train` samples as it samples any array (`python -m lib.train
--data OUT`).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from .atomic import atomic_path, write_atomic
from .tokenizer import GPT2_EOT_ID

FORMAT = "gpt2-course-shards/1"
PROGRESS = "progress.json"
SPLITS = ("val", "train")
BATCH_DOCUMENTS = 256          # documents tokenized together (tiktoken spreads a batch over threads)


# ---- documents ----------------------------------------------------------------------------------
def text_files(paths):
    """The files named, a folder standing for its *.txt files (sorted); an error names a missing path."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.txt") if p.is_file())
        elif path.is_file():
            if path.stat().st_size == 0:
                raise ValueError(f"{path} is empty: every input file must hold text (one document)")
            files.append(path)
        else:
            raise FileNotFoundError(f"{path} is neither a text file nor a folder")
    if not files:
        raise ValueError(f"no text files in {[str(p) for p in paths]} (a folder is read for its *.txt files)")
    return files


def file_documents(files, skip):
    """Each file's text, from the skip-th file on; an empty or non-UTF-8 file is an error naming it."""
    for path in files[skip:]:
        data = Path(path).read_bytes()
        if not data.strip():
            raise ValueError(f"{path} is empty: every input file must hold text (one document)")
        try:
            yield data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not UTF-8 text: byte {e.start} holds {data[e.start:e.start + 4]!r}") from None


def hf_documents(name, config, split, skip):
    """A Hugging Face dataset's rows' `text`, streamed, from the skip-th row on."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise ImportError("streaming a Hugging Face dataset needs the `datasets` package "
                          "(`pip install datasets`; Colab has it)") from None
    for row in load_dataset(name, name=config, split=split, streaming=True).skip(skip):
        yield row["text"]


def gpt2_encoder():
    """A function from a list of texts to their GPT-2 ids as ordinary text: tiktoken's, on all
    cores, when installed, else the course's own tokenizer (the same ids, tests/test_tokenizer.py)."""
    try:
        from .tokenizer import gpt2_tiktoken
        enc = gpt2_tiktoken()
        return lambda texts: enc.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)
    except ImportError:
        from .tokenizer import gpt2_tokenizer
        tok = gpt2_tokenizer()
        return lambda texts: [tok.encode_ordinary(text) for text in texts]


def batches(documents, size):
    batch = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# ---- writing ------------------------------------------------------------------------------------
def new_progress(source, shard_tokens, val_tokens, max_tokens):
    return {"format": FORMAT, "source": source, "shard_tokens": shard_tokens, "val_tokens": val_tokens,
            "max_tokens": max_tokens, "documents": 0, "complete": False,
            "shards": {split: [] for split in SPLITS}, "tokens": {split: 0 for split in SPLITS},
            "max_id": {split: 0 for split in SPLITS}}


def read_progress(out):
    path = Path(out) / PROGRESS
    if not path.exists():
        raise FileNotFoundError(f"{out} holds no {PROGRESS}: it is not a shard folder of `python -m lib.shards`")
    progress = json.loads(path.read_text())
    if progress.get("format") != FORMAT:
        raise ValueError(f"{path} has format {progress.get('format')!r}, expected {FORMAT!r}")
    return progress


def start_progress(out, source, shard_tokens, val_tokens, max_tokens):
    """The progress of an earlier run of the same command in `out`, or a fresh one."""
    wanted = new_progress(source, shard_tokens, val_tokens, max_tokens)
    if not (Path(out) / PROGRESS).exists():
        return wanted
    progress = read_progress(out)
    settings = ("source", "shard_tokens", "val_tokens", "max_tokens")
    if any(progress[key] != wanted[key] for key in settings):
        raise ValueError(f"{out} holds shards of another command ({ {k: progress[k] for k in settings} }); "
                         f"resume with the same settings, or write to an empty folder")
    return progress


def write_shard(out, progress, split, tokens, n_documents):
    """One shard file, then the progress that counts it (both replaced atomically)."""
    name = f"{split}_{len(progress['shards'][split]):06d}.npy"
    path = Path(out) / name
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, tokens)
    progress["shards"][split].append(name)
    progress["tokens"][split] += len(tokens)
    progress["max_id"][split] = max(progress["max_id"][split], int(tokens.max()))
    progress["documents"] += n_documents
    write_atomic(Path(out) / PROGRESS, json.dumps(progress, indent=1).encode())


def split_now(progress, val_tokens):
    """The split the next documents go to: validation until it holds val_tokens, then training."""
    return "val" if progress["tokens"]["val"] < val_tokens else "train"


def room(progress, shard_tokens, val_tokens):
    """Tokens the shard being filled takes before it is written."""
    if split_now(progress, val_tokens) == "val":
        return min(shard_tokens, val_tokens - progress["tokens"]["val"])
    return shard_tokens


def tokenized(documents, encode):
    """Each document as uint16 ids: <|endoftext|>, then its tokens."""
    for texts in batches(documents, BATCH_DOCUMENTS):
        for ids in encode(texts):
            doc = np.empty(len(ids) + 1, dtype=np.uint16)              # (1 + n,)
            doc[0], doc[1:] = GPT2_EOT_ID, ids
            yield doc


def write_shards(out, documents, source, shard_tokens=100_000_000, val_tokens=10_000_000, max_tokens=None,
                 progress_bar=True):
    """Tokenize `documents(skip)` (an iterator over texts, from the skip-th on) into shards in
    `out` (see the module docstring), resuming an earlier run of the same settings there.
    `source` describes the documents (a run with another source refuses to resume). Returns
    the progress record."""
    for name, value in (("shard_tokens", shard_tokens), ("val_tokens", val_tokens)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= val_tokens):
        raise ValueError(f"max_tokens must be an integer above val_tokens={val_tokens} (or None), got {max_tokens!r}")
    Path(out).mkdir(parents=True, exist_ok=True)
    progress = start_progress(out, source, shard_tokens, val_tokens, max_tokens)
    if progress["complete"]:
        return progress
    from tqdm.auto import tqdm
    total = sum(progress["tokens"].values())
    bar = tqdm(total=max_tokens, initial=total, unit="tok", unit_scale=True, desc="GPT-2 shards",
               disable=not progress_bar, mininterval=1.0)
    pending, n_pending = [], 0
    for doc in tokenized(documents(progress["documents"]), gpt2_encoder()):
        if max_tokens is not None and total >= max_tokens:
            break
        pending.append(doc)
        n_pending, total = n_pending + len(doc), total + len(doc)
        bar.update(len(doc))
        if n_pending >= room(progress, shard_tokens, val_tokens):
            write_shard(out, progress, split_now(progress, val_tokens), np.concatenate(pending), len(pending))
            pending, n_pending = [], 0
    bar.close()
    if pending:
        write_shard(out, progress, split_now(progress, val_tokens), np.concatenate(pending), len(pending))
    missing = [split for split in SPLITS if not progress["shards"][split]]
    if missing:
        stop = f"max_tokens={max_tokens:,} stopped it at" if max_tokens is not None and total >= max_tokens else \
            "the documents hold"
        raise ValueError(f"{stop} {total:,} tokens, too few for a {' and a '.join(missing)} split with "
                         f"val_tokens={val_tokens:,}; give more text, a larger max_tokens or a smaller val_tokens")
    progress["complete"] = True
    write_atomic(Path(out) / PROGRESS, json.dumps(progress, indent=1).encode())
    return progress


# ---- reading ------------------------------------------------------------------------------------
class TokenShards:
    """A split's shards read as one 1-D uint16 token array, read-only and memory-mapped: what
    lib.train and lib.data's batches ask of an array (len, dtype, ndim, shape, max, and indexing
    by a slice or an integer array). A window may run across two shards, as across documents."""

    ndim = 1
    dtype = np.dtype(np.uint16)

    def __init__(self, paths, max_id):
        self.parts = [open_shard(path) for path in paths]
        self.offsets = np.cumsum([0] + [len(part) for part in self.parts])   # (n_shards + 1,)
        self.max_id = max_id

    def __len__(self):
        return int(self.offsets[-1])

    @property
    def shape(self):
        return (len(self),)

    def max(self):
        """The largest token id, recorded when the shards were written (no pass over the data)."""
        return self.max_id

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return self[np.arange(start, stop, step)]
        index = np.asarray(index)
        if not np.issubdtype(index.dtype, np.integer):
            raise TypeError(f"TokenShards takes a slice or integer positions, got {index.dtype}")
        index = np.where(index < 0, index + len(self), index)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"positions must lie in [0, {len(self)}), got {index.min()} to {index.max()}")
        shard = np.searchsorted(self.offsets, index, side="right") - 1      # same shape as index
        out = np.empty(index.shape, dtype=np.uint16)
        for s in np.unique(shard):
            mine = shard == s
            out[mine] = self.parts[s][index[mine] - self.offsets[s]]
        return out


def open_shard(path):
    """One shard, memory-mapped; a file that is not a 1-D uint16 array is an error naming it."""
    try:
        tokens = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} is not a shard (a .npy array written by `python -m lib.shards`): {e}") from None
    if tokens.dtype != np.uint16 or tokens.ndim != 1:
        raise ValueError(f"{path} holds a {tokens.ndim}-D {tokens.dtype} array; a shard is 1-D uint16 token ids")
    return tokens


def load_shards(out):
    """(train, val) TokenShards of a complete shard folder; clear errors for an unfinished
    folder, a missing split or shard, and a shard of the wrong type or length."""
    progress = read_progress(out)
    if not progress["complete"]:
        raise ValueError(f"{out} is unfinished ({progress['documents']} documents so far): run the same "
                         f"`python -m lib.shards` command again to complete it")
    splits = {}
    for split in SPLITS:
        names = progress["shards"].get(split)
        if not names:
            raise ValueError(f"{out} has no {split!r} split")
        splits[split] = TokenShards([Path(out) / name for name in names], progress["max_id"][split])
        if len(splits[split]) != progress["tokens"][split]:
            raise ValueError(f"{out}: the {split!r} shards hold {len(splits[split])} tokens, "
                             f"{PROGRESS} says {progress['tokens'][split]}")
    return splits["train"], splits["val"]


# ---- command line -------------------------------------------------------------------------------
def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lib.shards", description="Turn text into GPT-2-token shards "
                                "(see the module docstring); run it again to resume.")
    p.add_argument("out", help="the folder of shards (created if missing)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--files", nargs="+", help="UTF-8 text files, one document each, or folders of *.txt")
    source.add_argument("--hf", metavar="DATASET", help="a Hugging Face dataset to stream, e.g. HuggingFaceFW/fineweb-edu")
    p.add_argument("--hf-config", help="its configuration, e.g. sample-10BT")
    p.add_argument("--hf-split", default="train", help="its split (%(default)s)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard, at least (%(default)s)")
    p.add_argument("--val-tokens", type=int, default=10_000_000, help="tokens of the validation split (%(default)s)")
    p.add_argument("--max-tokens", type=int, help="stop after this many tokens in all (default: every document)")
    args = p.parse_args(argv)
    try:
        if args.files:
            files = text_files(args.files)
            source = {"files": [[str(f), f.stat().st_size] for f in files]}

            def documents(skip):
                return file_documents(files, skip)
        else:
            source = {"hf": args.hf, "config": args.hf_config, "split": args.hf_split}

            def documents(skip):
                return hf_documents(args.hf, args.hf_config, args.hf_split, skip)
        progress = write_shards(args.out, documents, source, args.shard_tokens, args.val_tokens, args.max_tokens)
    except (FileNotFoundError, ValueError, ImportError) as e:
        p.error(str(e))
    counts = ", ".join(f"{split} {progress['tokens'][split]:,} tokens in {len(progress['shards'][split])} shard(s)"
                       for split in SPLITS)
    print(f"{args.out}: {progress['documents']:,} documents; {counts}")


if __name__ == "__main__":
    main()
