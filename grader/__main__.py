"""`python -m grader NOTEBOOK [...]`: see grader/__init__.py."""
import argparse
import json
import sys
from pathlib import Path

from . import DEFAULT_TESTS, as_dict, grade_notebook, load_hidden_tests
from .sandbox import SandboxUnavailable, check_bwrap


def report(result) -> str:
    lines = [result.path]
    if result.error:
        return "\n".join(lines + [f"  ERROR: {result.error}"])
    for ex in result.exercises:
        head = f"  {ex.exercise} {ex.title}: {ex.score}/{ex.max_score}"
        lines.append(head + (f"  [{ex.status}] {ex.message}" if ex.status != "graded" else ""))
        for t in ex.tests:
            lines.append(f"    {'PASS' if t.passed else 'FAIL'} {t.name} ({t.points} pt): {t.message}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="exercise notebooks to grade")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--tests", type=Path, default=DEFAULT_TESTS, help=f"hidden tests (default {DEFAULT_TESTS})")
    parser.add_argument("--timeout", type=float, default=None,
                        help="cap, in CPU seconds, on each sandbox run (default: the hidden tests' own limits)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="address-space limit per sandbox (MiB)")
    args = parser.parse_args(argv)
    if not args.tests.is_dir():
        parser.error(f"hidden tests folder {args.tests} does not exist (they ship with the instructors' "
                     f"copy, in solutions/hidden_tests)")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    if args.memory_mb < 256:
        parser.error(f"--memory-mb must be at least 256, got {args.memory_mb}")
    try:
        check_bwrap()
    except SandboxUnavailable as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
    hidden = load_hidden_tests(args.tests)
    results = [grade_notebook(p, tests_dir=args.tests, timeout=args.timeout, memory_mb=args.memory_mb,
                              hidden=hidden) for p in args.notebooks]
    if args.json:
        print(json.dumps({"notebooks": [as_dict(r) for r in results],
                          "score": sum(e.score for r in results for e in r.exercises),
                          "max_score": sum(e.max_score for r in results for e in r.exercises)}, indent=1))
    else:
        print("\n\n".join(report(r) for r in results))
        total = sum(e.score for r in results for e in r.exercises)
        most = sum(e.max_score for r in results for e in r.exercises)
        print(f"\ntotal: {total}/{most}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
