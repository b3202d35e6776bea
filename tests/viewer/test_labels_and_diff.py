"""Labels beside the run (append-only files, newest label per person), and the word / JSON differences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from delta_eval.analysis.diff import json_diff, word_diff
from delta_eval.store.labels import Label, latest_labels, read_labels, write_labels


def test_each_batch_is_a_new_file_and_the_newest_label_of_a_person_wins(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    write_labels(tmp_path, [Label(pair_id="a#0", label="baseline"), Label(pair_id="b#0", label="same")], user="ana",
                 at=t0)  # fmt: skip
    write_labels(tmp_path, [Label(pair_id="a#0", label="candidate", note="changed my mind")], user="ana",
                 at=t0 + timedelta(minutes=1))  # fmt: skip
    write_labels(tmp_path, [Label(pair_id="a#0", label="judge_wrong")], user="bo", at=t0 + timedelta(minutes=2))
    assert len(list((tmp_path / "labels").glob("labels-*.parquet"))) == 3
    assert read_labels(tmp_path).num_rows == 4  # nothing rewritten
    latest = {(r["pair_id"], r["user"]): (r["label"], r["note"]) for r in latest_labels(tmp_path).to_pylist()}
    assert latest == {("a#0", "ana"): ("candidate", "changed my mind"), ("b#0", "ana"): ("same", ""),
                      ("a#0", "bo"): ("judge_wrong", "")}  # fmt: skip


def test_no_labels_and_bad_labels(tmp_path: Path) -> None:
    assert read_labels(tmp_path).num_rows == 0
    assert latest_labels(tmp_path).num_rows == 0
    with pytest.raises(ValidationError):
        Label(pair_id="a#0", label="great")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="who labels"):
        write_labels(tmp_path, [Label(pair_id="a#0", label="same")], user=" ")
    with pytest.raises(ValueError, match="no labels"):
        write_labels(tmp_path, [], user="ana")


def test_labels_are_never_written_through_a_link(tmp_path: Path) -> None:
    from delta_eval.exceptions import RunFolderLinkError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "labels").symlink_to(elsewhere)
    with pytest.raises(RunFolderLinkError):
        write_labels(run, [Label(pair_id="a#0", label="same")], user="ana")
    assert list(elsewhere.iterdir()) == []


def _side(segments: list[object], keep: str) -> str:
    return "".join(s.text for s in segments if s.kind in ("same", keep))  # type: ignore[attr-defined]


@given(st.text(max_size=80), st.text(max_size=80))
def test_a_word_diff_keeps_both_texts_whole(left: str, right: str) -> None:
    a, b = word_diff(left, right)
    assert _side(a, "del") == left
    assert _side(b, "ins") == right
    assert {s.kind for s in a} <= {"same", "del"}
    assert {s.kind for s in b} <= {"same", "ins"}


def test_a_json_diff_ignores_key_order_and_spacing() -> None:
    a, b = json_diff('{"b": 1, "a": [1, 2]}', '{"a":[1,2],"b":1}')
    assert {s.kind for s in a + b} == {"same"}
    a, b = json_diff('{"id": "M05"}', "not json")
    assert [s.kind for s in a] == ["del"]
    assert [s.text for s in b] == ["not json"]
