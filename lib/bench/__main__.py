"""`python -m lib.bench NAME [options]`: run one benchmark (forward, tokenizer, train, decode, gpu).

Each benchmark lives in `lib/bench/NAME.py` with a `main(argv)` that prints a table and,
as its last line, one JSON object with what it measured.
"""
import importlib
import sys

BENCHMARKS = ("forward", "tokenizer", "train", "decode", "gpu")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in BENCHMARKS:
        print(f"usage: python -m lib.bench {{{','.join(BENCHMARKS)}}} [options]; got {argv[:1] or 'nothing'}",
              file=sys.stderr)
        sys.exit(2)                                          # a usage error, as argparse's
    importlib.import_module(f".{argv[0]}", __package__).main(argv[1:])


if __name__ == "__main__":
    main()
