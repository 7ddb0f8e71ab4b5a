"""Every `python -m lib.*` command the book mentions answers bad input with one clear line (the
value and what was expected) and exit status 2, never a traceback."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ITEM = {"ctx": "A man opens the door", "endings": ["and walks in.", "of the sky.", "blue.", "at noon."],
        "label": 0}
FILES = {"empty.jsonl": "",
         "malformed.jsonl": json.dumps(ITEM) + '\n{"ctx": "a", "endings": [\n',
         "label.jsonl": json.dumps({**ITEM, "label": 7}) + "\n",
         "good.jsonl": json.dumps(ITEM) + "\n"}

# (command line, a fragment its error line must hold); {tmp} is the test's folder
CASES = [
    ("lib.evaluate hellaswag --file {tmp}/empty.jsonl", "empty.jsonl holds no items: expected one JSON object"),
    ("lib.evaluate hellaswag --file {tmp}/malformed.jsonl", "malformed.jsonl, line 2: not JSON"),
    ("lib.evaluate hellaswag --file {tmp}/label.jsonl", "label.jsonl, line 1: label 7 does not index its 4 "
                                                        "endings; expected 0 to 3"),
    ("lib.evaluate hellaswag --file {tmp}/missing.jsonl", "missing.jsonl"),
    ("lib.evaluate hellaswag --file {tmp}/good.jsonl --items 0", "--items 0: expected a positive number"),
    ("lib.evaluate hellaswag --file {tmp}/good.jsonl --model {tmp}/no_model", "no_model is not a folder"),
    ("lib.sample {tmp}/no_model", "no_model is not a folder: expected"),
    ("lib.sample {tmp} --top-p 2", "top_p must be None or a number in (0, 1], got 2.0"),
    ("lib.sample {tmp} --max-new-tokens -1", "--max-new-tokens -1: expected 0 or more"),
    ("lib.train --data {tmp}/missing.txt", "'{tmp}/missing.txt' is neither 'shakespeare' nor an existing file"),
    ("lib.shards {tmp}/shards --files {tmp}/missing.txt", "missing.txt is neither a text file nor a folder"),
    ("lib.finetune --device", "argument --device: expected one argument"),
    ("lib.assets fetch --bogus", "usage: python -m lib.assets fetch [--force]; got fetch --bogus"),
    ("lib.bench nothing", "usage: python -m lib.bench {forward,tokenizer,train,decode,gpu}"),
    ("lib.bench forward --cases none", "argument --cases: invalid choice: 'none'"),
]


@pytest.mark.parametrize("command, fragment", CASES, ids=[c for c, _ in CASES])
def test_bad_input_gets_one_clear_line_and_status_2(tmp_path, command, fragment):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", *command.replace("{tmp}", str(tmp_path)).split()], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert fragment.replace("{tmp}", str(tmp_path)) in last, last
    module = command.split()[0]
    assert last.startswith((f"python -m {module}", "usage: python -m lib.")), last
