"""`python -m grader NOTEBOOK [...]`: see grader/__init__.py."""
import argparse
import json
import os
import sys
from pathlib import Path

from .grading import grade_submission
from .notebooks import MAX_NOTEBOOKS
from .options import EXIT_NO_SANDBOX, EXIT_SANDBOX_LATE, add_grading_options, grading_from
from .results import as_dict, report
from .sandbox import SandboxLate, SandboxUnavailable, check_bwrap

MAX_LISTING_BYTES = (MAX_NOTEBOOKS + 1) * 4096   # --notebooks-from: that many paths of PATH_MAX


def read_listing(parser, source: str) -> list[Path]:
    """The paths listed in `source` (a file, or '-' for standard input), each ended by a NUL
    byte (file names may hold newlines), at most MAX_NOTEBOOKS + 1 of them read."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_LISTING_BYTES + 1)
        else:
            with open(source, "rb") as f:
                data = f.read(MAX_LISTING_BYTES + 1)
    except OSError as exc:
        parser.error(f"--notebooks-from {source}: cannot read it ({exc.strerror})")
    if len(data) > MAX_LISTING_BYTES:
        parser.error(f"--notebooks-from {source}: over {MAX_LISTING_BYTES >> 10} KiB of paths")
    return [Path(os.fsdecode(p)) for p in data.split(b"\0") if p]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="one student's notebooks")
    parser.add_argument("--notebooks-from", default=None, metavar="FILE",
                        help="read the notebooks' paths from FILE ('-': standard input), each ended by a NUL byte")
    parser.add_argument("--assignment", default=None,
                        help="the exercises to grade, comma-separated names (ch4_gelu,...), or 'all' "
                             "(default: those the files name)")
    parser.add_argument("--exercise", default=None, help="grade every notebook given on this exercise (a name such as ch4_gelu), whatever the file's name")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument("--instructor", action="store_true", help="add the expected values (not for students)")
    add_grading_options(parser)
    args = parser.parse_args(argv)
    grading = grading_from(parser, args)
    if args.notebooks_from is not None:
        args.notebooks += read_listing(parser, args.notebooks_from)
    if not args.notebooks:
        parser.error("no notebook given (name them, or list them with --notebooks-from)")
    if len(args.notebooks) > MAX_NOTEBOOKS:
        parser.error(f"{len(args.notebooks):,} notebooks given: one student hands in at most {MAX_NOTEBOOKS}")
    hidden = grading.hidden
    if args.exercise is not None and args.exercise not in hidden:
        parser.error(f"--exercise {args.exercise!r}: no hidden tests for it (known: {', '.join(hidden)})")
    assignment = list(hidden) if args.assignment == "all" else args.assignment.split(",") if args.assignment else None
    if assignment and any(ex not in hidden for ex in assignment):
        parser.error(f"--assignment {args.assignment!r}: known exercises are {', '.join(hidden)}")
    try:
        check_bwrap()
        submission = grade_submission(args.notebooks, grading=grading, assignment=assignment,
                                      exercise=args.exercise)
    except SandboxUnavailable as e:
        print(f"grader: nothing graded: {e}", file=sys.stderr)
        return EXIT_SANDBOX_LATE if isinstance(e, SandboxLate) else EXIT_NO_SANDBOX
    if args.json:
        print(json.dumps(as_dict(submission, instructor=args.instructor), indent=1))
    else:
        print(report(submission, instructor=args.instructor))
    return 1 if any(nb.error for nb in submission.notebooks) else 0


if __name__ == "__main__":
    sys.exit(main())
