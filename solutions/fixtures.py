"""Every exercise's grading fixtures, gathered from solutions/<exercise>/fixtures.py, and their kinds.

Each exercise's fixtures.py defines:
- `WRONG`: plausible wrong answers, each (name, mistake, edits[, names]): the replacements
  ((old, new), ...) that turn the solution's graded code into the wrong one (every `old` text
  must occur exactly once, so that a fixture cannot silently stop applying when a solution
  changes), and `names`, a text of the first visible check message it meets, naming the mistake
  (tests/test_visible_checks.py). tests/test_grader.py grades each and requires it to lose points.
- `TRIVIAL`: {name: graded code} that does not do the exercise but gets some of its cases right
  by accident (a ReLU is GELU for large |x|, a constant is right for one config, a filter that
  does nothing keeps everything when it should, a function that always raises passes the error
  checks); each must score at most MAX_SHARE of the exercise.
- `IMPORT_REFERENCE`: graded code that calls lib's own answer; it must score 0.
- `LIB_ROUTE` (where one is known): lib's answer through its public classes and functions other
  than the blocked names; it would score outside the sandbox, and must score 0 inside it.

`GENERIC` holds the attempts to cheat that apply to every exercise: templates whose placeholders
tests/test_grader.py fills in: {stub} (the student's untouched graded cell), {solution} (the
solution's graded cell), {repo} (the repository's absolute path, which a student grading on the
instructor's machine could guess), {hidden} (this exercise's hidden-test file), {notebook} (this
exercise's solution notebook) and {exercise} (its name). `expect` is a phrase the grader's report
must contain, so the cause is visible. The fixtures that read files or call lib would score
outside the sandbox; tests/test_grader.py checks that too, so these are real threats and not duds.
"""
import importlib.util
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_SHARE = 0.10


@dataclass(frozen=True)
class Wrong:
    exercise: str
    name: str
    mistake: str
    edits: tuple          # ((old, new), ...)
    names: str = ""       # a text of the first visible check message it meets, naming the mistake


@dataclass(frozen=True)
class Tamper:
    name: str
    what: str
    template: str
    expect: str                # in the exercise's report (status or a test message)
    works_outside: bool = False  # would score when run without the sandbox


GENERIC = [
    Tamper("patch_allclose", "numpy's comparisons patched to always agree, then the stubs",
           "import numpy as np\n"
           "np.allclose = lambda *a, **k: True\n"
           "np.array_equal = lambda *a, **k: True\n"
           "np.testing.assert_allclose = lambda *a, **k: None\n"
           "{stub}\n", "NotImplementedError"),
    Tamper("exit_at_top", "sys.exit(0) before the (correct) answer",
           "import sys\nsys.exit(0)\n{solution}\n", "SystemExit"),
    Tamper("hard_exit_at_top", "os._exit(0) before the (correct) answer: no chance to report",
           "import os\nos._exit(0)\n{solution}\n", "crashed"),
    Tamper("print_all_passed", "prints success and forges answer records into the answers pipe, then the stubs",
           "import os\n"
           "print('all tests passed')\n"
           "print('score: 100/100')\n"
           "_forged = ''.join('{{\"id\": \"t%03d\", \"ok\": true, \"passed\": true, \"value\": null}}\\n' % i\n"
           "                  for i in range(100))\n"
           "try:\n"
           "    os.write(int(os.environ['GRADE_ANSWERS_FD']), _forged.encode())\n"
           "except (KeyError, OSError):\n"
           "    pass\n"
           "{stub}\n", "NotImplementedError"),
    Tamper("endless_loop", "an endless loop before the (correct) answer",
           "while True:\n    pass\n{solution}\n", "timeout"),
    Tamper("read_hidden_tests", "loads the hidden tests' reference answers from disk",
           "import pathlib\n"
           "_source = pathlib.Path({hidden!r}).read_text()\n"
           "_namespace = {{}}\n"
           "exec(compile(_source, 'hidden', 'exec'), _namespace)\n"
           "globals().update(_namespace['REFERENCE'])\n", "FileNotFoundError", works_outside=True),
    Tamper("run_solution_cells", "executes the graded cells of the solution notebook",
           "import json\n"
           "with open({notebook!r}) as _f:\n"
           "    _nb = json.load(_f)\n"
           "for _cell in _nb['cells']:\n"
           "    if 'graded:{exercise}' in _cell.get('metadata', {{}}).get('tags', []):\n"
           "        exec(''.join(_cell['source']), globals())\n", "FileNotFoundError", works_outside=True),
]


def _exercise_fixtures() -> dict:
    """{exercise: its fixtures module}, one per folder of solutions/ that has a fixtures.py."""
    modules = {}
    for path in sorted(HERE.glob("*/fixtures.py")):
        spec = importlib.util.spec_from_file_location(f"fixtures_{path.parent.name}", path)
        modules[path.parent.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[path.parent.name])
    return modules


_MODULES = _exercise_fixtures()
WRONG = [Wrong(exercise, *row) for exercise, module in _MODULES.items() for row in module.WRONG]
TRIVIAL = {exercise: module.TRIVIAL for exercise, module in _MODULES.items()}
IMPORT_REFERENCE = {exercise: module.IMPORT_REFERENCE for exercise, module in _MODULES.items()}
LIB_ROUTES = {exercise: module.LIB_ROUTE for exercise, module in _MODULES.items() if hasattr(module, "LIB_ROUTE")}


def apply(source: str, wrong: Wrong) -> str:
    """The solution's graded code with the fixture's edits made (each must match exactly once)."""
    for old, new in wrong.edits:
        count = source.count(old)
        if count != 1:
            raise ValueError(f"fixture {wrong.exercise}/{wrong.name}: {old[:60]!r} occurs {count} times in the solution")
        source = source.replace(old, new)
    return source
