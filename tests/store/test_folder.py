from __future__ import annotations

import os
from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.exceptions import RunFolderError, RunFolderWarning
from delta_eval.schema import Step, ToolCall, ToolResult, TurnOutput
from delta_eval.store.folder import RunFolder
from delta_eval.store.manifest import RunManifest
from delta_eval.store.tables import TABLES


def verdict(pair: str) -> de.Verdict:
    return de.Verdict(pair_id=pair, conversation_id="c", turn_index=0, stage="judge", outcome="tie")


def manifest(status: str = "running") -> RunManifest:
    return RunManifest(status=status, fingerprint={}, config={}, source="s", baseline="b", candidate="c")  # type: ignore[arg-type]


def test_only_committed_batches_are_read_and_recover_removes_the_rest(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.write_manifest(manifest())
    folder.add("verdicts", [verdict("a"), verdict("b")])
    assert folder.commit() == 1
    # A killed process: part file renamed into place, commit never written.
    folder.add("verdicts", [verdict("c")])
    folder.commit()
    (tmp_path / "_commits" / "000002.json").unlink()
    (tmp_path / "verdicts" / ".part-000003.0123456789abcdef0123456789abcdef.tmp").write_bytes(b"half")
    assert RunFolder(tmp_path).read("verdicts").column("pair_id").to_pylist() == ["a", "b"]

    again = RunFolder(tmp_path)
    removed = again.recover()
    assert {p.name for p in removed} == {"part-000002.parquet", ".part-000003.0123456789abcdef0123456789abcdef.tmp"}
    again.add("verdicts", [verdict("c")])
    assert again.commit() == 2
    assert again.read("verdicts").column("pair_id").to_pylist() == ["a", "b", "c"]


def test_empty_commit_writes_nothing_and_empty_reads_have_schema(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.commit() is None
    assert folder.read("replays").num_rows == 0
    assert "steps" in folder.read("replays").column_names


def test_steps_round_trip_through_parquet(tmp_path: Path) -> None:
    out = TurnOutput(
        steps=(
            Step(
                text="checking",
                tool_calls=(ToolCall(id="1", name="f", arguments='{"a": '),),
                tool_results=(ToolResult(call_id="1", name="f", content="r", source="simulated"),),
            ),
        ),
        final_text="done",
    )
    r = de.Replay(
        pair_id="p",
        conversation_id="c",
        turn_index=0,
        side="candidate",
        variant="v",
        model="m",
        output=out,
        finish_reason="stop",
    )
    folder = RunFolder(tmp_path)
    folder.add("replays", [r])
    folder.add("errors", [de.ErrorRecord(stage="replay", message="m")])
    folder.commit()
    row = folder.read("replays").to_pylist()[0]
    assert row["steps"][0]["tool_calls"][0]["arguments_valid"] is False
    assert row["n_tool_calls"] == 1
    assert TABLES["replays"].parse(row) == r


def test_open_run_views(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="not a delta_eval run folder"):
        de.open_run(tmp_path)
    folder = RunFolder(tmp_path)
    folder.write_manifest(manifest("completed"))
    con = de.open_run(tmp_path)
    for view in ("replays", "verdicts", "judgements", "errors", "conversations", "strata", "pairs", "tool_calls"):
        assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (0,)
    folder.add("verdicts", [verdict("x")])
    folder.commit()
    assert de.open_run(tmp_path).execute("SELECT pair_id, outcome FROM pairs").fetchall() == [("x", "tie")]


def test_open_run_keeps_what_the_user_makes_in_their_file_and_opens_it_again(tmp_path: Path) -> None:
    import duckdb

    run, db = tmp_path / "run", tmp_path / "my-analysis.duckdb"
    folder = RunFolder(run)
    folder.write_manifest(manifest("completed"))
    folder.add("verdicts", [verdict("x")])
    folder.commit()
    con = de.open_run(run, database=db)  # (a path, or its text)
    con.execute("CREATE TABLE kept AS SELECT pair_id FROM pairs")
    assert con.execute("SELECT current_database()").fetchone() == ("my_analysis",)
    # A cursor starts in memory: the run's views, and the file's tables by their full names.
    assert con.cursor().execute("SELECT count(*) FROM my_analysis.main.kept").fetchone() == (1,)
    con.close()
    # The file holds the user's table alone: none of the run's views (they name this process's open files).
    with duckdb.connect(str(db)) as plain:
        assert plain.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall() == [
            ("kept", "BASE TABLE")
        ]
    folder.add("verdicts", [verdict("y")])
    folder.commit()
    again = de.open_run(run, database=str(db))  # opens again, with the run as it is now
    assert again.execute("SELECT pair_id FROM verdicts ORDER BY 1").fetchall() == [("x",), ("y",)]
    assert again.execute("SELECT * FROM kept").fetchall() == [("x",)]
    assert again.cursor().execute("SELECT count(*) FROM pairs").fetchone() == (2,)  # a cursor sees the views
    # Open in another connection of this process (an earlier open_run of it too): said, with what to do.
    with pytest.raises(RunFolderError, match=r"open in another connection of this process.*close it first"):
        de.open_run(run, database=str(db))
    again.close()


def test_open_run_drops_what_a_version_before_left_in_the_user_s_file(tmp_path: Path) -> None:
    """A version before made the run's views (and empty tables) in the file: they read this process's files by
    descriptor, gone once it ended. Whatever is asked for now, they are dropped (with a warning), so that nothing
    reads them as the run's (its tallies among them); a table of the user's named as a view of the run's is an
    error, in any case of its name, and leaves the file free."""
    import duckdb

    from delta_eval.store.views import replay_tallies_of, tallies_of

    run, db = tmp_path / "run", tmp_path / "a.duckdb"
    folder = RunFolder(run)
    folder.write_manifest(manifest("completed"))
    folder.add("verdicts", [verdict("x")])
    folder.commit()
    gone = tmp_path / "gone.parquet"  # (what the old views read: a file of a process long gone)
    with duckdb.connect(str(db)) as plain:
        plain.execute(f"COPY (SELECT 'old' AS pair_id) TO '{gone}' (FORMAT parquet)")
        plain.execute("CREATE TABLE _replays_empty (pair_id VARCHAR)")
        for name in ("verdicts", "replay_tallies", "verdict_tallies", "Pairs"):
            plain.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{gone}')")
        plain.execute("CREATE TABLE mine AS SELECT 1 AS n")
    gone.unlink()
    with pytest.warns(RunFolderWarning, match="dropped '_replays_empty', 'Pairs', 'replay_tallies', 'verdicts'"):
        con = de.open_run(run, database=str(db), datasets=["verdicts"])
    assert con.execute("SELECT pair_id FROM verdicts").fetchall() == [("x",)]
    assert (tallies_of(con), replay_tallies_of(con)) == (None, None)
    assert con.execute("SELECT n FROM mine").fetchall() == [(1,)]
    con.close()
    with duckdb.connect(str(db)) as plain:
        assert plain.execute("SELECT table_name FROM information_schema.tables").fetchall() == [("mine",)]
        plain.execute("CREATE TABLE Replays AS SELECT 1 AS n")
    with pytest.raises(RunFolderError, match="table named 'Replays'") as raised:
        de.open_run(run, database=str(db))
    with duckdb.connect(str(db)) as plain:  # (while the error lives on: the file was let go)
        assert plain.execute("SELECT n FROM Replays").fetchall() == [(1,)]
    assert raised.value is not None


def test_open_run_makes_the_views_asked_alone(tmp_path: Path) -> None:
    import duckdb

    folder = RunFolder(tmp_path)
    folder.write_manifest(manifest("completed"))
    folder.add("verdicts", [verdict("x"), verdict("y~b").model_copy(update={"candidate": "b"})])
    folder.commit()
    con = de.open_run(tmp_path, datasets=("verdicts",))
    assert con.execute("SELECT pair_id FROM verdicts ORDER BY pair_id").fetchall() == [("x",), ("y~b",)]
    for view in ("replays", "pairs"):
        with pytest.raises(duckdb.CatalogException):
            con.execute(f"SELECT * FROM {view}")
    # a candidate's own verdicts, as in a run of its own
    mine = de.open_run(tmp_path, candidate="b", datasets=("verdicts", "errors"))
    assert mine.execute("SELECT pair_id FROM verdicts").fetchall() == [("y~b",)]
    assert mine.execute("SELECT count(*) FROM errors").fetchone() == (0,)


def test_batches_written_with_other_columns_read_as_one_view(tmp_path: Path) -> None:
    # A run resumed by a version that added a column: its first batch lacks it. The view reads every batch, the
    # missing column as nulls (DuckDB reads files by position unless told to match names), and a folder whose
    # batches agree reads the same.
    import json

    import pyarrow.parquet as pq

    folder = RunFolder(tmp_path)
    folder.write_manifest(manifest("completed"))
    for pair in ("x", "y", "z"):
        folder.add("verdicts", [verdict(pair)])
        folder.commit()
    rows = "SELECT pair_id, stage, outcome, conversation_key IS NULL FROM verdicts ORDER BY pair_id"
    whole = de.open_run(tmp_path).execute(rows).fetchall()
    assert [row[3] for row in whole] == [False, False, False]
    record_path = tmp_path / "_commits" / "000002.json"
    record = json.loads(record_path.read_text())
    (rel,) = record["files"]["verdicts"]
    older = pq.read_table(tmp_path / rel)
    older = older.drop_columns(["conversation_key"])
    older = older.select(list(reversed(older.column_names)))  # and in another order
    pq.write_table(older, tmp_path / rel)
    record["sizes"][rel] = (tmp_path / rel).stat().st_size
    record_path.write_text(json.dumps(record))
    assert folder.damage() == []
    mixed = de.open_run(tmp_path).execute(rows).fetchall()
    assert mixed == [whole[0], (*whole[1][:3], True), whole[2]]


def test_damaged_commit_is_reported(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.add("verdicts", [verdict("a")])
    folder.commit()
    (tmp_path / "_commits" / "000001.json").write_text("{")
    assert folder.commits() == []
    assert [str(d) for d in folder.damage()] == [
        "batch 1: _commits/000001.json is not readable JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))"
    ]
    assert os.path.exists(tmp_path / "verdicts" / "part-000001.parquet")
