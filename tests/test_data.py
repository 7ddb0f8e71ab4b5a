"""Data pipeline: the Shakespeare text, streamed tokenization, cached memmaps, batches, downloads."""
import json
import pickle
import shutil
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib import assets, data, shakespeare
from lib.data import BatchSampler, download, get_batch, load_corpus, tokenize_file
from lib.shakespeare import markdown_to_speeches, shakespeare_plays, shakespeare_text
from lib.tokenizer import ENDOFTEXT, BPETokenizer, gpt2_tiktoken, gpt2_tokenizer


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory; the GPT-2 rank file and merges come along from the real cache."""
    gpt2_tokenizer(), gpt2_tiktoken(), shakespeare_plays()  # load (shared objects) from the real cache before moving it
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# Shakespeare ------------------------------------------------------------------------------------
def test_the_38_plays_by_genre():
    plays = shakespeare_plays()
    assert len(plays) == 38
    assert Counter(p["genre"] for p in plays) == {"comedies": 8, "histories": 11, "problems": 5,
                                                  "roman": 4, "romances": 4, "tragedies": 6}
    titles = {p["title"] for p in plays}
    assert {"Hamlet", "Measure for Measure", "Henry IV, Part I", "The Tempest"} <= titles
    assert all(len(p["text"]) > 50_000 for p in plays)


def test_text_is_tiny_shakespeare_form_without_markup():
    text = shakespeare_text()
    assert text.startswith("THESEUS:\nNow, fair Hippolyta, our nuptial hour\nDraws on apace;")
    assert 4_500_000 < len(text) < 5_000_000
    assert not set("#*_\\[]") & set(text)  # no Markdown left
    for speech in text.split("\n\n"):  # every speech: "NAME:" then at least one line
        name, *lines = speech.strip("\n").split("\n")
        assert name.endswith(":") and lines and all(lines), speech[:80]
    assert text == "\n".join(p["text"] for p in shakespeare_plays())


@pytest.fixture
def plays_cache(tmp_path, monkeypatch):
    """A copy of the fetched plays in an otherwise empty cache; pip must not run."""
    real = assets.shakespeare_plays_dir()  # the fetched folder, before the cache moves
    monkeypatch.setenv("GPT2_COURSE_CACHE", str(tmp_path))
    monkeypatch.setattr(assets.subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    return real, tmp_path / assets.PLAYS_DIR


def test_missing_plays_say_how_to_fix(plays_cache):
    with pytest.raises(assets.AssetError, match=r"plays are missing.*does not exist.*python -m lib.assets fetch"):
        assets.shakespeare_plays_dir()


def test_changed_plays_are_refused(plays_cache):
    real, copy = plays_cache
    shutil.copytree(real, copy)
    assert assets.shakespeare_plays_dir() == copy and assets.fetch_shakespeare_plays() == copy  # verified, no pip
    hamlet = copy / "tragedies" / "hamlet.md"
    hamlet.write_text(hamlet.read_text(encoding="utf-8").replace("To be, or not to be", "To be"), encoding="utf-8")
    with pytest.raises(assets.AssetError, match=r"38 plays with digest [0-9a-f]{64}; expected 38 plays.*lib.assets fetch"):
        assets.shakespeare_plays_dir()
    hamlet.unlink()
    with pytest.raises(assets.AssetError, match=r"holds 37 plays"):
        assets.shakespeare_plays_dir()


def test_plays_come_with_their_licence():
    licence = (assets.shakespeare_plays_dir() / "LICENSE").read_text()
    assert "Copyright 2019 Sean Stewart" in licence and "Permission is hereby granted" in licence


def test_text_is_deterministic():
    first = shakespeare_text()
    shakespeare._plays.cache_clear()
    assert shakespeare_text() == first


def test_markdown_conversion_rules():
    markdown = (
        "# A Play\n\n## ACT I\n\n### SCENE I. A room.\n\n_Enter ONE and TWO, with\nattendants_\n\n"
        "**ONE**  \nFirst line,\\--  \nsecond line.\n\n_Exit TWO_\n\nStill ONE speaking.\n"
        "__\\[Aside]_  \nAn aside. *[Drawing his.]*\n**TWO**  \n[Within]_  \nWho calls?\n\n"
        "### SCENE II. Wrapped scene\n\nheading text.\n\n**TWO**  \n_\\[To ONE]_  \nDone _\\[ ]_\nhere.\n"
    )
    title, speeches = markdown_to_speeches(markdown)
    assert title == "A Play"
    assert speeches == [
        ("ONE", ["First line,--", "second line.", "Still ONE speaking.", "An aside."]),
        ("TWO", ["Who calls?"]),
        ("TWO", ["Done", "here."]),
    ]


# streamed tokenization -------------------------------------------------------------------------
AWKWARD = ("A line\nB  \nC\n\n\nD\t\n E 'll\n's\n" + ENDOFTEXT + "\nafter\n   \nx\r\n" + "é😀中\n" * 3
           + "word\nword" * 5 + "\n")


def test_chunked_gpt2_tokenization_equals_whole_text(tmp_path):
    text = shakespeare_text()[:30_000] + AWKWARD * 20
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    whole = gpt2_tiktoken().encode(text, allowed_special="all")
    for chunk_bytes in (64, 997, 1 << 20):  # small chunks: thousands of cuts
        n = tokenize_file(path, "gpt2", tmp_path / "t.bin", chunk_bytes=chunk_bytes)
        assert np.fromfile(tmp_path / "t.bin", dtype=np.uint16).tolist() == whole and n == len(whole)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "'", "s", "ll", " ", "  ", "\n", "\n\n", "\n\n\n", " \n", "\t",
                                 "1", "é", "😀", ".", "\r", ENDOFTEXT]), min_size=1, max_size=120).map("".join),
       st.integers(4, 40))
def test_chunked_tokenization_property(tmp_path_factory, text, chunk_bytes):
    folder = tmp_path_factory.mktemp("prop")
    (folder / "t.txt").write_text(text, encoding="utf-8")
    tokenize_file(folder / "t.txt", "gpt2", folder / "g.bin", chunk_bytes=chunk_bytes)
    assert np.fromfile(folder / "g.bin", np.uint16).tolist() == gpt2_tokenizer().encode(text, allowed_special="all")
    tokenize_file(folder / "t.txt", "byte", folder / "b.bin", chunk_bytes=chunk_bytes)  # cuts inside characters
    assert np.fromfile(folder / "b.bin", np.uint16).tolist() == list(text.encode("utf-8"))


def test_not_utf8_names_file_and_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9 ok\n".encode("utf-8") * 100 + "na\u00efve".encode("latin-1"))
    for tokenizer in ("byte", "gpt2"):
        with pytest.raises(ValueError, match=r"latin1.txt is not UTF-8 text: byte offset 902 holds b'\\xefve'"):
            tokenize_file(path, tokenizer, tmp_path / "out.bin", chunk_bytes=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1.txt"]  # no partial output left behind


def test_empty_file_names_the_file(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.txt has no text in bytes \[0, 0\)"):
        tokenize_file(tmp_path / "empty.txt", "byte", tmp_path / "out.bin")


def test_unknown_tokenizer():
    with pytest.raises(ValueError, match="tokenizer must be 'byte', 'gpt2' or a BPETokenizer; got 'bpe'"):
        load_corpus("shakespeare", "bpe")


# corpora ---------------------------------------------------------------------------------------
def test_shakespeare_corpus_bytes(cache):
    train, val = load_corpus()
    text = shakespeare_text().encode("utf-8")
    assert isinstance(train, np.memmap) and train.dtype == np.uint16
    assert bytes(train.astype(np.uint8)) + bytes(val.astype(np.uint8)) == text
    assert text[len(train) - 1:len(train)] == b"\n"  # cut just after a newline ...
    assert abs(len(val) / len(text) - 0.1) < 0.001  # ... at 90% of the text, give or take one line
    again_train, _ = load_corpus()
    assert again_train.filename == train.filename  # the cached file, not a new one


def test_file_corpus_gpt2_same_validation_text_as_bytes(cache, tmp_path):
    path = tmp_path / "small.txt"
    text = shakespeare_text()[:40_000] + AWKWARD
    path.write_text(text, encoding="utf-8")
    train_b, val_b = load_corpus(path, "byte")
    train_g, val_g = load_corpus(path, "gpt2")
    enc = gpt2_tiktoken()
    val_text = bytes(val_b.astype(np.uint8)).decode("utf-8")
    assert text.endswith(val_text) and len(val_text) > 3000
    assert val_g.tolist() == enc.encode(val_text, allowed_special="all")
    assert train_g.tolist() == enc.encode(text[:-len(val_text)], allowed_special="all")


def test_file_corpus_with_a_trained_tokenizer(cache, tmp_path):
    text = shakespeare_text()[:30_000]
    (tmp_path / "small.txt").write_text(text, encoding="utf-8")
    tok = BPETokenizer.train(text, 300)
    train, val = load_corpus(tmp_path / "small.txt", tok)
    assert train.max() >= 256  # merged tokens are in use
    assert tok.decode(train.tolist()) + tok.decode(val.tolist()) == text
    assert load_corpus(tmp_path / "small.txt", BPETokenizer.train(text, 301))[0].filename != train.filename


def test_corpus_errors(cache, tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match="corpus file .*empty.txt is empty"):
        load_corpus(tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError, match="'nope.txt' is neither 'shakespeare' nor an existing file"):
        load_corpus("nope.txt")
    (tmp_path / "bad.txt").write_bytes(b"good line\n" * 50 + b"\xff\xfe bad\n")
    with pytest.raises(ValueError, match=r"bad.txt is not UTF-8 text: byte offset 500"):
        load_corpus(tmp_path / "bad.txt")


# batches ---------------------------------------------------------------------------------------
def test_get_batch_windows():
    tokens = np.arange(1000, dtype=np.uint16)  # token i has value i: windows are easy to check
    x, y = get_batch(tokens, 8, 16, np.random.default_rng(0))
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == np.int64
    assert (y == x + 1).all()  # targets are the inputs shifted by one
    assert (np.diff(x, axis=1) == 1).all() and x.min() >= 0 and y.max() <= 999
    x2, _ = get_batch(tokens, 8, 16, np.random.default_rng(0))
    assert (x == x2).all()


def test_get_batch_reaches_both_ends():
    tokens = np.arange(6, dtype=np.uint16)
    starts = {int(get_batch(tokens, 1, 5, np.random.default_rng(s))[0][0, 0]) for s in range(20)}
    assert starts == {0}  # 6 tokens, block 5: exactly one window
    x, y = get_batch(tokens, 1, 5, np.random.default_rng(0))
    assert x.tolist() == [[0, 1, 2, 3, 4]] and y.tolist() == [[1, 2, 3, 4, 5]]


def test_batch_errors():
    tokens = np.arange(64, dtype=np.uint16)
    with pytest.raises(ValueError, match="64 tokens, shorter than one context window: block_size=64 needs at least 65"):
        get_batch(tokens, 4, 64, np.random.default_rng(0))
    with pytest.raises(ValueError, match="64 tokens, shorter than one context window: block_size=100"):
        BatchSampler(tokens, 4, 100, seed=0)
    with pytest.raises(ValueError, match="batch_size must be a positive int; got 0"):
        get_batch(tokens, 0, 8, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator.*got int"):
        get_batch(tokens, 4, 8, 0)


def test_sampler_resumes_exactly():
    tokens = np.random.default_rng(1).integers(0, 256, 5000).astype(np.uint16)
    sampler = BatchSampler(tokens, 4, 32, seed=7)
    for _ in range(5):
        sampler.next()
    state = json.loads(json.dumps(sampler.state_dict()))  # survives JSON (and pickle, below)
    expected = [sampler.next() for _ in range(3)]
    resumed = BatchSampler(tokens, 4, 32, seed=123)  # any seed: the state overrides it
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert resumed.step == 5
    for (x, y), (x2, y2) in zip(expected, [next(resumed) for _ in range(3)]):
        assert (x == x2).all() and (y == y2).all()
    with pytest.raises(ValueError, match="saved for .*'block_size': 32.*this sampler has .*'block_size': 16"):
        BatchSampler(tokens, 4, 16, seed=7).load_state_dict(state)


# downloads, offline ----------------------------------------------------------------------------
def test_download_tiny_shakespeare_pipeline(cache, monkeypatch):
    served = shakespeare_text()[:20_000].encode("utf-8")
    monkeypatch.setattr(data, "_fetch", lambda url: served if url == data.TINY_SHAKESPEARE_URL else pytest.fail(url))
    path = download("tiny_shakespeare")
    assert path.read_bytes() == served
    monkeypatch.setattr(data, "_fetch", lambda url: pytest.fail("fetched twice"))
    assert download("tiny_shakespeare") == path  # kept in the cache
    train, val = load_corpus(path, "byte")
    assert len(train) + len(val) == len(served)


def test_download_fineweb_sample_pipeline(cache, monkeypatch):
    docs = [f"Document {i}: some educational text.\nSecond line {i}." for i in range(250)]

    def serve(url):  # the rows endpoint, paged 100 at a time; row 5 arrives truncated
        assert url.startswith(data.FINEWEB_EDU_ROWS_URL + "&")
        query = dict(part.split("=") for part in url.split("&")[-2:])
        start, length = int(query["offset"]), int(query["length"])
        rows = [{"row_idx": i, "row": {"text": docs[i], "id": str(i)},
                 "truncated_cells": ["text"] if i == 5 else []} for i in range(start, min(start + length, 250))]
        return json.dumps({"features": [], "rows": rows, "num_rows_total": 250}).encode()

    monkeypatch.setattr(data, "_fetch", serve)
    path = download("fineweb_edu_sample", n_docs=120)
    kept = [d for i, d in enumerate(docs) if i != 5][:120]
    assert path.read_text(encoding="utf-8") == ENDOFTEXT.join(kept)
    train, val = load_corpus(path, "gpt2")
    assert np.count_nonzero(train == 50256) + np.count_nonzero(val == 50256) == 119  # between documents
    assert len(download("fineweb_edu_sample", n_docs=1000).read_text().split(ENDOFTEXT)) == 249  # ran out


def test_download_errors(tmp_path):
    with pytest.raises(ValueError, match="download name must be 'tiny_shakespeare' or 'fineweb_edu_sample'; got 'wiki'"):
        download("wiki")
    with pytest.raises(ConnectionError, match="needs the internet"):
        data._fetch((tmp_path / "missing.txt").as_uri())
