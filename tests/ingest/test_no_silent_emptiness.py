"""A source that yields nothing to replay fails with a sentence naming what it looked for and what the records
hold; a metadata path that no record has is a warning naming the nearest names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.exceptions import SourceError, SourceWarning
from delta_eval.ingest.describe import field_paths, nearest_paths


def _generations(path: Path, n: int = 3) -> Path:
    """Records shaped like a trace tool's export: the answer sits in another field than the messages."""
    records = [
        {
            "id": f"g{i}",
            "kind": "generation",
            "input": [{"role": "system", "content": "be kind"}, {"role": "user", "content": f"hi {i}"}],
            "output": {"role": "assistant", "content": "hello"},
            "user": {"tier": "gold"},
        }
        for i in range(n)
    ]
    path.write_text("\n".join(map(json.dumps, records)) + "\n")
    return path


def _run(source: de.ConversationSource, out: Path) -> de.RunResult:
    return de.run(
        conversations=source,
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b"),
        out=out,
    )


def test_a_mapping_with_no_assistant_turn_says_what_it_found(tmp_path: Path) -> None:
    source = de.read_conversations(_generations(tmp_path / "export.jsonl"), messages="input")
    with pytest.raises(SourceError) as caught:
        _run(source, tmp_path / "run")
    said = str(caught.value)
    assert "3 conversations read from" in said
    assert "none has an assistant turn to replay" in said
    assert "2 messages at 'input' (roles: system, user; no assistant message)" in said
    assert "its fields: id, input, kind, output, user" in said


def test_a_missing_messages_field_is_named(tmp_path: Path) -> None:
    source = de.read_conversations(_generations(tmp_path / "export.jsonl"), messages="input")
    source.mapping = source.mapping.model_copy(update={"messages": "turns"})
    assert source.describe().startswith("the first record has no field at 'turns'; its fields: id, input")


def test_records_in_another_native_format_are_named(tmp_path: Path) -> None:
    record = {
        "id": "a",
        "system": "be kind",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        ],
    }
    path = tmp_path / "anthropic.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert "message_format='anthropic' reads them" in de.read_conversations(path).describe()


def test_a_metadata_path_in_no_record_warns_with_the_nearest_names(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    rows = [{"id": str(i), "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
             "user": {"tier": "gold"}} for i in range(3)]  # fmt: skip
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    with pytest.warns(SourceWarning, match=r"'tier' \(path 'usr\.tier'\) is in no record.*nearest names in the first "
                      r"record: user\.tier"):  # fmt: skip
        good, _ = de.read_conversations(path, metadata={"tier": "usr.tier"}).load()
    assert len(good) == 3
    with pytest.warns(SourceWarning, match="nearest names in the first record: user.tier"):
        de.read_conversations(path, metadata=["tier"]).load()  # the field, nested elsewhere


def test_a_metadata_path_some_records_have_does_not_warn(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    path = tmp_path / "export.jsonl"
    rows = [{"id": str(i), "messages": [{"role": "user", "content": "hi"}], **({"tier": "gold"} if i else {})}
            for i in range(3)]  # fmt: skip
    path.write_text("\n".join(map(json.dumps, rows)) + "\n")
    de.read_conversations(path, metadata=["tier"]).load()
    assert not [w for w in recwarn if issubclass(w.category, SourceWarning)]


_keys = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
_records = st.recursive(st.integers() | st.text(max_size=3), lambda inner: st.dictionaries(_keys, inner, max_size=4),
                        max_leaves=12)  # fmt: skip


@given(_records)
def test_every_field_path_reads_back_from_the_record(record: object) -> None:
    from delta_eval.paths import MISSING, get_path

    for path in field_paths(record):
        assert get_path(record, path) is not MISSING


@given(st.dictionaries(_keys, st.dictionaries(_keys, st.integers(), max_size=3), min_size=1, max_size=4))
def test_a_field_nested_elsewhere_is_nearest(record: dict[str, dict[str, int]]) -> None:
    for outer, inner in record.items():
        for leaf in inner:
            assert (
                f"{outer}.{leaf}" in nearest_paths(f"nowhere.{leaf}", [record])
                or len([p for p in field_paths(record) if p.rsplit(".", 1)[-1] == leaf]) > 3
            )
