"""Judging answers in the grader's own process: reading the records that came through the answers pipe, comparing each with its test, gating edge tests.

Everything here reads what the sandbox wrote, which is hostile until checked: records are
decoded with grader/runner.py's codec (which refuses what `encode` would not have written),
texts are cut to MAX_TEXT and escaped, and a check that raises on a lying value fails that test
only.
"""
from __future__ import annotations

import json
import re

from .results import MAX_TEXT, json_structure, printable
from .runner import MAX_LINE_BYTES, MAX_STRUCTURE, decode
from .spec import Test, Verdict


RECORD_ID = re.compile(rb'\{"id": "([A-Za-z0-9_]{1,16})", ')     # how the runner starts a record


def read_answers(data: bytes, ids) -> dict:
    """{id: record} from what came through the answers pipe: JSON lines whose id is one of
    `ids` (or __start__, __load__, __done__), of the runner's shape; values decoded and checked
    (runner.decode). Anything else is skipped; the last record of an id wins. A line longer than
    MAX_LINE_BYTES, or with more than MAX_STRUCTURE brackets and commas, is refused before it is
    parsed (its test gets an error), so that parsing costs at most a small multiple of its size."""
    wanted = {"__start__", "__load__", "__done__", *ids}
    records = {}
    for line in data.split(b"\n"):
        if len(line) > MAX_LINE_BYTES or json_structure(line) > MAX_STRUCTURE:
            found = RECORD_ID.match(line)
            if found and found[1].decode() in wanted:
                records[found[1].decode()] = {"ok": False, "error": {
                    "type": "AnswerTooLarge", "blocked": False,
                    "message": f"the answer is over {MAX_LINE_BYTES >> 20} MiB or {MAX_STRUCTURE:,} values as JSON"}}
            continue
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError):
            continue                                          # a half-written or foreign line
        if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] in wanted \
                and isinstance(raw.get("ok"), bool):
            records[raw["id"]] = _record(raw)
    return records


def _record(raw: dict) -> dict:
    if raw["ok"]:
        if "value" not in raw:
            return {"ok": True}
        try:
            return {"ok": True, "value": decode(raw["value"])}
        except (ValueError, TypeError, RecursionError) as exc:
            return {"ok": False, "error": {"type": "BadAnswer", "blocked": False,
                                           "message": f"the answer could not be read: {exc}"}}
    error = raw.get("error") if isinstance(raw.get("error"), dict) else {}

    def text(key):
        value = error.get(key)
        return printable(value[:MAX_TEXT]) if isinstance(value, str) else ""
    return {"ok": False, "error": {"type": text("type"), "message": text("message"), "blocked": error.get("blocked") is True}}


def error_text(error: dict) -> str:
    if error.get("blocked"):
        return f"called a blocked lib reference ({error.get('message', '')})"
    return f"{error.get('type') or 'Error'}: {error.get('message', '')}".strip()


def judge(test: Test, record: dict | None, missing: str) -> Verdict:
    if record is None:
        return Verdict(False, missing)
    if not record["ok"]:
        if test.expect_error and record["error"]["type"] == test.expect_error:
            return Verdict(True, f"raised {test.expect_error} as required")
        return Verdict(False, error_text(record["error"]))
    if test.expect_error:
        return Verdict(False, f"returned a value; expected it to raise {test.expect_error}")
    try:
        return Verdict(*test.check(record.get("value")))
    except Exception as exc:                                  # noqa: BLE001 - a hostile value
        return Verdict(False, f"the answer could not be compared: {type(exc).__name__}: {exc}")


def gate(tests: list[Test], verdicts: list[Verdict]) -> list[Verdict]:
    """Edge tests earn nothing while another test of their function fails: a trivial answer
    (a constant, a function that always raises) gets edge cases right by accident. A test that
    `requires` other functions earns nothing while any test of theirs fails."""
    failing = {t.function for t, v in zip(tests, verdicts) if not t.edge and not v.passed}
    broken = {t.function for t, v in zip(tests, verdicts) if not v.passed}
    out = []
    for t, v in zip(tests, verdicts):
        unmet = [name for name in t.requires if name in broken]
        if v.passed and t.edge and t.function in failing:
            v = Verdict(False, f"{v.message}, but an edge case counts only once the other tests of "
                               f"{t.function} pass", v.detail)
        elif v.passed and unmet:
            v = Verdict(False, f"{v.message}, but {t.function} counts only once every test of "
                               f"{' and '.join(unmet)} passes", v.detail)
        out.append(v)
    return out
