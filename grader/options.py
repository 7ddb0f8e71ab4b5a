"""The command line that `python -m grader` and `python -m grader.classroom` share: the options of
a Grading (the hidden tests and each sandbox run's limits) and the grader's exit statuses."""
from pathlib import Path

from .grading import DEFAULT_TESTS, Grading

EXIT_NO_SANDBOX = 2          # bad usage, or no sandbox starts on this machine
EXIT_SANDBOX_LATE = 3        # a sandbox did not start within its wall-clock limit (a busy machine)


def add_grading_options(parser):
    """--tests, --timeout, --memory-mb: the hidden tests and each sandbox run's limits."""
    parser.add_argument("--tests", type=Path, default=DEFAULT_TESTS,
                        help=f"the exercises' folders, each holding its hidden_tests.py (default {DEFAULT_TESTS})")
    parser.add_argument("--timeout", type=float, default=None,
                        help="cap, in CPU seconds, on each sandbox run (default: the hidden tests' own limits)")
    parser.add_argument("--memory-mb", type=int, default=4096, help="address-space limit of each sandbox (MiB)")


def grading_from(parser, args) -> Grading:
    """The Grading that add_grading_options' values give; what they cannot be is refused through
    the parser."""
    if not args.tests.is_dir():
        parser.error(f"hidden tests folder {args.tests} does not exist (they ship with the instructors' "
                     f"copy: solutions/<exercise>/hidden_tests.py)")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    if args.memory_mb < 256:
        parser.error(f"--memory-mb must be at least 256, got {args.memory_mb}")
    return Grading(args.tests.resolve(), args.timeout, args.memory_mb)


def grading_arguments(grading: Grading) -> list[str]:
    """The options that give `python -m grader` the same Grading."""
    timeout = ["--timeout", str(grading.timeout)] if grading.timeout is not None else []
    return ["--tests", str(grading.tests_dir), "--memory-mb", str(grading.memory_mb), *timeout]
