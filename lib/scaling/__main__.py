"""`python -m lib.scaling fit RUNS.csv [--predict N] [--json]`: fit L(N) = E + A N^-alpha to a ladder
of runs and predict the next.

RUNS.csv has a header with the columns `params` (parameters of each run) and `loss` (its final
loss); a `tokens` column, or any other, may stand beside them and is not read. `--predict N` adds
the loss a run of N parameters will measure, with a 90% interval for it (the curve's uncertainty
and one run's noise, lib.scaling.fit's `new_run=True`). `--json` prints one JSON object instead:
E, A, alpha, prediction and interval (null where not asked for or not measurable). Bad input (a
missing file or column, a cell that is not a positive number, fewer than 3 sizes, a fit that does
not converge) is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys

from .fit import N_PARAMETERS, fit_power_law, predict, standard_errors

LEVEL = 0.9
COLUMNS = ("params", "loss")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr, exit status 2, like every other error here."""
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def read_runs(path: str) -> dict[str, list[float]]:
    """{"params": [...], "loss": [...]} from a CSV with a header; a missing file or column, or a cell
    that is not a number, raises ValueError naming it."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}: no column {missing[0]!r} in its header (found "
                                 f"{reader.fieldnames or 'none'}); expected the columns {', '.join(COLUMNS)}")
            rows = list(reader)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    return {column: [_number(row[column], path, line, column) for line, row in enumerate(rows, start=2)]
            for column in COLUMNS}


def _number(cell, path, line, column) -> float:
    try:
        return float(cell)
    except (TypeError, ValueError):
        raise ValueError(f"{path}, line {line}: {column} {cell!r} is not a number") from None


def summary(runs: dict, n_predict: float | None) -> dict:
    """{"E", "A", "alpha", "prediction", "interval", "errors", "runs"}: the fit of `runs`, its standard
    errors and, for n_predict, a new run's predicted loss and interval (the JSON object: the first five)."""
    fit = fit_power_law(runs["params"], runs["loss"])
    result = {"E": fit.E, "A": fit.A, "alpha": fit.alpha, "prediction": None, "interval": None,
              "errors": standard_errors(fit), "runs": fit.n}
    if n_predict is not None:
        p = predict(fit, n_predict, level=LEVEL, new_run=True)
        result["prediction"] = float(p["loss"])
        result["interval"] = None if p["interval"] is None else [float(x) for x in p["interval"]]
    return result


def _report(result: dict, n_predict: float | None) -> str:
    errors = result["errors"]
    lines = [f"L(N) = E + A N^-alpha fitted to {result['runs']} runs (+- one standard error):"]
    for name in ("E", "A", "alpha"):
        error = "" if errors[name] is None else f" +- {errors[name]:.3g}"
        lines.append(f"  {name:5s} = {result[name]:.4g}{error}")
    if n_predict is not None:
        interval = (f"no interval: {result['runs']} runs fit the {N_PARAMETERS} parameters exactly"
                    if result["interval"] is None else
                    f"{LEVEL:.0%} interval for that run {result['interval'][0]:.4g} to {result['interval'][1]:.4g}")
        lines.append(f"  predicted loss at N = {n_predict:.4g}: {result['prediction']:.4g} ({interval})")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m lib.scaling", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("fit", help="fit L(N) = E + A N^-alpha to RUNS.csv (columns params, loss)")
    fit.add_argument("runs", metavar="RUNS.csv", help="a CSV with a header and the columns params and loss")
    fit.add_argument("--predict", type=float, metavar="N", help="also predict the loss of a run of N parameters")
    fit.add_argument("--json", action="store_true", help="print one JSON object: E, A, alpha, prediction, interval")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.predict is not None and not args.predict > 0:
            raise ValueError(f"--predict {args.predict:g}: expected a positive number of parameters")
        result = summary(read_runs(args.runs), args.predict)
    except ValueError as e:
        print(f"python -m lib.scaling: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({key: result[key] for key in ("E", "A", "alpha", "prediction", "interval")}))
    else:
        print(_report(result, args.predict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
