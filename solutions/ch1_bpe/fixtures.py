"""Exercise ch1_bpe's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("no_presplit", "merges learned on the whole text's bytes, across GPT-2's chunk boundaries",
     (("chunks = [list(c.encode(\"utf-8\")) for c in regex.findall(GPT2_SPLIT_PATTERN, text)]",
       "chunks = [list(text.encode(\"utf-8\"))]"),)),
    ("ties_to_largest_pair", "ties go to the largest pair instead of the smallest",
     (("pair = min(counts, key=lambda p: (-counts[p], p))", "pair = max(counts, key=lambda p: (counts[p], p))"),)),
    ("ties_to_first_seen", "ties go to the pair seen first in the text",
     (("pair = min(counts, key=lambda p: (-counts[p], p))", "pair = max(counts, key=counts.get)"),)),
    ("distinct_chunks_once", "each distinct chunk counted once, however often it occurs",
     (("    for chunk in chunks:\n", "    for chunk in set(map(tuple, chunks)):\n"),)),
    ("raises_when_out_of_pairs", "raises instead of stopping early when no pair is left",
     (("            break                                        # every chunk is a single token",
       "            raise ValueError(\"no pair left to merge\")"),)),
]

TRIVIAL = {
    "bytes_unmerged": '''
def train_bpe(text, num_merges):
    if num_merges < 0:
        raise ValueError(num_merges)
    return [], list(text.encode("utf-8"))
''',
    "raises": "def train_bpe(text, num_merges):\n    raise ValueError(num_merges)\n",
}

IMPORT_REFERENCE = '''
import regex
from lib.tokenizer import GPT2_SPLIT_PATTERN, BPETokenizer, train_naive


def train_bpe(text, num_merges):
    merges = train_naive(regex.findall(GPT2_SPLIT_PATTERN, text), num_merges)
    return merges, BPETokenizer(merges).encode(text)
'''
