"""No bad record stops a run: each becomes an ``errors`` row naming the file, the record and the field, and the
run goes on; a source with nothing readable ends the run with a message saying why, its bad records kept."""

from __future__ import annotations

import datetime
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.cli import main
from delta_eval.demo import demo_config
from delta_eval.exceptions import RecordError, SourceError
from delta_eval.mapping import FieldMapping


@pytest.fixture(scope="module")
def lines(tau_raw: list[dict[str, Any]]) -> list[bytes]:
    """Six tau-bench conversations as JSONL lines."""
    return [
        json.dumps({"id": f"{r['task_id']}/{r['trial']}", "messages": r["traj"], "reward": r["reward"]}).encode()
        for r in tau_raw[:6]
    ]


def run(out: Path, source: Any) -> de.RunResult:
    cfg = demo_config(out, n=6, latency_ms=0.0, judges="rule").model_copy(update={"sample": de.Stratified(n=6)})
    return de.run(cfg, conversations=source)


def errors_of(result: de.RunResult) -> list[dict[str, Any]]:
    return result.table("errors").select(["stage", "source", "record", "field", "message"]).to_pylist()


def with_deep_arguments(line: bytes) -> bytes:
    record = json.loads(line)
    for m in record["messages"]:
        if m.get("tool_calls"):
            m["tool_calls"][0]["function"]["arguments"] = "[" * 10_000 + "]" * 10_000
            break
    return json.dumps(record).encode()


CASES = {
    "invalid UTF-8 in a line": (
        lambda ls: b"\n".join([*ls[:2], ls[2][:40] + b"\xff\xfe" + ls[2][40:], *ls[3:]]),
        "data.jsonl",
        ("line 3", "", "not valid UTF-8 (byte 0xff at column 41)"),
    ),
    "JSON nested 10,000 deep in a record": (
        lambda ls: b"\n".join(
            [*ls[:3], b'{"id": "deep", "messages": [], "x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", *ls[3:]]
        ),
        "data.jsonl",
        ("line 4", "", "nested too deep"),
    ),
    "JSON nested 10,000 deep in tool arguments": (
        lambda ls: b"\n".join([with_deep_arguments(ls[0]), *ls[1:]]),
        "data.jsonl",
        ("line 1 (id ", ".function.arguments", "arguments nest 10000 levels deep (at most 100)"),
    ),
    "a truncated .gz": (
        lambda ls: (blob := gzip.compress(b"\n".join(ls)))[: len(blob) * 2 // 3],
        "data.jsonl.gz",
        ("after line ", "", "the file ends early or is damaged here (EOFError"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_record_is_an_error_row_and_the_run_goes_on(tmp_path: Path, lines: list[bytes], case: str) -> None:
    make, name, (record, field, message) = CASES[case]
    path = tmp_path / name
    path.write_bytes(make(lines))
    result = run(tmp_path / "run", de.read_conversations(path))
    assert result.status == "completed"
    assert result.counts.pairs > 0
    assert result.counts.read_errors == 1
    [row] = [e for e in errors_of(result) if e["stage"] == "ingest"]
    assert row["source"] == str(path)
    assert row["record"].startswith(record)
    assert row["field"].endswith(field)
    assert message in row["message"]


def test_tool_arguments_as_objects_with_database_values_read_as_json(tmp_path: Path, lines: list[bytes]) -> None:
    # DuckDB reads a date-like string in an arguments object as a DATE: it goes back to the same text.
    records = [json.loads(line) for line in lines]
    for r in records:
        for m in r["messages"]:
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = {"travel_date": "2024-05-15", **json.loads(c["function"]["arguments"])}
    path = tmp_path / "dict_args.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records))
    source = de.read_conversations_sql(f"SELECT * FROM read_json_auto('{path}')")
    result = run(tmp_path / "run", source)
    assert result.status == "completed"
    assert result.counts.read_errors == 0
    calls = [c for conv in source.load()[0] for m in conv.messages for c in m.tool_calls]
    assert calls
    assert all(json.loads(c.arguments)["travel_date"] == "2024-05-15" for c in calls)


def test_arguments_that_cannot_be_json_name_their_field() -> None:
    record = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"b": b"\x00"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    }
    with pytest.raises(RecordError, match="arguments cannot be written as JSON") as info:
        FieldMapping().to_conversation(record, source="db", label="row 3")
    assert info.value.field == "messages[1].tool_calls[0].function.arguments"
    good = {**record, "messages": [*record["messages"]]}
    good["messages"][1] = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"d": datetime.date(2024, 5, 15)}}}],
    }
    conv = FieldMapping().to_conversation(good, source="db", label="row 3")
    assert conv.messages[1].tool_calls[0].arguments == '{"d": "2024-05-15"}'


def test_a_source_with_nothing_readable_ends_the_run_saying_why(tmp_path: Path) -> None:
    for name, content, said in [
        ("empty.jsonl", b"", "empty.jsonl holds no records"),
        ("export.json", b"id,messages\n1,hello\n", "export.json could not be read: "),
        ("export.jsonl", b"id,messages\n1,hello\n", "none of the 2 records of "),
    ]:
        path = tmp_path / name
        path.write_bytes(content)
        out = tmp_path / f"run-{name}"
        with pytest.raises(SourceError, match=said):
            run(out, de.read_conversations(path))
        result = de.open_result(out)
        assert result.status == "failed"
        assert result.manifest.failure is not None
        assert said in result.manifest.failure
        assert len(errors_of(result)) == result.counts.read_errors == result.counts.read


def test_a_derived_stratum_that_fails_on_every_record_keeps_the_errors(tmp_path: Path, lines: list[bytes]) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\n".join(lines))

    def broken(conv: de.Conversation) -> str:
        raise KeyError("task_kind")

    cfg = demo_config(tmp_path / "run", n=6, latency_ms=0.0, judges="rule").model_copy(
        update={"sample": de.Stratified(n=6, by=["kind"], derived={"kind": broken})}
    )
    with pytest.raises(SourceError, match=r"no conversation of .* could be placed in a stratum \(6 errors"):
        de.run(cfg, conversations=de.read_conversations(path))
    rows = errors_of(de.open_result(tmp_path / "run"))
    assert len(rows) == 6
    assert {r["field"] for r in rows} == {"kind"}
    assert all("derived stratum 'kind' failed" in r["message"] for r in rows)


def test_the_cli_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    config = tmp_path / "eval.toml"
    config.write_text(
        'out = "run"\n[source]\npath = "empty.jsonl"\n[baseline]\nmodel = "simulated:a"\n'
        '[candidate]\nmodel = "simulated:b"\n'
    )
    assert main(["run", str(config), "--no-progress"]) == 5  # the run started, then failed: no decision to gate on
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"delta-eval: error: {tmp_path / 'empty.jsonl'} holds no records"]
