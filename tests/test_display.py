"""lib.display: the long values a page prints are wrapped to the page's 88 characters."""
from lib import GPTConfig
from lib.display import wrapped


def test_wrapped_fits_the_width_and_keeps_every_word():
    text = f"model: {GPTConfig.small()}"
    lines = wrapped(text).split("\n")
    assert len(text) > 88 and len(lines) > 1
    assert all(len(line) <= 88 for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == text


def test_wrapped_leaves_a_short_value_and_a_long_word_whole():
    assert wrapped({"lr": 0.002}) == "{'lr': 0.002}"
    word = "x" * 100
    assert wrapped(f"a {word} b", width=20) == f"a\n    {word}\n    b"
