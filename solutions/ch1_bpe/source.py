"""Exercise 1.1: train byte-level BPE: GPT-2's pre-split, the merge loop and the course's tie rule."""
from build_notebooks import check, code, collapsed, graded, md, setup, uses


STUB = '''
import regex

from lib.tokenizer import GPT2_SPLIT_PATTERN


def train_bpe(text, num_merges):
    """Learn up to num_merges byte-pair merges from text.

    text: str; num_merges: int >= 0 (otherwise ValueError). Returns (merges, ids):
    merges, a list of (a, b) pairs of ints, merge i making id 256 + i; ids, the list of
    token ids of text after all the merges. Fewer merges than asked when no chunk has
    two tokens left.
    """
    raise NotImplementedError("exercise 1.1: write train_bpe")
'''

ANSWER = '''
import regex

from lib.tokenizer import GPT2_SPLIT_PATTERN


def count_pairs(chunks):
    """{(a, b): count} of adjacent tokens over all chunks; overlaps count ("aaa"
    holds (a, a) twice)."""
    counts = {}
    for chunk in chunks:
        for pair in zip(chunk, chunk[1:]):
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def replace_pair(chunk, pair, new_id):
    """chunk with each occurrence of pair, scanned left to right, replaced by new_id."""
    out, i = [], 0
    while i < len(chunk):
        if i + 1 < len(chunk) and (chunk[i], chunk[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(chunk[i])
            i += 1
    return out


def train_bpe(text, num_merges):
    """Learn up to num_merges byte-pair merges from text.

    text: str; num_merges: int >= 0 (otherwise ValueError). Returns (merges, ids):
    merges, a list of (a, b) pairs of ints, merge i making id 256 + i; ids, the list of
    token ids of text after all the merges. Fewer merges than asked when no chunk has
    two tokens left.
    """
    if (not isinstance(num_merges, int) or isinstance(num_merges, bool)
            or num_merges < 0):
        raise ValueError(f"num_merges must be an int >= 0; got {num_merges!r}")
    chunks = [list(c.encode("utf-8")) for c in regex.findall(GPT2_SPLIT_PATTERN, text)]
    merges = []
    for new_id in range(256, 256 + num_merges):
        counts = count_pairs(chunks)
        if not counts:
            break                                        # every chunk is a single token
        # most frequent; ties: the smallest (a, b)
        pair = min(counts, key=lambda p: (-counts[p], p))
        chunks = [replace_pair(c, pair, new_id) for c in chunks]
        merges.append(pair)
    ids = [i for c in chunks for i in c]
    return merges, ids
'''

CELLS = [
    md(r"""
    # Exercise 1.1: train byte-level BPE

    This exercise follows [chapter 1](../chapters/01_tokenization.ipynb). The chapter explained
    how byte-pair encoding learns its vocabulary and used lib's trainer; here you write the trainer
    yourself: GPT-2's pre-split, the merge loop and the course's rule for ties.

    **What is graded.** The cell tagged `graded:ch1_bpe` (JupyterLab shows a cell's tags in its property
    inspector; Colab keeps them without showing them). A grader runs that cell alone, in a sandbox,
    and calls `train_bpe` on hidden texts; nothing else in this notebook is graded. Write your answer
    in that cell and keep the cell. The checks below it are a first test you can run yourself.
    Edge tests (an empty text, a negative number of merges that must raise) count only once every
    other test passes, so that an answer that does almost nothing cannot collect points.
    """),
    setup(),
    md(r"""
    ## The algorithm, exactly

    `train_bpe(text, num_merges)` returns `(merges, ids)`:

    1. **Pre-split.** Cut `text` into chunks with GPT-2's pattern,
       `regex.findall(GPT2_SPLIT_PATTERN, text)` (the `regex` package, not `re`: the pattern uses
       `\p{L}`). Merges never cross a chunk boundary.
    2. **Bytes.** Each chunk becomes the list of its UTF-8 bytes, one token id (0 to 255) per byte.
    3. **Count.** Count every adjacent pair of tokens inside every chunk, over the whole text.
       Overlapping occurrences count: the chunk `aaa` holds the pair `(97, 97)` twice.
    4. **Choose.** The pair with the highest count wins. **Ties** (several pairs with that count)
       go to the smallest pair in numeric order: `(97, 98)` before `(97, 99)` before `(98, 0)`.
       That makes training deterministic; it is lib's rule too.
    5. **Merge.** Merge number `i` (counting from 0) creates id `256 + i`. Replace the pair in every
       chunk, scanning left to right: `aaa` with the pair `(97, 97)` becomes `[256, 97]`.
    6. Repeat from 3 until `num_merges` merges are made, **or until no chunk has two tokens left**:
       then stop early and return the merges made so far (maybe none). A pair that occurs only once
       is still a pair, and still merged.

    `merges` is the list of chosen pairs, in order (tuples or lists of two ints); `ids` is the text's
    token ids after the last merge, chunk after chunk, as one list of ints.

    **Rules.** `num_merges` must be an `int` $\ge 0$, otherwise raise `ValueError`; an empty text
    gives `([], [])`. While grading, lib's trainers (`lib.tokenizer.train_naive`, `train_fast`,
    `merge_pair`, `BPETokenizer.train`, ...) raise an error; `GPT2_SPLIT_PATTERN` is there to
    import. The graded cell must hold everything it uses, imports included. The hidden texts are a
    few thousand characters at most, so the straightforward loop (recount everything after each
    merge) is fast enough.
    """),
    graded(STUB, ANSWER),
    md("""
    ## Checks you can run

    First the chapter's toy string (three merges worked out by hand there), then small cases for the
    tie rule, overlaps, non-ASCII text and stopping early.
    """),
    code('''
    from lib.checks import expect_equal, expect_raises
    '''),
    check('''
    merges, ids = train_bpe("aaabdaaabac", 3)
    expect_equal("toy string: merges", [tuple(p) for p in merges],
                 [(97, 97), (97, 98), (256, 257)])
    expect_equal("toy string: ids", ids, [258, ord("d"), 258, ord("a"), ord("c")])

    # "ab" and "cd" both occur twice: the tie goes to (97, 98); then (99, 100), also twice
    merges, ids = train_bpe("cdab cdab", 2)
    expect_equal("a tie: merges", [tuple(p) for p in merges], [(97, 98), (99, 100)])
    expect_equal("a tie: ids", ids, [257, 256, 32, 257, 256])

    # a chunk that occurs four times counts four times:
    # (z, q) occurs 4 times, every other pair at most 3
    merges, ids = train_bpe("zq zq zq zq ab abc", 1)
    expect_equal("a repeated chunk counts each time it occurs: merges",
                 [tuple(p) for p in merges], [(122, 113)])
    '''),
    check('''
    # overlaps count, merging goes left to right: "aaaa" -> [256, 256], "aaa" -> [256, 97]
    merges, ids = train_bpe("aaaa aaa", 1)
    expect_equal("overlaps: ids", ids, [256, 256, 32, 256, 97])

    # UTF-8: "é" is two bytes (195, 169), which the first merge joins
    merges, ids = train_bpe("été é", 1)
    expect_equal("UTF-8 bytes: merges", [tuple(p) for p in merges], [(195, 169)])

    # the pre-split: "!" and "a" are chunks of their own, so "a!a!a!" has no pair to merge
    merges, ids = train_bpe("a!a!a!", 5)
    expect_equal("no pair in any chunk: merges", list(merges), [])
    expect_equal("no pair in any chunk: ids", ids, list(b"a!a!a!"))
    '''),
    check('''
    # "xyz": two merges make it one token, then there is nothing left to merge
    merges, ids = train_bpe("xyz", 10)
    expect_equal("stops early: merges", [tuple(p) for p in merges],
                 [(120, 121), (256, 122)])
    expect_equal("stops early: ids", ids, [257])

    expect_equal("empty text", tuple(train_bpe("", 3)), ([], []))
    expect_raises("train_bpe('abc', -1)", ValueError, train_bpe, "abc", -1)
    '''),
    md("""
    ## Against lib's trainer, on Shakespeare

    lib's trainers follow the same rules, so on the same chunks they must learn the same merges,
    and lib's tokenizer with those merges must encode the text to the same ids. Thirty thousand
    characters and a hundred merges take a few seconds with the straightforward loop.
    """),
    uses('''
    import time

    from lib import tokenizer as tk
    from lib.shakespeare import shakespeare_text

    sample = shakespeare_text()[:30_000]
    t0 = time.perf_counter()
    merges, ids = train_bpe(sample, 100)
    print(f"100 merges on {len(sample):,} characters in {time.perf_counter() - t0:.1f} s; "
          f"{len(sample.encode())} bytes -> {len(ids)} tokens")
    chunks = regex.findall(GPT2_SPLIT_PATTERN, sample)
    lib_merges = tk.train_fast(chunks, 100)
    expect_equal("Shakespeare: merges against lib.tokenizer.train_fast",
                 [tuple(p) for p in merges], lib_merges)
    expect_equal("Shakespeare: ids against lib's encoder", ids,
                 tk.BPETokenizer(lib_merges).encode(sample))
    tok = tk.BPETokenizer(merges)
    print("the last ten tokens learned:", [tok.decode([i]) for i in range(346, 356)])
    '''),
    md("""
    ## Compare with lib

    lib's textbook trainer is the same loop; its encoder, `bpe`, replays the merges on new text,
    lowest id first; its fast trainer keeps each distinct chunk once with its count and updates only
    the pair counts a merge changes, with a heap to find the most frequent pair. Open the cell
    below once your checks pass.
    """),
    collapsed('''
    from lib import tokenizer as tk
    from lib.display import show

    show(tk.merge_pair, tk.train_naive, tk.bpe, tk.train_fast)
    '''),
    md("""
    ## Going further

    - Time your `train_bpe` against `tk.train_fast` on 200,000 characters and 500 merges. Where does
      your loop spend its time?
    - Write `encode(text, merges)` for new text. Why must it apply the merges lowest id first rather
      than, say, the most frequent pair of the new text?
    """),
]
