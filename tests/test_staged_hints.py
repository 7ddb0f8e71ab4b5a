"""Exercise pages let the student derive: the formulas an exercise's answer is are never shown
open before its graded cell, nor in the first hint a student opens.

Each exercise source that hands over formulas in its hints lists them beside the exercise, as
`FINAL_FORMULAS` in solutions/chK_name/source.py: the text of each, as the hint writes it. In the
student's notebook, in the markdown before the graded cell, every formula must stand only in a
collapsed block (a dropdown admonition) that directly follows another collapsed block: the hints
come in stages (the idea, then the intermediate step, the formula last), and the stages before
the last hold none of the formulas. Each formula must be found in such a last stage, so that the
list stays the page's. Chapter 9's prose, before exercise 9.2, holds none of 9.2's formulas.
No book build: the tests read the committed notebooks.
"""
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "solutions"))
from build_notebooks import load_source, sources  # noqa: E402

# The exercises whose hints gave the final formulas in one open-at-once dropdown, and 9.2, whose
# gradient and stability trick chapter 9 used to state.
STAGED = ("ch2_embeddings", "ch4_backward", "ch4_gpt", "ch5_optimizer", "ch5_training_loop",
          "ch6b_scoring", "ch9_dpo")
LISTED = sorted(name for name, path in sources().items() if "\nFINAL_FORMULAS = " in path.read_text())

# a MyST dropdown: ":::{admonition} title", ":class: dropdown", body, ":::"
BLOCK = re.compile(r"^:::\{admonition\}([^\n]*)\n:class: dropdown\n(.*?)^:::$", re.S | re.M)
STAGE = re.compile(r"hint (\d) of (\d)")          # in a staged hint's title: "hint 2 of 3"


def _flat(text):
    return " ".join(text.split())


def split_page(markdown):
    """(open text, [(collapsed block's text, whether it is the last stage of a staged hint whose
    earlier stages come directly before it), ...])."""
    blocks, open_parts, last_end = [], [], 0
    for m in BLOCK.finditer(markdown):
        open_parts.append(markdown[last_end:m.start()])
        stage = STAGE.search(m.group(1))
        k, n = (int(stage.group(1)), int(stage.group(2))) if stage else (0, 0)
        blocks.append({"text": m.group(2), "stage": (k, n),
                       "follows": bool(blocks) and not open_parts[-1].strip()})
        last_end = m.end()
    open_parts.append(markdown[last_end:])
    result = []
    for i, b in enumerate(blocks):
        k, n = b["stage"]
        earlier = blocks[i - n + 1:i] if i >= n - 1 else None
        last = (n >= 2 and k == n and earlier is not None
                and [e["stage"] for e in earlier] == [(j, n) for j in range(1, n)]
                and all(e["follows"] for e in earlier[1:] + [b]))
        result.append((b["text"], last))
    return "\n".join(open_parts), result


def before_graded(name):
    """The markdown of exercise `name`'s student notebook before its graded cell, one string
    (a dropdown never spans two cells)."""
    nb = nbformat.read(ROOT / "exercises" / f"{name}.ipynb", as_version=4)
    texts = []
    for cell in nb.cells:
        if f"graded:{name}" in cell.get("metadata", {}).get("tags", []):
            return "\n\n".join(texts)
        if cell.cell_type == "markdown":
            texts.append(cell.source)
    raise AssertionError(f"{name} has no graded cell")


def formula_problems(markdown, formulas):
    """What is wrong with how `markdown` shows `formulas`: a list of sentences, empty if none."""
    shown, blocks = split_page(markdown)
    problems = [f"{f!r} is shown open" for f in formulas if _flat(f) in _flat(shown)]
    for f in formulas:
        where = [last for text, last in blocks if _flat(f) in _flat(text)]
        if not where:
            problems.append(f"{f!r} is in no hint (is FINAL_FORMULAS the page's?)")
        elif not all(where):
            problems.append(f"{f!r} is in a hint that is not the last of its stages")
    return problems


def final_formulas(name):
    return load_source(sources()[name]).FINAL_FORMULAS


def test_the_rule_catches_a_formula_shown_open_or_in_an_early_stage():
    formula = r"dx = r\,(g - \overline{g})"
    hint = ":::{admonition} %s\n:class: dropdown\n%s\n:::\n"
    first, last = "dx, hint 1 of 2: the idea", "dx, hint 2 of 2: the formula"
    staged = hint % (first, "the chain rule") + hint % (last, formula)
    assert formula_problems("Derive it.\n\n" + staged, [formula]) == []
    assert formula_problems(f"So ${formula}$.\n\n" + staged, [formula])       # open
    assert formula_problems(hint % ("Hint: dx", formula), [formula])          # one stage
    assert formula_problems(hint % ("Hint: y", "y") + hint % ("Hint: dx", formula), [formula])
    assert formula_problems(hint % (first, formula) + hint % (last, "x"), [formula])
    apart = hint % (first, "the chain rule") + "\nText.\n\n" + hint % (last, formula)
    assert formula_problems(apart, [formula])                                 # stages apart
    assert formula_problems("Derive it.\n\n" + staged, [formula + "x"])      # not the page's


def test_every_exercise_that_gave_formulas_lists_them():
    assert sorted(set(STAGED) - set(LISTED)) == []


@pytest.mark.parametrize("name", LISTED)
def test_no_final_formula_before_the_graded_cell_but_in_a_last_stage(name):
    formulas = final_formulas(name)
    assert formulas, f"{name}: FINAL_FORMULAS is empty"
    assert formula_problems(before_graded(name), formulas) == []


def test_chapter_9_leaves_the_dpo_gradient_to_its_exercise():
    nb = nbformat.read(ROOT / "chapters" / "09_post_training.ipynb", as_version=4)
    prose = _flat("\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    assert [f for f in final_formulas("ch9_dpo") if _flat(f) in prose] == []
    assert "logaddexp" not in prose
