"""JSONL IO: malformed input is reported with file:line and field, skipped or fatal."""

import gzip
import json

import pytest

from coevo_jax.data import Record, RecordError, read_records, write_records
from coevo_jax.data.jsonl import dumps_records, iter_rows


def _records(n=3):
    return [
        Record(
            id=f"m/{i}",
            source="gsm8k",
            split="train",
            cls="math",
            problem=f"{i}+1?",
            true_answer=str(i + 1),
        )
        for i in range(n)
    ]


def test_write_read_round_trip(tmp_path):
    recs = _records()
    data = write_records(tmp_path / "a.jsonl", recs)
    assert data == (tmp_path / "a.jsonl").read_bytes() == dumps_records(recs)
    assert read_records(tmp_path / "a.jsonl") == recs
    assert not list(tmp_path.glob("*.tmp"))


def _bad_file(tmp_path):
    good = [r.to_json() for r in _records(2)]
    missing = json.dumps(
        {"id": "m/9", "source": "gsm8k", "split": "train", "class": "math", "true_answer": "1"}
    )
    wrong = json.dumps(
        {
            "id": "m/8",
            "source": "gsm8k",
            "split": "train",
            "class": "math",
            "problem": "p",
            "true_answer": 7,
        }
    )
    lines = [good[0], missing, "{not json", wrong, "", good[1], "[1, 2]"]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_lines_are_fatal_with_file_line_and_field(tmp_path):
    path = _bad_file(tmp_path)
    with pytest.raises(RecordError) as ei:
        read_records(path)
    e = ei.value
    assert (e.path, e.line, e.field) == (str(path), 2, "problem")
    assert str(e).startswith(f"{path}:2: ") and "'problem'" in str(e)


def test_malformed_lines_skipped_and_reported(tmp_path):
    path = _bad_file(tmp_path)
    errors: list[RecordError] = []
    recs = read_records(path, on_error="skip", errors=errors)
    assert [r.id for r in recs] == ["m/0", "m/1"]
    assert [(e.line, e.field) for e in errors] == [
        (2, "problem"),
        (3, None),
        (4, "true_answer"),
        (7, None),
    ]
    assert "invalid JSON" in str(errors[1]) and "expected str, got int" in str(errors[2])
    assert all(str(e).startswith(f"{path}:{e.line}: ") for e in errors)


def test_truncated_gzip_reported_at_first_unreadable_line(tmp_path):
    full = tmp_path / "full.jsonl.gz"
    lines = [r.to_json() for r in _records(200)]
    with gzip.open(full, "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    cut = tmp_path / "cut.jsonl.gz"
    raw = full.read_bytes()
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.raises(RecordError, match="truncated or corrupt") as ei:
        read_records(cut)
    assert ei.value.path == str(cut) and ei.value.line is not None
    errors: list[RecordError] = []
    recs = read_records(cut, on_error="skip", errors=errors)
    assert len(errors) == 1
    # every record before the damage is returned; the error names the line after the last one
    # (or the last, partially decoded line)
    assert 0 < len(recs) < 200
    assert errors[0].line in (len(recs) + 1, len(recs) + 2)


def test_iter_rows_json_layouts_and_locations(tmp_path):
    p = tmp_path / "task.json"
    p.write_text(json.dumps({"canary": "x", "examples": [{"input": "a", "target": "b"}, 3]}))
    errors = []
    rows = list(iter_rows(p, on_error="skip", errors=errors))
    assert rows == [(str(p), 1, {"input": "a", "target": "b"})]
    assert errors[0].line == 2 and "not an object" in str(errors[0])
    with pytest.raises(ValueError, match="unsupported file type"):
        list(iter_rows(tmp_path / "x.csv"))
