from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.exceptions import ConfigError, RecordError


def good_record(i: int) -> dict[str, Any]:
    return {
        "conv": f"c{i}",
        "meta": {"tier": "gold" if i % 2 else "free", "lang": "en"},
        "messages": [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ],
    }


def test_tau_bench_export_reads_as_is(tau_conversations: list[de.Conversation], tau_raw: list[dict[str, Any]]) -> None:
    assert len(tau_conversations) == 200
    roles = [m.role for c in tau_conversations for m in c.messages]
    assert roles.count("assistant") == 2454
    assert roles.count("tool") == 1164
    assert sum(len(m.tool_calls) for c in tau_conversations for m in c.messages) == 1164
    first = tau_conversations[0]
    assert first.id == f"{tau_raw[0]['task_id']}/{tau_raw[0]['trial']}"
    assert first.metadata["actions"] == tau_raw[0]["info"]["task"]["actions"]
    assert len(first.tools) == 14
    # Messages are kept exactly as recorded.
    assert [m.content for m in first.messages] == [m.get("content") for m in tau_raw[0]["traj"]]


def test_jsonl_with_broken_lines_keeps_good_records_and_names_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    lines = [
        json.dumps(good_record(0)),
        '{"conv": "broken", "messages": [',  # malformed JSON
        json.dumps({**good_record(2), "messages": [{"role": "robot", "content": "x"}]}),
        json.dumps(good_record(3)),
        "",
        json.dumps(
            {
                **good_record(4),
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "nope", "content": "r"},
                ],
            }
        ),
        json.dumps(good_record(0)),  # duplicate id
    ]
    path.write_text("\n".join(lines) + "\n")
    source = de.read_conversations(path, id="conv", metadata={"tier": "meta.tier"})
    good, bad = source.load()
    assert [c.id for c in good] == ["c0", "c3"]
    assert good[1].metadata == {"tier": "gold"}
    assert [(e.record.split(" (")[0], e.field) for e in bad] == [
        ("line 2", ""),
        ("line 3", "messages[0].role"),
        ("line 6", "messages[1].tool_call_id"),
        ("line 7", "id"),
    ]
    assert all(e.source == str(path) for e in bad)
    assert "not valid JSON" in bad[0].reason
    assert "duplicate conversation id 'c0'" in bad[3].reason


def test_id_template_and_missing_field(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(
        json.dumps(
            [
                {"a": 1, "b": {"c": "z"}, "messages": [{"role": "user", "content": "q"}]},
                {"a": 2, "messages": [{"role": "user", "content": "q"}]},
            ]
        )
    )
    good, bad = de.read_conversations(path, id="{a}-{b.c}").load()
    assert [c.id for c in good] == ["1-z"]
    assert bad[0].field == "id"
    assert "needs field 'b.c'" in bad[0].reason


def test_parquet_with_nested_columns_and_json_text(tmp_path: Path) -> None:
    records = [good_record(i) for i in range(5)]
    table = pa.Table.from_pylist(
        [{"conv": r["conv"], "tier": r["meta"]["tier"], "messages": r["messages"]} for r in records[:3]]
    )
    pq.write_table(table, tmp_path / "nested.parquet")
    text = pa.Table.from_pylist(
        [{"conv": r["conv"], "tier": r["meta"]["tier"], "messages": json.dumps(r["messages"])} for r in records[3:]]
    )
    pq.write_table(text, tmp_path / "text.parquet")
    good, bad = de.read_conversations(tmp_path / "nested.parquet", id="conv", metadata=["tier"]).load()
    assert bad == []
    assert [c.messages[1].content for c in good] == ["answer 0", "answer 1", "answer 2"]
    assert good[0].messages[0].tool_calls == ()
    good2, _ = de.read_conversations(tmp_path / "text.parquet", id="conv").load()
    assert [c.id for c in good2] == ["c3", "c4"]


def test_duckdb_query_source(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(json.dumps(good_record(i)) for i in range(6)) + "\n")
    source = de.read_conversations_sql(
        f"SELECT conv, meta, messages FROM read_json('{path}', format='newline_delimited') WHERE meta.tier = 'gold'",
        id="conv",
        metadata={"tier": "meta.tier"},
    )
    good, bad = source.load()
    assert bad == []
    assert [c.id for c in good] == ["c1", "c3", "c5"]
    assert {c.metadata["tier"] for c in good} == {"gold"}


def test_sql_errors_and_missing_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        de.read_conversations(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="source query failed"):
        de.read_conversations_sql("SELECT * FROM no_such_table").load()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    # A file that is not JSON is one bad record (a run over it says nothing could be read), not a crash.
    good, errors = de.read_conversations(bad).load()
    assert good == []
    assert [(e.record, e.reason.split(":")[0]) for e in errors] == [("the file", "not valid JSON")]


def test_record_error_is_a_value_error_with_parts() -> None:
    err = RecordError("f.jsonl", "line 2", "messages", "bad")
    assert isinstance(err, ValueError)
    assert str(err) == "f.jsonl, line 2, field messages: bad"
