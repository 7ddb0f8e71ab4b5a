"""GPT-2-token shards (lib/shards.py), on small text files each test writes itself: the ids, the
splits and shard boundaries, resuming after an interruption, and clear errors for bad input.
GPT-2's ids come from tiktoken's encoding of the same rank file (tests/test_tokenizer.py checks
it against the course's tokenizer)."""
import json

import numpy as np
import pytest

from lib.data import BatchSampler
from lib.shards import TokenShards, load_shards, main, write_shards
from lib.tokenizer import GPT2_EOT_ID, gpt2_tiktoken

SHARD, VAL = 120, 100


def documents_in(folder, n=12):
    """n small UTF-8 documents, of growing length, one per file."""
    folder.mkdir()
    texts = [f"Document {i}: naïve café, {i} times. " + "To be, or not to be. " * (i + 2) for i in range(n)]
    for i, text in enumerate(texts):
        (folder / f"doc{i:02d}.txt").write_text(text, encoding="utf-8")
    return texts


def expected_ids(texts):
    enc = gpt2_tiktoken()
    return [np.array([GPT2_EOT_ID, *enc.encode_ordinary(t)], dtype=np.uint16) for t in texts]


def shard_files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_shards_hold_each_document_after_an_end_of_text_split_at_document_ends(tmp_path):
    texts = documents_in(tmp_path / "texts")
    main([str(tmp_path / "out"), "--files", str(tmp_path / "texts"), "--shard-tokens", str(SHARD),
          "--val-tokens", str(VAL)])
    train, val = load_shards(tmp_path / "out")
    docs = expected_ids(texts)
    everything = np.concatenate(docs)
    assert np.array_equal(np.concatenate([val[:], train[:]]), everything)
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert progress["complete"] and progress["documents"] == len(texts)
    ends = set(np.cumsum([len(d) for d in docs]).tolist())   # where documents end
    position = 0
    for split in ("val", "train"):
        names = progress["shards"][split]
        for k, name in enumerate(names):
            shard = np.load(tmp_path / "out" / name, mmap_mode="r")
            assert isinstance(shard, np.memmap) and shard.dtype == np.uint16 and shard[0] == GPT2_EOT_ID
            position += len(shard)
            assert position in ends                         # a shard ends where a document ends
            if split == "train" and k < len(names) - 1:
                assert len(shard) >= SHARD
    assert len(val) == min(end for end in ends if end >= VAL)  # validation: up to the first document end past VAL
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_token_shards_read_as_one_array_across_shard_boundaries(tmp_path):
    documents_in(tmp_path / "texts")
    write_shards(tmp_path / "out", lambda skip: (p.read_text() for p in sorted((tmp_path / "texts").iterdir())[skip:]),
                 {"test": 1}, shard_tokens=SHARD, val_tokens=VAL, progress_bar=False)
    train, _ = load_shards(tmp_path / "out")
    whole = np.concatenate(train.parts)
    assert len(train.parts) > 2 and train.shape == whole.shape and train.max() == whole.max()
    index = np.arange(len(whole))[::7].reshape(-1, 1) + np.arange(5)   # (n, 5), some across boundaries
    index = index[index[:, -1] < len(whole)]
    assert np.array_equal(train[index], whole[index]) and np.array_equal(train[3:50], whole[3:50])
    x, y = BatchSampler(train, 4, 16, seed=0).next()                    # lib.data's batches take it
    assert x.shape == y.shape == (4, 16) and np.array_equal(x[:, 1:], y[:, :-1])


class Interrupted(Exception):
    pass


def test_an_interrupted_run_resumes_after_its_last_shard_and_ends_as_an_uninterrupted_one(tmp_path, monkeypatch):
    monkeypatch.setattr("lib.shards.BATCH_DOCUMENTS", 2)       # shards written before document 8 is read
    texts = documents_in(tmp_path / "texts")
    settings = dict(shard_tokens=SHARD, val_tokens=VAL, progress_bar=False)
    write_shards(tmp_path / "whole", lambda skip: iter(texts[skip:]), {"test": 1}, **settings)
    asked = []

    def dies_at_document_8(skip):
        asked.append(skip)
        for i, text in enumerate(texts[skip:], start=skip):
            if i == 8 and len(asked) == 1:
                raise Interrupted
            yield text

    with pytest.raises(Interrupted):
        write_shards(tmp_path / "cut", dies_at_document_8, {"test": 1}, **settings)
    progress = json.loads((tmp_path / "cut" / "progress.json").read_text())
    assert not progress["complete"] and 0 < progress["documents"] <= 8
    with pytest.raises(ValueError, match="unfinished"):
        load_shards(tmp_path / "cut")
    write_shards(tmp_path / "cut", dies_at_document_8, {"test": 1}, **settings)
    assert asked == [0, progress["documents"]]                         # it went on where it stopped
    assert shard_files(tmp_path / "cut") == shard_files(tmp_path / "whole")
    with pytest.raises(ValueError, match="holds shards of another command"):
        write_shards(tmp_path / "cut", dies_at_document_8, {"test": 1}, shard_tokens=SHARD + 1, val_tokens=VAL)


def test_max_tokens_stops_at_the_first_document_end_past_it(tmp_path):
    texts = documents_in(tmp_path / "texts")
    progress = write_shards(tmp_path / "out", lambda skip: iter(texts[skip:]), {"test": 1}, shard_tokens=SHARD,
                            val_tokens=VAL, max_tokens=300, progress_bar=False)
    total = sum(progress["tokens"].values())
    assert total >= 300 and total - len(expected_ids(texts)[progress["documents"] - 1]) < 300


def test_an_empty_or_non_utf8_file_is_an_error_naming_it(tmp_path, capsys):
    documents_in(tmp_path / "texts")
    (tmp_path / "texts" / "empty.txt").write_text("")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "out"), "--files", str(tmp_path / "texts")])
    assert "empty.txt is empty" in capsys.readouterr().err
    (tmp_path / "texts" / "empty.txt").write_bytes(b"caf\xe9")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "out2"), "--files", str(tmp_path / "texts"), "--shard-tokens", "50", "--val-tokens", "50"])
    assert "empty.txt is not UTF-8 text: byte 3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path / "out3"), "--files", str(tmp_path / "missing.txt")])
    assert "missing.txt is neither a text file nor a folder" in capsys.readouterr().err


def test_too_little_text_for_a_training_split_is_an_error(tmp_path):
    texts = documents_in(tmp_path / "texts", n=2)
    with pytest.raises(ValueError, match=r"too few for a train split with val_tokens=100,000"):
        write_shards(tmp_path / "out", lambda skip: iter(texts[skip:]), {"test": 1}, val_tokens=100_000,
                     progress_bar=False)


def test_a_wrong_dtype_shard_a_missing_split_and_a_short_shard_are_clear_errors(tmp_path):
    texts = documents_in(tmp_path / "texts")
    out = tmp_path / "out"
    write_shards(out, lambda skip: iter(texts[skip:]), {"test": 1}, shard_tokens=SHARD, val_tokens=VAL,
                 progress_bar=False)
    progress = json.loads((out / "progress.json").read_text())
    first = out / progress["shards"]["train"][0]
    good = np.load(first)
    np.save(first, good.astype(np.int32))
    with pytest.raises(ValueError, match=r"train_000000.npy holds a 1-D int32 array; a shard is 1-D uint16"):
        load_shards(out)
    np.save(first, good[:-1])
    with pytest.raises(ValueError, match=r"the 'train' shards hold \d+ tokens, progress.json says"):
        load_shards(out)
    np.save(first, good)
    (out / "progress.json").write_text(json.dumps({**progress, "shards": {**progress["shards"], "val": []}}))
    with pytest.raises(ValueError, match="has no 'val' split"):
        load_shards(out)
    with pytest.raises(FileNotFoundError, match="not a shard folder"):
        load_shards(tmp_path / "texts")
    with pytest.raises(IndexError):
        TokenShards([first], 0)[np.array([len(good)])]
