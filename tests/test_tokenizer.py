"""Byte-level BPE from scratch: hand-checked training, naive == fast, exact GPT-2 ids, specials, files."""
import hashlib
import json

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from lib import assets, tokenizer
from lib.shakespeare import shakespeare_text
from lib.tokenizer import ENDOFTEXT, GPT2_SPLIT_PATTERN, BPETokenizer, gpt2_tiktoken, gpt2_tokenizer

REAL_VOCAB = assets.cache_dir() / assets.GPT2_VOCAB_FILE  # the fetched file, before tests move the cache

# Everything GPT-2's pre-tokenizer treats specially, plus scripts with multi-byte UTF-8.
STRESS = (
    "Hello, world! It's 3:14pm; we'll see. I'M LOUD, you're quiet, they've gone, she'd say, "
    "o'clock 'tis ''quoted'' isn't\n"
    "中文分词测试：自然语言处理很有趣。日本語のテキスト、カタカナとひらがな。한국어 문장도 있어요.\n"
    "emoji 😀🙂🤖 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ✔️ ❤\ufe0f\n"
    "combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0337\u0322a\u0360lgo\n"
    "spaces:    four, then\t\ttabs\t,\r\n CRLF,   \n\n\n   \n\t\n trailing   \n"
    "digits 0 12 345 6789 3.14159 1,000,000 2024-01-31 ١٢٣ ½ ²\n"
    "mixed: x=1+2*3/4-5%6 <tag attr=\"v\"> {\"json\": [1, 2]} C++ a_b-c ~~~ ... ?! \u00a0nbsp\u2003em\u3000ideo"
)


# training --------------------------------------------------------------------------------------
def test_hand_checked_merges():
    # "aaabdaaabac" is one pre-token. Pair counts: aa 4 (overlapping: 2 per "aaa"), ab 2, bd 1,
    # da 1, ba 1, ac 1 -> merge (a, a) = 256: [256 a b d 256 a b a c]. Now (256, a) 2 and (a, b) 2
    # tie; the smaller pair (97, 98) wins -> 257: [256 257 d 256 257 a c]. Then (256, 257) 2 -> 258.
    for trainer in ("naive", "fast"):
        tok = BPETokenizer.train("aaabdaaabac", 259, trainer=trainer)
        assert tok.merge_list() == [(97, 97), (97, 98), (256, 257)]
        assert tok.encode("aaabdaaabac") == [258, 100, 258, 97, 99]
        assert tok.vocab[258] == b"aaab"


def test_ties_go_to_the_smallest_pair():
    # Every pair of "cdab" occurs once: (97, 98) = "ab" is the smallest; then in [c d 256]
    # the pairs (99, 100) and (100, 256) tie again and "cd" wins.
    for trainer in ("naive", "fast"):
        assert BPETokenizer.train("cdab", 258, trainer=trainer).merge_list() == [(97, 98), (99, 100)]


def test_merges_never_cross_pretokens():
    tok = BPETokenizer.train(shakespeare_text()[:50_000], 400)
    for token in tok.vocab.values():  # every learned token is inside one pre-token
        assert len(regex.findall(GPT2_SPLIT_PATTERN, token.decode("utf-8", "replace"))) <= 1, token


def test_naive_and_fast_trainers_agree_on_text():
    text = shakespeare_text()[:10_000] + STRESS
    assert BPETokenizer.train(text, 456, trainer="naive").merges == BPETokenizer.train(text, 456).merges


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab c\n'1é😀", max_size=80), st.integers(256, 300))
def test_naive_and_fast_trainers_agree_property(text, vocab_size):
    # Small alphabets make many ties and overlaps; both must agree, running out of pairs too.
    outcomes = []
    for trainer in ("naive", "fast"):
        try:
            outcomes.append(BPETokenizer.train(text, vocab_size, trainer=trainer).merge_list())
        except ValueError as e:
            outcomes.append(str(e))
    assert outcomes[0] == outcomes[1]


def test_training_errors():
    for bad in (255, 0, -1, 300.0, "512"):
        with pytest.raises(ValueError, match=f"vocab_size must be an int >= 256.*got {regex.escape(repr(bad))}"):
            BPETokenizer.train("some text", bad)
    with pytest.raises(ValueError, match=">= 256 .* 1 special token.* = 257; got 256"):
        BPETokenizer.train("some text", 256, special_tokens=(ENDOFTEXT,))
    with pytest.raises(ValueError, match="ran out of pairs after 3 merges; vocab_size asks for 10"):
        BPETokenizer.train("abcd", 266)
    with pytest.raises(ValueError, match="trainer must be one of"):
        BPETokenizer.train("abcd", 257, trainer="quick")


def test_trained_tokenizer_special_tokens_and_roundtrip():
    text = ("To be, or not to be" + ENDOFTEXT) * 20
    tok = BPETokenizer.train(text, 262, special_tokens=(ENDOFTEXT,))  # 5 merges
    assert tok.special_tokens == {ENDOFTEXT: 261} and tok.vocab_size == 262
    assert all(b"<|" not in t for t in tok.vocab.values())  # the special text was cut out before training
    ids = tok.encode(text, allowed_special="all")
    assert ids.count(261) == 20 and tok.decode(ids) == text


# GPT-2 parity ----------------------------------------------------------------------------------
def test_gpt2_vocabulary_facts():
    tok = gpt2_tokenizer()
    assert tok.vocab_size == 50257 and len(tok.merges) == 50000
    assert tok.special_tokens == {ENDOFTEXT: 50256}
    ranks = tokenizer._gpt2_ranks()
    assert all(tok.vocab[rank] == token for token, rank in ranks.items())


def test_gpt2_merges_recovered_fresh_equal_the_saved_ones():
    # gpt2_tokenizer() loads merges saved in the cache; recover them again from the rank file.
    byte_ids, merges = tokenizer.merges_from_ranks(tokenizer._gpt2_ranks())
    tok = gpt2_tokenizer()
    assert byte_ids == tok.byte_ids and merges == tok.merge_list()


def test_gpt2_ids_equal_tiktoken_on_whole_shakespeare():
    text = shakespeare_text()
    assert gpt2_tokenizer().encode(text) == gpt2_tiktoken().encode(text)


def test_gpt2_ids_equal_tiktoken_on_stress_text():
    ours, theirs = gpt2_tokenizer().encode(STRESS), gpt2_tiktoken().encode(STRESS)
    assert ours == theirs
    assert len(ours) > 300  # the text really exercises many pre-tokens


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=200))
def test_gpt2_ids_equal_tiktoken_property(text):
    assert gpt2_tokenizer().encode_ordinary(text) == gpt2_tiktoken().encode_ordinary(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=200))
def test_decode_encode_roundtrip_property(text):
    for tok in (gpt2_tokenizer(), BPETokenizer(), _small_trained()):
        assert tok.decode(tok.encode(text)) == text


def _small_trained():
    if not hasattr(_small_trained, "tok"):
        _small_trained.tok = BPETokenizer.train(shakespeare_text()[:30_000] + STRESS, 400)
    return _small_trained.tok


def test_decode_of_partial_utf8_matches_tiktoken():
    ids = gpt2_tokenizer().encode("😀")  # one emoji, several byte tokens
    assert len(ids) > 1
    assert gpt2_tokenizer().decode(ids[:1]) == gpt2_tiktoken().decode(ids[:1]) == "\ufffd"
    assert gpt2_tokenizer().decode_bytes(ids) == "😀".encode()
    with pytest.raises(ValueError, match="token id 50257 is not in this vocabulary"):
        gpt2_tokenizer().decode([50257])


# special tokens: tiktoken's semantics ----------------------------------------------------------
def test_special_token_text_is_an_error_unless_allowed():
    text = "end of one document" + ENDOFTEXT + " start of the next"
    ours, theirs = gpt2_tokenizer(), gpt2_tiktoken()
    with pytest.raises(ValueError, match=r"special token '<\|endoftext\|>' at character 19"):
        ours.encode(text)
    with pytest.raises(ValueError):
        theirs.encode(text)
    for kwargs in ({"allowed_special": "all"}, {"allowed_special": {ENDOFTEXT}}, {"disallowed_special": ()}):
        assert ours.encode(text, **kwargs) == theirs.encode(text, **kwargs), kwargs
    assert 50256 in ours.encode(text, allowed_special="all")
    assert 50256 not in ours.encode(text, disallowed_special=())
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    with pytest.raises(ValueError, match=r"not special tokens of this tokenizer.*\['<\|endoftext\|>'\]"):
        ours.encode("x", allowed_special={"<|im_start|>"})


def test_longest_special_token_wins():
    # With overlapping special tokens the longer one is one token, not two of the shorter (as in
    # tiktoken); it is also the one an error names.
    double = ENDOFTEXT * 2
    specials = {ENDOFTEXT: 50256, double: 50257}
    gpt2 = gpt2_tokenizer()
    ours = BPETokenizer(gpt2.merge_list(), specials, GPT2_SPLIT_PATTERN, gpt2.byte_ids)
    theirs = tiktoken.Encoding("gpt2-double-eot", pat_str=GPT2_SPLIT_PATTERN,
                               mergeable_ranks=tokenizer._gpt2_ranks(), special_tokens=specials)
    text = "a" + ENDOFTEXT * 3 + " b" + double
    assert ours.encode(text, allowed_special="all") == [64, 50257, 50256, 275, 50257]
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    with pytest.raises(ValueError, match=r"special token '<\|endoftext\|><\|endoftext\|>' at character 1;"):
        ours.encode(text)
    with pytest.raises(ValueError):
        theirs.encode(text)


# save / load ----------------------------------------------------------------------------------
def test_save_load_roundtrip(tmp_path):
    tok = BPETokenizer.train(shakespeare_text()[:20_000], 300, special_tokens=(ENDOFTEXT,))
    tok.save(tmp_path / "tok.json")
    back = BPETokenizer.load(tmp_path / "tok.json")
    assert back.merges == tok.merges and back.special_tokens == tok.special_tokens
    text = STRESS + ENDOFTEXT + shakespeare_text()[20_000:22_000]
    assert back.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    gpt2 = gpt2_tokenizer()
    gpt2.save(tmp_path / "gpt2.json")
    assert BPETokenizer.load(tmp_path / "gpt2.json").encode(STRESS) == gpt2_tiktoken().encode(STRESS)


def test_load_errors(tmp_path):
    (tmp_path / "junk.json").write_text("not json")
    with pytest.raises(ValueError, match="cannot read a tokenizer from .*junk.json"):
        BPETokenizer.load(tmp_path / "junk.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="other.json is not a tokenizer saved by BPETokenizer.save"):
        BPETokenizer.load(tmp_path / "other.json")
    (tmp_path / "bad.json").write_text(json.dumps({"format": tokenizer.FORMAT, "merges": [[300, 1]],
                                                   "special_tokens": {}, "pattern": "x", "byte_ids": list(range(256))}))
    with pytest.raises(ValueError, match="bad.json holds a malformed tokenizer.*merge 0 = \\(300, 1\\)"):
        BPETokenizer.load(tmp_path / "bad.json")


# the offline vocabulary file -----------------------------------------------------------------
@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A cache without the rank file, no network, and no tokenizer cached in this process."""
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))

    def no_network():
        raise OSError("no network in this test")

    monkeypatch.setattr(assets, "_download_from_openai", no_network)
    caches = (tokenizer._gpt2_ranks, tokenizer.gpt2_tokenizer, tokenizer.gpt2_tiktoken)
    for f in caches:
        f.cache_clear()
    yield tmp_path
    for f in caches:
        f.cache_clear()


def test_missing_vocabulary_says_how_to_fix(empty_cache):
    for build in (gpt2_tiktoken, gpt2_tokenizer):
        with pytest.raises(assets.AssetError, match=r"missing.*does not exist.*python -m lib.assets fetch"):
            build()


def test_corrupt_vocabulary_says_how_to_fix(empty_cache):
    (empty_cache / assets.GPT2_VOCAB_FILE).write_bytes(b"SGVsbG8= 0\n")
    with pytest.raises(assets.AssetError, match=r"corrupt \(sha256 .*python -m lib.assets fetch"):
        gpt2_tiktoken()


def test_wrong_download_is_not_stored(empty_cache):
    with pytest.raises(assets.AssetError, match="expected 306cd27f.*not stored"):
        assets._store_verified(b"<html>captive portal</html>", "a test download")
    assert not (empty_cache / assets.GPT2_VOCAB_FILE).exists()


def test_fetch_is_idempotent_without_pip(empty_cache, monkeypatch):
    (empty_cache / assets.GPT2_VOCAB_FILE).write_bytes(REAL_VOCAB.read_bytes())
    monkeypatch.setattr(assets.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    assert assets.fetch_gpt2_vocab() == empty_cache / assets.GPT2_VOCAB_FILE
    assert hashlib.sha256((empty_cache / assets.GPT2_VOCAB_FILE).read_bytes()).hexdigest() == assets.GPT2_VOCAB_SHA256
