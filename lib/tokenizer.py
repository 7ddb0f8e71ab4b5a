"""Byte-level BPE, written from scratch (numpy-free: stdlib + `regex`).

How it works, in the order the chapter teaches it:

1. Pre-tokenize: GPT-2's regex cuts text into words, numbers, punctuation runs and
   whitespace runs (`GPT2_SPLIT_PATTERN`); merges never cross those cuts.
2. Every chunk becomes its UTF-8 bytes, one token per byte (256 base tokens), so any text
   encodes and there is no unknown token.
3. Training repeatedly finds the most frequent adjacent pair of tokens and gives it a new id
   (256, 257, ...). Ties: among pairs with the same count, the smallest pair (a, b) in
   numeric order wins, so training is deterministic. Overlapping occurrences count
   ("aaa" holds the pair (a, a) twice) while merging goes left to right ("aaa" -> "aa" "a").
4. Encoding applies the learned merges to each chunk, lowest id (earliest merge) first.

`train_naive` recounts every pair of every chunk after every merge: the textbook loop.
`train_fast` keeps each distinct chunk once with its count, remembers which chunks hold each
pair, and after a merge updates only the counts of the pairs next to each merged spot; a heap
finds the most frequent pair. Both return the same merges (tests/test_tokenizer.py checks it).

GPT-2's merges come from tiktoken's rank file (`r50k_base`, see lib/assets.py): the token of
rank r is split the way BPE with the ranks below r splits its bytes, which recovers the
merge that made it. With them `gpt2_tokenizer()` gives exactly tiktoken's ids.
"""
import functools
import heapq
import json
from base64 import b64decode
from collections import Counter, defaultdict
from itertools import chain, pairwise, repeat
from pathlib import Path

import regex

from .assets import GPT2_VOCAB_SHA256, gpt2_vocab_path
from .atomic import write_atomic

GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
ENDOFTEXT = "<|endoftext|>"
GPT2_EOT_ID = 50256
FORMAT = "gpt2-course-bpe/1"
_NO_MERGE = float("inf")  # the "rank" of a pair that has no merge


def merge_pair(ids, pair, new_id):
    """Replace every occurrence of `pair` in `ids`, left to right, by `new_id`."""
    if pair[0] not in ids:
        return ids  # nothing to merge (a quick test in C)
    out, i, n = [], 0, len(ids)
    while i < n:
        if i < n - 1 and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def bpe(ids, merges):
    """Apply merges to one chunk: always the pair merged earliest in training (lowest new id).

    merges: {(a, b): new_id}.
    """
    ids = list(ids)
    while len(ids) >= 2:
        ranks = list(map(merges.get, pairwise(ids), repeat(_NO_MERGE)))  # one per adjacent pair
        new_id = min(ranks)
        if new_id == _NO_MERGE:
            break
        i = ranks.index(new_id)  # leftmost; later copies of the pair merge in the next rounds
        ids[i:i + 2] = [new_id]
    return ids


def pair_counts(chunks, weights):
    """Count adjacent pairs over token lists, chunk i counted weights[i] times."""
    counts = defaultdict(int)
    for chunk, w in zip(chunks, weights):
        for pair in pairwise(chunk):
            counts[pair] += w
    return counts


def _check_vocab_size(vocab_size, n_special):
    if not isinstance(vocab_size, int) or vocab_size < 256 + n_special:
        raise ValueError(f"vocab_size must be an int >= 256 (the byte tokens) + {n_special} special "
                         f"token(s) = {256 + n_special}; got {vocab_size!r}")


def _too_few_pairs(done, wanted):
    return ValueError(f"the training text ran out of pairs after {done} merges; vocab_size asks "
                      f"for {wanted} merges: use a longer text or a smaller vocab_size")


def train_naive(chunks, num_merges):
    """Textbook BPE: recount every pair over every chunk after each merge. Returns [(a, b), ...]."""
    chunks = [list(c.encode("utf-8")) for c in chunks]  # list of byte-id lists
    merges = []
    for i in range(num_merges):
        counts = Counter(chain.from_iterable(map(pairwise, chunks)))  # every pair, again
        if not counts:
            raise _too_few_pairs(i, num_merges)
        # most frequent; ties go to the smallest pair (a, b)
        pair = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        chunks = [merge_pair(c, pair, 256 + i) for c in chunks]
        merges.append(pair)
    return merges


def train_fast(chunks, num_merges):
    """Incremental BPE over distinct chunks; same merges as `train_naive`, far fewer recounts.

    Merging (a, b) -> n at position i of a word changes only the pairs next to it:
    (prev, a) becomes (prev, n) and (b, next) becomes (n, next); nothing else is recounted.
    """
    freq = Counter(chunks)  # distinct chunk -> how often it occurs
    words = [list(w.encode("utf-8")) for w in freq]  # distinct chunks as byte-id lists
    weights = list(freq.values())
    counts = pair_counts(words, weights)  # pair -> total count over the corpus
    where = defaultdict(set)  # pair -> indices of words that hold it (may hold stale ones)
    for w, word in enumerate(words):
        for pair in pairwise(word):
            where[pair].add(w)
    heap = [(-c, a, b) for (a, b), c in counts.items()]  # max count first, then smallest pair
    heapq.heapify(heap)
    merges = []
    for i in range(num_merges):
        while heap and counts.get((heap[0][1], heap[0][2])) != -heap[0][0]:
            heapq.heappop(heap)  # stale entry: that pair's count has changed since
        if not heap or heap[0][0] == 0:
            raise _too_few_pairs(i, num_merges)
        _, a, b = heapq.heappop(heap)
        new_id = 256 + i
        change = defaultdict(int)  # pair -> change of its count caused by this merge
        for w in where.pop((a, b)):
            word, weight = words[w], weights[w]
            j = 0
            while j < len(word) - 1:  # merge left to right, in place
                if word[j] == a and word[j + 1] == b:
                    if j > 0:
                        change[word[j - 1], a] -= weight
                        change[word[j - 1], new_id] += weight
                        where[word[j - 1], new_id].add(w)
                    if j + 2 < len(word):
                        change[b, word[j + 2]] -= weight
                        change[new_id, word[j + 2]] += weight
                        where[new_id, word[j + 2]].add(w)
                    word[j:j + 2] = [new_id]
                j += 1
        del counts[a, b]
        for pair, d in change.items():
            if d and pair != (a, b):
                counts[pair] += d
                heapq.heappush(heap, (-counts[pair], *pair))
        merges.append((a, b))
    return merges


TRAINERS = {"naive": train_naive, "fast": train_fast}


def _special_tokens_pattern(specials):
    """A regex alternation matching any of `specials` (texts), longest first: alternatives are
    tried in order, so with "<|a|>" and "<|a|><|a|>" the longer must come first or it would be
    read as two of the shorter. Ties in length go by text, for a fixed order."""
    return "|".join(regex.escape(t) for t in sorted(specials, key=lambda t: (-len(t), t)))


class BPETokenizer:
    """A byte-level BPE tokenizer: 256 byte tokens, merges, then special tokens.

    merges: list of pairs; merge i makes token id 256 + i (its rank: lower merges first).
    byte_ids: id of each byte value 0..255; the identity for tokenizers trained here, a
    permutation for GPT-2 (tiktoken's ranks put printable bytes first).
    special_tokens: {text: id}, e.g. {"<|endoftext|>": 50256}.
    BPETokenizer() with no merges is the plain byte tokenizer (vocabulary of 256).
    """

    def __init__(self, merges=(), special_tokens=None, pattern=GPT2_SPLIT_PATTERN, byte_ids=None,
                 cache_size=1 << 16):
        self.byte_ids = list(range(256)) if byte_ids is None else list(byte_ids)
        if sorted(self.byte_ids) != list(range(256)):
            raise ValueError("byte_ids must be a permutation of 0..255")
        self.merges = {tuple(p): 256 + i for i, p in enumerate(merges)}  # (a, b) -> new id, in id order
        self.vocab = {i: bytes([b]) for b, i in enumerate(self.byte_ids)}  # id -> bytes
        for (a, b), i in self.merges.items():
            if a >= i or b >= i:
                raise ValueError(f"merge {i - 256} = ({a}, {b}) uses an id not made before it")
            self.vocab[i] = self.vocab[a] + self.vocab[b]
        self.special_tokens = dict(special_tokens or {})
        for text, i in self.special_tokens.items():
            if i in self.vocab:
                raise ValueError(f"special token {text!r} has id {i}, already a BPE token")
        self.pattern = pattern
        self._split = regex.compile(pattern).findall
        self._decoder = {**self.vocab, **{i: t.encode("utf-8") for t, i in self.special_tokens.items()}}
        self._encode_chunk = functools.lru_cache(maxsize=cache_size)(self._bpe_chunk)

    @property
    def vocab_size(self):
        return len(self.vocab) + len(self.special_tokens)

    @property
    def is_plain_bytes(self):
        """True when ordinary text encodes to its UTF-8 bytes as they are (no merges, identity ids)."""
        return not self.merges and self.byte_ids == list(range(256))

    def merge_list(self):
        """The merges in training order: [(a, b) of id 256, (a, b) of id 257, ...]."""
        return list(self.merges)

    def __repr__(self):
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, special={list(self.special_tokens)})"

    # training -------------------------------------------------------------------------------
    @classmethod
    def train(cls, text, vocab_size, trainer="fast", special_tokens=(), pattern=GPT2_SPLIT_PATTERN):
        """Learn vocab_size - 256 - len(special_tokens) merges from `text`.

        special_tokens get the ids after the merges; their text in `text` is cut out before
        training, so no merge crosses or absorbs them.
        """
        _check_vocab_size(vocab_size, len(special_tokens))
        if trainer not in TRAINERS:
            raise ValueError(f"trainer must be one of {sorted(TRAINERS)}; got {trainer!r}")
        num_merges = vocab_size - 256 - len(special_tokens)
        split = regex.compile(pattern).findall
        parts = regex.split(_special_tokens_pattern(special_tokens), text) if special_tokens else [text]
        chunks = [c for part in parts for c in split(part)]  # pre-tokenized chunks (str)
        merges = TRAINERS[trainer](chunks, num_merges)
        specials = {t: 256 + num_merges + k for k, t in enumerate(special_tokens)}
        return cls(merges, specials, pattern)

    # encoding -------------------------------------------------------------------------------
    def _bpe_chunk(self, chunk):
        return bpe([self.byte_ids[b] for b in chunk.encode("utf-8")], self.merges)

    def encode_ordinary(self, text):
        """Encode text, treating special-token text as ordinary text."""
        if self.is_plain_bytes:
            return list(text.encode("utf-8"))  # the byte tokenizer needs no pre-tokenization
        return list(chain.from_iterable(map(self._encode_chunk, self._split(text))))

    def encode(self, text, allowed_special=(), disallowed_special="all"):
        """Encode `text` with tiktoken's rules for special tokens.

        allowed_special ("all" or a set): these special-token texts become their ids.
        disallowed_special ("all" = every special token not allowed, or a set): finding one of
        them in `text` is an error; special tokens neither allowed nor disallowed are encoded
        as ordinary text.
        """
        specials = set(self.special_tokens)
        allowed = specials if allowed_special == "all" else set(allowed_special)
        disallowed = specials - allowed if disallowed_special == "all" else set(disallowed_special)
        for name, given in (("allowed_special", allowed), ("disallowed_special", disallowed)):
            if given - specials:
                raise ValueError(f"{name} names {sorted(given - specials)}, which are not special tokens "
                                 f"of this tokenizer; it has {sorted(specials)}")
        if disallowed:
            found = regex.search(_special_tokens_pattern(disallowed), text)
            if found:
                raise ValueError(
                    f"text contains the special token {found.group()!r} at character {found.start()}; "
                    f"pass allowed_special={{{found.group()!r}}} to encode it as the special token, or "
                    f"disallowed_special=() to encode it as ordinary text")
        if not allowed:
            return self.encode_ordinary(text)
        ids = []
        pieces = regex.split(f"({_special_tokens_pattern(allowed)})", text)
        for k, piece in enumerate(pieces):  # odd positions hold the special tokens
            ids.extend([self.special_tokens[piece]] if k % 2 else self.encode_ordinary(piece))
        return ids

    # decoding -------------------------------------------------------------------------------
    def decode_bytes(self, ids):
        try:
            return b"".join(map(self._decoder.__getitem__, ids))
        except KeyError as e:
            raise ValueError(f"token id {e.args[0]!r} is not in this vocabulary "
                             f"(ids 0..{self.vocab_size - 1})") from None

    def decode(self, ids):
        """Ids back to text; bytes that are not valid UTF-8 become U+FFFD (as tiktoken does)."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # saving ---------------------------------------------------------------------------------
    def save(self, path):
        """Write the tokenizer as JSON (merges, byte ids, special tokens, split pattern)."""
        state = {"format": FORMAT, "pattern": self.pattern, "byte_ids": self.byte_ids,
                 "merges": self.merge_list(), "special_tokens": self.special_tokens}
        write_atomic(path, json.dumps(state).encode("utf-8"))

    @classmethod
    def load(cls, path):
        try:
            state = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read a tokenizer from {path}: {e}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"{path} is not a tokenizer saved by BPETokenizer.save (format {FORMAT!r})")
        try:
            return cls(state["merges"], state["special_tokens"], state["pattern"], state["byte_ids"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path} holds a malformed tokenizer: {e!r}") from None


# GPT-2 ----------------------------------------------------------------------------------------
def load_ranks(path):
    """tiktoken rank file -> {token bytes: rank}; each line is `base64(bytes) rank`."""
    ranks = {}
    for line in Path(path).read_bytes().splitlines():
        token, rank = line.split()
        ranks[b64decode(token)] = int(rank)
    return ranks


def merges_from_ranks(ranks):
    """Recover (byte_ids, merges) from tiktoken-style ranks {bytes: rank}.

    Tokens are taken in rank order; each multi-byte token is encoded with the merges found so
    far (all of lower rank), which must leave exactly two parts: the pair that made it.
    """
    byte_ids = [ranks[bytes([b])] for b in range(256)]
    merges = {}                                          # (a, b) -> rank, in rank order
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        if rank != 256 + len(merges):
            raise ValueError(f"rank {rank} of {token!r} breaks the order 256, 257, ... of merged tokens")
        parts = bpe([byte_ids[b] for b in token], merges)
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) is not one merge of two lower-ranked tokens")
        merges[tuple(parts)] = rank
    return byte_ids, list(merges)


@functools.lru_cache(maxsize=1)
def _gpt2_ranks():
    return load_ranks(gpt2_vocab_path())  # a verified file, or an AssetError saying how to fetch it


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    """The from-scratch tokenizer with GPT-2's 50,000 merges and <|endoftext|> = 50256 (shared object).

    Recovering the merges takes seconds, so the result is saved next to the rank file and
    loaded from there afterwards (tests compare it with a fresh `merges_from_ranks`).
    """
    saved = gpt2_vocab_path().with_name(f"gpt2-merges-{GPT2_VOCAB_SHA256[:12]}.json")
    if saved.exists():
        try:
            return BPETokenizer.load(saved)
        except ValueError:
            pass  # unreadable: derive it again below
    byte_ids, merges = merges_from_ranks(_gpt2_ranks())
    tok = BPETokenizer(merges, {ENDOFTEXT: GPT2_EOT_ID}, GPT2_SPLIT_PATTERN, byte_ids)
    tok.save(saved)
    return tok


@functools.lru_cache(maxsize=1)
def gpt2_tiktoken():
    """tiktoken's GPT-2 encoding built from the cached rank file, with no download."""
    import tiktoken

    return tiktoken.Encoding("gpt2", pat_str=GPT2_SPLIT_PATTERN, mergeable_ranks=_gpt2_ranks(),
                             special_tokens={ENDOFTEXT: GPT2_EOT_ID}, explicit_n_vocab=GPT2_EOT_ID + 1)
