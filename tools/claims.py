"""Check what the chapters assert against retrainings: every cached training under several seeds.

    python tools/claims.py --seeds 0-4            # train, execute, write claims/report.md and .json
    python tools/claims.py --seeds 0-4 --only 09_post_training   # execute one notebook again
    python tools/claims.py --seeds 0-4 --report   # rewrite the report from what is recorded

A model trained on another CPU is another run, as one trained under another seed is: its BLAS
rounds differently. So a figure that a chapter asserts from a trained model must hold for any
retraining. For each seed K this tool

1. trains every run of `lib.cached.RUNS` with GPT2_COURSE_SEED=K in a course cache of its own,
   `.cache/claims/seed-K` (the vocabulary and the plays are copied in from the course cache, or
   fetched), so no seed's models are mixed with another's or with the course's own cache;
2. executes every chapter and solution notebook that reads those models (`NOTEBOOKS`) against
   that cache, with each `assert` rewritten to record its operands and its outcome instead of
   raising, so that one failed claim does not hide the ones after it;
3. writes `claims/report.json` (every claim, per seed: passed or not, and the values compared)
   and `claims/report.md` (a table per notebook: each claim, the seeds it held on, and the range
   of each value over the seeds).

A claim whose values differ between seeds depends on training (or on timing): those are the
report's subject, and each must hold on every seed. The report records the digest of each
asserting cell and of the experiment code (`lib.cached.code_digest`); tests/test_claims.py fails
when either has changed since, and says to run this tool again.

The seeds train one after another in the background (one thread, lowest priority) while the
notebooks of the seeds already trained execute. With `--busy`, a spinner keeps one core busy while
a notebook executes (once no training runs), so that a measured speed is checked against the
machine's own bound under load; the report says which executions ran so. It runs at low
priority (nice 10) and resumes where it stopped: each seed's training is cached, and each executed
notebook's record is kept beside it, keyed by the notebook's digest.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".cache" / "claims"
REPORT = ROOT / "claims"
# The notebooks that read the cached models: every chapter that asserts something of them, and the
# solutions that load them.
NOTEBOOKS = ("chapters/03_attention.ipynb", "chapters/04_model.ipynb", "chapters/05_training.ipynb",
             "chapters/06_decoding.ipynb", "chapters/06b_evaluation.ipynb", "chapters/07_finetuning.ipynb",
             "chapters/08_modern_block.ipynb", "chapters/09_post_training.ipynb", "chapters/10_speed.ipynb",
             "chapters/11_scale.ipynb",
             "solutions/ch6_top_k_top_p.ipynb", "solutions/ch6b_scoring.ipynb", "solutions/ch9_dpo.ipynb",
             "solutions/ch9_lora.ipynb")
ASSETS = ("gpt2.tiktoken", "shakespeare-plays")          # what a seed's cache needs besides its training
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
CELL_TIMEOUT = 1800                                      # seconds: a loaded machine is slow, not wrong


# ---- inside the kernel: recording the asserts --------------------------------------------------------
def cell_digest(source: str) -> str:
    """12 hex digits of sha256 over a cell's source: the report's name for the cell."""
    return hashlib.sha256(source.encode()).hexdigest()[:12]


def plain(value):
    """A recorded operand as JSON: numbers as floats, short strings and small arrays as they are,
    anything else by its type (and shape)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value if not isinstance(value, str) or len(value) <= 60 else value[:57] + "..."
    if hasattr(value, "item") and getattr(value, "size", 2) == 1:
        return plain(value.item())
    if hasattr(value, "tolist") and getattr(value, "size", 99) <= 8:
        return value.tolist()
    if isinstance(value, (tuple, list)) and len(value) <= 8 and all(isinstance(v, (int, float, bool)) for v in value):
        return list(value)
    return f"<{type(value).__name__}{list(getattr(value, 'shape', []))}>"


class Recorder:
    """Collects the outcome and the compared values of every assert the rewritten cells run."""

    def __init__(self, out: Path):
        self.out, self.cell, self.cells, self.claims, self.values = out, None, {}, {}, None

    def at(self, index, source):
        self.cell = index
        self.cells[index] = cell_digest(source)
        self.save()

    def compare(self, thunks, ops):
        """A comparison a < b <= c ..., every operand evaluated once and recorded."""
        values = [thunk() for thunk in thunks]
        if self.values is not None:
            self.values.extend(plain(v) for v in values)
        return all(OPS[op](a, b) for op, a, b in zip(ops, values, values[1:]))

    def check(self, line, text, test, message):
        """An assert: record whether it held, and the values it compared; never raise."""
        self.values = []
        try:
            passed, error = bool(test()), None
            if not passed:
                error = str(message())[:200] if message else None
        except Exception as exc:                             # the claim could not even be evaluated
            passed, error = False, f"{type(exc).__name__}: {str(exc)[:200]}"
        key = f"{self.cell}:{line}"
        record = self.claims.setdefault(key, dict(cell=self.cell, digest=self.cells.get(self.cell), line=line,
                                                  text=text, runs=0, passed=True, values=None, error=None))
        record["runs"] += 1
        record["passed"] = record["passed"] and passed
        if record["values"] is None or (not passed and record["error"] is None):
            record["values"] = [v if not isinstance(v, float) or math.isfinite(v) else str(v) for v in self.values]
        if not passed and record["error"] is None:
            record["error"] = error or "assertion failed"
        self.values = None
        self.save()

    def save(self):
        self.out.write_text(json.dumps({"cells": self.cells, "claims": list(self.claims.values())}, indent=1))


OPS = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
       "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "in": lambda a, b: a in b,
       "not in": lambda a, b: a not in b, "is": lambda a, b: a is b, "is not": lambda a, b: a is not b}
OP_NAMES = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
            ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


def _thunk(expr):
    return ast.Lambda(ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]), expr)


def _call(method, *args):
    return ast.Call(ast.Attribute(ast.Name("__claims__", ast.Load()), method, ast.Load()), list(args), [])


def _comparisons(test):
    """An assert's test with each comparison it makes becomes `__claims__.compare`, which records its
    operands: the test itself, or the operands of its `and`, `or` and `not`. A comparison inside an
    operand (a mask, a call's argument, a comprehension) is the claim's computation: left alone."""
    if isinstance(test, ast.Compare):
        thunks = ast.List([_thunk(e) for e in (test.left, *test.comparators)], ast.Load())
        ops = ast.List([ast.Constant(OP_NAMES[type(op)]) for op in test.ops], ast.Load())
        return _call("compare", thunks, ops)
    if isinstance(test, ast.BoolOp):
        return ast.BoolOp(test.op, [_comparisons(value) for value in test.values])
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.UnaryOp(test.op, _comparisons(test.operand))
    return test


class AssertRecorder(ast.NodeTransformer):
    """IPython AST transformer: `assert test, msg` -> `__claims__.check(line, text, lambda: test', lambda: msg)`."""

    def visit_Assert(self, node):
        test = ast.unparse(node.test)
        rewritten = _comparisons(ast.parse(test, mode="eval").body)
        call = _call("check", ast.Constant(node.lineno - 1), ast.Constant(test), _thunk(rewritten),
                     _thunk(node.msg) if node.msg is not None else ast.Constant(None))
        return ast.copy_location(ast.Expr(call), node)


def instrumented(index, source):
    """A code cell as the tool executes it: a first line tells the recorder which cell runs (its
    asserts' lines are counted from the line after). A cell magic must stay first: left as it is."""
    if source.lstrip().startswith("%%"):
        return source
    return f"__claims__.at({index}, {source!r})\n" + source


def install(out):
    """Run in the kernel first: every later cell's asserts are recorded into `out`."""
    from IPython import get_ipython

    shell = get_ipython()
    shell.user_ns["__claims__"] = Recorder(Path(out))
    shell.ast_transformers.append(AssertRecorder())


# ---- outside: training, executing, reporting -------------------------------------------------------
def parse_seeds(text):
    """'0-4' or '0,2,5' -> [0, 1, 2, 3, 4] or [0, 2, 5]; ValueError naming the text otherwise."""
    seeds = []
    try:
        for part in text.split(","):
            low, dash, high = part.partition("-")
            seeds += range(int(low), int(high if dash else low) + 1)
    except ValueError:
        raise ValueError(f"--seeds must be a range like 0-4 or a list like 0,2,5 of whole numbers, got {text!r}")
    if not seeds or min(seeds) < 0:
        raise ValueError(f"--seeds must name at least one whole number >= 0, got {text!r}")
    return sorted(set(seeds))


def seed_env(seed):
    from lib.assets import cache_dir

    folder = WORK / f"seed-{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ASSETS:                                      # the data, not the trained models
        source, target = cache_dir() / name, folder / name
        if source.exists() and not target.exists():
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, target)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "GPT2_COURSE_GPU_ON_CPU")}
    return {**env, "GPT2_COURSE_SEED": str(seed), "GPT2_COURSE_CACHE": str(folder),
            "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def train(seed, log, background=False):
    """Train every cached run under `seed` in its own cache (or find it there); in the
    `background`, on one thread at the lowest priority, so that a notebook executing meanwhile
    is barely slowed."""
    env = seed_env(seed)
    if background:
        env.update({name: "1" for name in THREAD_VARIABLES})
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lib.assets", "fetch"], env=env, cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    done = subprocess.run([sys.executable, "-m", "lib.cached"], env=env, cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=(lambda: os.nice(19)) if background else None)
    if done.returncode:
        raise RuntimeError(f"training under seed {seed} failed:\n{done.stderr[-3000:]}")
    log(f"seed {seed}: trained (or found) every cached run in {time.perf_counter() - start:.0f} s")


def notebook_digest(path):
    """12 hex digits of sha256 over a notebook's code cells and the code that trains the cached runs
    (`lib.cached.code_digest`): what decides what its claims measure. An edit of its prose needs no
    new execution; a change of that code, even one meant to change nothing, does."""
    from lib.cached import code_digest

    cells = json.loads((ROOT / path).read_text())["cells"]
    code = "\0".join([code_digest()] + ["".join(c["source"]) for c in cells if c["cell_type"] == "code"])
    return hashlib.sha256(code.encode()).hexdigest()[:12]


def record_path(seed, notebook):
    return WORK / f"seed-{seed}" / "records" / (Path(notebook).stem + ".json")


class Trainings:
    """The seeds' trainings, one after another in the background (one thread, lowest priority),
    so that the notebooks of a seed already trained execute meanwhile; `wait(seed)` blocks until
    that seed's models are in its cache."""

    def __init__(self, seeds, log):
        self.done = {seed: threading.Event() for seed in seeds}
        self.failed = None
        self.thread = threading.Thread(target=self._run, args=(seeds, log), daemon=True)
        self.thread.start()

    def _run(self, seeds, log):
        for seed in seeds:
            try:
                train(seed, log, background=True)
            except Exception as error:                       # reported by wait(), in the main thread
                self.failed = error
            self.done[seed].set()

    def running(self):
        """Whether a training is running now."""
        return self.thread.is_alive()

    def wait(self, seed):
        self.done[seed].wait()
        if self.failed:
            raise self.failed


def execute(seed, notebook, log, busy=False, trainings=None, threads=None):
    """Execute `notebook` under `seed` with its asserts recorded; keep the record (resumable). With
    `busy`, a spinner keeps one core busy meanwhile, unless a background training is using the
    machine's spare time already (the record says which)."""
    import nbformat
    from nbclient import NotebookClient

    out = record_path(seed, notebook)
    digest = notebook_digest(notebook)
    if out.is_file() and json.loads(out.read_text()).get("notebook_digest") == digest:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".raw.json")
    raw.unlink(missing_ok=True)
    nb = nbformat.read(ROOT / notebook, as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = instrumented(index, cell.source)
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        f"import sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); import claims; claims.install({str(raw)!r})"))
    env = seed_env(seed)
    if threads:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    training = trainings is not None and trainings.running()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy and not training else None
    start = time.perf_counter()
    errors = []
    try:
        client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str((ROOT / notebook).parent)}})
        with client.setup_kernel(env=env):
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
                for output in cell.get("outputs", []):
                    if output.get("output_type") == "error":
                        errors.append(dict(cell=index - 1, error=f"{output['ename']}: {output['evalue'][:300]}"))
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()
    recorded = json.loads(raw.read_text()) if raw.is_file() else {"cells": {}, "claims": []}
    recorded.update(notebook=notebook, notebook_digest=digest, seed=seed, errors=errors, busy=bool(spinner),
                    threads=threads or "default",
                    seconds=round(time.perf_counter() - start, 1))
    out.write_text(json.dumps(recorded, indent=1))
    raw.unlink(missing_ok=True)
    failed = sum(not c["passed"] for c in recorded["claims"])
    log(f"seed {seed}: {notebook} in {recorded['seconds']:.0f} s, {len(recorded['claims'])} claims, "
        f"{failed} failed, {len(errors)} cells raised")


# ---- the report ----------------------------------------------------------------------------------------
def numbers(values):
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def summarise(seeds, notebooks):
    """The report's content: per notebook, each claim with its outcome and values per seed."""
    from lib.cached import code_digest

    report = {"seeds": seeds, "code_digest": code_digest(), "notebooks": {}}
    for notebook in notebooks:
        current = notebook_digest(notebook)
        records = {s: json.loads(record_path(s, notebook).read_text()) for s in seeds
                   if record_path(s, notebook).is_file()}
        records = {s: r for s, r in records.items() if r["notebook_digest"] == current}   # this version's only
        if not records:
            continue
        claims = {}
        for seed, record in records.items():
            for claim in record["claims"]:
                entry = claims.setdefault((claim["digest"], claim["line"]), dict(
                    cell=claim["cell"], digest=claim["digest"], line=claim["line"], text=claim["text"], per_seed={}))
                entry["per_seed"][str(seed)] = dict(passed=claim["passed"], values=claim["values"],
                                                    error=claim["error"])
        for entry in claims.values():
            runs = list(entry["per_seed"].values())
            entry["varies"] = len({json.dumps(run["values"]) for run in runs}) > 1
            entry["held_on"] = sum(run["passed"] for run in runs)
        report["notebooks"][notebook] = dict(
            digest=current, claims=sorted(claims.values(), key=lambda c: (c["cell"], c["line"])),
            seconds={str(s): r["seconds"] for s, r in records.items()}, busy=[s for s, r in records.items() if r["busy"]],
            threads=sorted({str(r.get("threads", "default")) for r in records.values()}),
            errors={str(s): r["errors"] for s, r in records.items() if r["errors"]},
            cells=sorted(cell_digest("".join(c["source"])) for c in json.loads((ROOT / notebook).read_text())["cells"]
                         if c["cell_type"] == "code"))
    return report


def value_ranges(claim):
    """'0.71-0.78, 0.5 (fixed)' : each compared operand's range over the seeds."""
    runs = [run["values"] for run in claim["per_seed"].values() if run["values"]]
    if not runs or len({len(r) for r in runs}) != 1:
        return ""
    cells = []
    for column in zip(*runs):
        nums = numbers(column)
        if len(nums) != len(column):
            cells.append(str(column[0]) if len({json.dumps(c) for c in column}) == 1 else "varies")
        elif min(nums) == max(nums):
            cells.append(f"{nums[0]:.4g}")
        else:
            cells.append(f"{min(nums):.4g} to {max(nums):.4g}")
    return "; ".join(cells)


def markdown(report):
    seeds = report["seeds"]
    lines = ["# What the chapters assert, across retrainings", "",
             f"Written by `python tools/claims.py --seeds {seeds[0]}-{seeds[-1]}` (each notebook says its threads and load): "
             f"every cached training (`lib.cached.RUNS`) retrained under GPT2_COURSE_SEED = {', '.join(map(str, seeds))}, "
             "each in a cache of its own, and each notebook below executed against each, every `assert` "
             "recorded instead of raised. A claim **depends on training** when its compared values differ "
             "between seeds; those must hold on every seed. Values are the operands each claim compares, "
             "left to right, as a range over the seeds. Do not edit: run the tool again "
             "(tests/test_claims.py says when).", ""]
    total = dependent = held = 0
    for notebook, entry in report["notebooks"].items():
        claims = entry["claims"]
        secs = entry["seconds"]
        lines += [f"## `{notebook}`", "",
                  f"Executed in {min(secs.values()):.0f} to {max(secs.values()):.0f} s per seed, "
                  f"threads: {', '.join(entry['threads'])}"
                  + (f"; with a second process busy on one core under seed {', '.join(map(str, entry['busy']))}."
                     if entry["busy"] else "."), ""]
        for seed, errors in entry["errors"].items():
            for error in errors:
                lines.append(f"- seed {seed}: cell {error['cell']} raised {error['error']}")
        lines += ["| claim | depends on training | held on | values over the seeds |", "| --- | --- | --- | --- |"]
        for claim in claims:
            text = claim["text"].replace("|", "\\|")
            text = text if len(text) <= 110 else text[:107] + "..."
            lines.append(f"| `{text}` | {'yes' if claim['varies'] else 'no'} | {claim['held_on']}/{len(claim['per_seed'])} "
                         f"| {value_ranges(claim).replace('|', '/')} |")
            total += 1
            dependent += claim["varies"]
            held += claim["varies"] and claim["held_on"] == len(claim["per_seed"]) == len(seeds)
        lines.append("")
    per_seed = {s: sum(e["seconds"].get(str(s), 0) for e in report["notebooks"].values()) for s in seeds}
    lines[4:4] = [f"**{total} claims, {dependent} of them depend on training; {held} of those held on all "
                  f"{len(seeds)} seeds.** Executing the notebooks took "
                  f"{min(per_seed.values()) / 60:.0f} to {max(per_seed.values()) / 60:.0f} min per seed, besides "
                  "each seed's training (the install step's, whose parts README's test budget times).", ""]
    return "\n".join(lines) + "\n"


def write_report(seeds, notebooks, log):
    report = summarise(seeds, notebooks)
    REPORT.mkdir(exist_ok=True)
    (REPORT / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (REPORT / "report.md").write_text(markdown(report))
    failing = [(nb, c["text"]) for nb, e in report["notebooks"].items() for c in e["claims"]
               if c["held_on"] < len(seeds)]
    for nb, text in failing:
        log(f"FAILED on some seed: {nb}: assert {text}")
    log(f"report: {REPORT.relative_to(ROOT)}/report.md ({len(failing)} claims failed on some seed)")
    return not failing


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python tools/claims.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-4", help="a range (0-4) or a list (0,2,5); default 0-4")
    parser.add_argument("--only", nargs="*", default=None, help="notebooks (names or stems) to execute again")
    parser.add_argument("--busy", action="store_true", help="keep one core busy while notebooks execute")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for each notebook's libraries (default: theirs; 1 where other work shares the "
                             "machine, since torch's threads slow many times over on busy cores)")
    parser.add_argument("--report", action="store_true", help="only rewrite the report from the records")
    args = parser.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        print(f"claims: {error}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    os.nice(10)
    notebooks = NOTEBOOKS
    if args.only:
        notebooks = [nb for nb in NOTEBOOKS if Path(nb).stem in args.only or nb in args.only]
        unknown = set(args.only) - {Path(nb).stem for nb in notebooks} - set(notebooks)
        if unknown:
            print(f"claims: --only names no notebook the tool executes: {sorted(unknown)}", file=sys.stderr)
            return 2
        for seed in seeds:
            for nb in notebooks:
                record_path(seed, nb).unlink(missing_ok=True)

    def log(line):
        print(f"[{time.strftime('%H:%M:%S')}] claims: {line}", flush=True)

    start = time.perf_counter()
    if not args.report:
        trainings = Trainings(seeds, log)
        for seed in seeds:
            trainings.wait(seed)
            for nb in notebooks:
                execute(seed, nb, log, busy=args.busy, trainings=trainings, threads=args.threads)
    ok = write_report(seeds, NOTEBOOKS, log)
    log(f"done in {(time.perf_counter() - start) / 60:.1f} min")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
