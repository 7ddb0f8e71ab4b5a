"""Hidden tests of exercise 1.1 (BPE training): the exact merges and ids on hidden texts.

Reference: the textbook loop with GPT-2's pre-split and the course's tie rule (most frequent
pair; ties to the smallest pair (a, b)), which learns the merges of lib.tokenizer.train_naive
(tests/test_grader.py checks it) and, when no chunk has two tokens left, stops early instead of
raising. Each text is graded twice: once on the merges, once on the ids.
The texts exercise what a near miss gets wrong: the pre-split (punctuation and digits next to
letters, contractions, runs of whitespace), the tie rule (a text in which every pair occurs once),
overlapping pairs, multi-byte characters, counting every occurrence of a chunk rather than each
distinct chunk once, and stopping early. A text with no pair in any chunk, the empty text,
num_merges = 0 and a negative num_merges are edge tests: returning the bytes unmerged (or always
raising) gets them right.
"""
import regex

from grader.spec import Exercise, Test, Verdict
from lib.tokenizer import GPT2_SPLIT_PATTERN                 # the pre-split is given, not graded

EXERCISE = Exercise(
    notebook="ch1_bpe", title="BPE training",
    functions=("train_bpe",),
    blocked=("lib.tokenizer:merge_pair", "lib.tokenizer:bpe", "lib.tokenizer:pair_counts",
             "lib.tokenizer:train_naive", "lib.tokenizer:train_fast", "lib.tokenizer:merges_from_ranks",
             "lib.tokenizer:BPETokenizer.train"),
)



def train_bpe(text, num_merges):
    if not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(num_merges)
    chunks = [list(c.encode("utf-8")) for c in regex.findall(GPT2_SPLIT_PATTERN, text)]
    merges = []
    for new_id in range(256, 256 + num_merges):
        counts = {}
        for chunk in chunks:
            for pair in zip(chunk, chunk[1:]):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        merged = []
        for chunk in chunks:
            out, i = [], 0
            while i < len(chunk):
                if chunk[i:i + 2] == list(pair):
                    out.append(new_id)
                    i += 2
                else:
                    out.append(chunk[i])
                    i += 1
            merged.append(out)
        chunks = merged
        merges.append(pair)
    return merges, [i for c in chunks for i in c]


REFERENCE = {"train_bpe": train_bpe}

ENGLISH = (
    "The lighthouse keeper climbed the stairs at dusk, as he had done every evening for thirty "
    "years. He didn't count the steps any more; his feet knew them. At the top he trimmed the "
    "wick, wiped the lens, and watched the boats come home: first the small ones, then the "
    "trawlers, heavy and slow. \"They're late tonight,\" he said to the gulls, who weren't "
    "listening. The wind rose, the sea turned grey, and the keeper lit the lamp. Its beam swept "
    "the water, the rocks, the harbour wall, the water again. Somewhere out there a bell rang "
    "twice, then three times, then the night was quiet, and the keeper sat down with his tea.\n\n"
    "In the morning the boats went out again, and the keeper slept until noon."
)

WORLD = (
    "Grüße aus München! Über die Brücke gehen Bären. Ça coûte très cher, n'est-ce pas? "
    "Καλημέρα κόσμε, καλή μέρα. 東京は晴れ、大阪は雨。東京の天気、大阪の天気。"
    " Emoji: 🙂🙂 🙂 👍🏾👍🏾, naïve café, naïve café. Ωμέγα ωμέγα."
)

CODE = (
    "for i in range(10):\n    x[i] = y[i] * 2 + 1;  # 2024-05-17\n\tif x[i] > 99: print(x[i])\n"
    "total = 3.14159 * r * r   \n\n\n    return total, 12345, 67890\n"
    "I'll say it's done, we've seen it, you're right, they'd agree, she's here.  \n"
)

EVERY_PAIR_ONCE = "Quick wafting zephyrs vex bold Jim"

OVERLAPS = "aaaaaaa bbbbbb aaaa bb aaa abababab zzz zz z"

REPEATS = " ".join(["one fish two fish red fish blue fish"] * 6 + ["black fish", "old fish new fish"])

NO_PAIR = "a!b?c;d:e.1,2(3)4"

# (label, text, num_merges, edge)
CASES = [
    ("an English story, 60 merges", ENGLISH, 60, False),
    ("an English story, 400 merges (runs out of pairs)", ENGLISH[:300], 400, False),
    ("German, French, Greek, Japanese and emoji, 40 merges", WORLD, 40, False),
    ("code, digits, contractions and whitespace runs, 50 merges", CODE, 50, False),
    ("a text in which every pair occurs once, 50 merges", EVERY_PAIR_ONCE, 50, False),
    ("runs of one letter (overlapping pairs), 12 merges", OVERLAPS, 12, False),
    ("a chunk repeated many times, 25 merges", REPEATS, 25, False),
    ("no chunk with two tokens, 5 merges", NO_PAIR, 5, True),
    ("the empty text, 3 merges", "", 3, True),
    ("an English story, 0 merges", ENGLISH, 0, True),
]


def _as_int(v):
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if hasattr(v, "ndim") and v.ndim == 0 and v.dtype.kind in "iu":
        return int(v)
    return None


def _int_list(value, what):
    """value as a list of ints, or an error message."""
    if hasattr(value, "ndim") and value.ndim == 1 and value.dtype.kind in "iu":
        return [int(v) for v in value], None
    if not isinstance(value, (list, tuple)) or any(_as_int(v) is None for v in value):
        return None, f"{what}: expected a list of ints"
    return [_as_int(v) for v in value], None


def _answer(got):
    """(merges, ids) from the student's return value, or an error message."""
    if not isinstance(got, (list, tuple)) or len(got) != 2:
        return None, None, "expected a pair (merges, ids)"
    merges, ids = got
    if hasattr(merges, "ndim") and merges.ndim == 2 and merges.shape[1:] == (2,):
        merges = merges.tolist()
    if not isinstance(merges, (list, tuple)):
        return None, None, "merges: expected a list of (a, b) pairs"
    pairs = []
    for k, m in enumerate(merges):
        pair, problem = _int_list(m.tolist() if hasattr(m, "tolist") else m, f"merge {k}")
        if problem or len(pair) != 2:
            return None, None, f"merge {k}: expected a pair of two ints"
        pairs.append(tuple(pair))
    ids, problem = _int_list(ids, "ids")
    return pairs, ids, problem


def merges_check(expected):
    def check(got):
        merges, _, problem = _answer(got)
        if problem:
            return False, problem
        for k, (a, b) in enumerate(zip(merges, expected)):
            if a != b:
                return Verdict(False, f"merge {k} (id {256 + k}) is {a}, not the pair the rules choose "
                                      f"(the {k} merges before it are right)", f"expected {b}")
        if len(merges) != len(expected):
            return Verdict(False, f"{len(merges)} merges: not the expected number",
                           f"expected {len(expected)}; the first {min(len(merges), len(expected))} are right")
        return Verdict(True, f"{len(merges)} merges, all right")
    return check


def ids_check(expected):
    def check(got):
        _, ids, problem = _answer(got)
        if problem:
            return False, problem
        for k, (a, b) in enumerate(zip(ids, expected)):
            if a != b:
                return Verdict(False, f"id at position {k} is {a}: not the expected token", f"expected {b}")
        if len(ids) != len(expected):
            return Verdict(False, f"{len(ids)} ids: not the expected number", f"expected {len(expected)}")
        return Verdict(True, f"{len(ids)} ids, all right")
    return check


def tests():
    out = []
    for label, text, n, edge in CASES:
        merges, ids = train_bpe(text, n)
        out.append(Test(f"merges: {label}", "train_bpe", (text, n), merges_check(merges), edge=edge))
        out.append(Test(f"ids: {label}", "train_bpe", (text, n), ids_check(ids), edge=edge))
    out.append(Test("num_merges = -1 raises ValueError", "train_bpe", ("abc abc", -1),
                    expect_error="ValueError", edge=True))
    return out
