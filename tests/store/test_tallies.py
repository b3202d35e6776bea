"""The verdicts' tallies of a run folder (delta_eval.store.tallies): written with each batch's verdicts, counted
again from the rows a merge or a removal leaves, read only where every batch with verdicts has them, and the win
rate from them the win rate over the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.metrics.estimand import Estimand
from delta_eval.store import compaction, safe_paths
from delta_eval.store.derived import derived_parts
from delta_eval.store.folder import RunFolder
from delta_eval.store.manifest import RunManifest
from delta_eval.store.tallies import KEYS, TALLIES, tally
from delta_eval.store.views import open_run, tallies_of

OUTCOMES = ["candidate", "baseline", "tie", "equivalent", "error"]


def _manifest() -> RunManifest:
    return RunManifest(status="completed", fingerprint={}, config={}, source="s", baseline="b", candidate="c")  # type: ignore[arg-type]


def _folder(out: Path, batches: int = 20, per: int = 5) -> RunFolder:
    """``batches`` batches of ``per`` verdicts each, of conversations that span batches, with errors of each kind."""
    folder = RunFolder(out)
    folder.write_manifest(_manifest())
    for b in range(batches):
        verdicts = []
        for i in range(per):
            k = b * per + i
            outcome = OUTCOMES[k % 5]
            verdicts.append(de.Verdict(
                pair_id=f"p{k}", conversation_id=f"c{k % 7}", turn_index=k, stage="judge", outcome=outcome,
                stratum=f"s{k % 7 % 3}", error="baseline replay failed: 500" if outcome == "error" and k % 2 else
                ("judge answer malformed" if outcome == "error" else None),
            ))  # fmt: skip
        folder.add("verdicts", verdicts)
        folder.commit()
    return folder


def _summed(table: pa.Table) -> dict[tuple[object, ...], int]:
    """Tallies added up by their keys (the same verdicts tallied in other batches give other rows, the same sums)."""
    out: dict[tuple[object, ...], int] = {}
    for row in table.cast(pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
                                     for f in table.schema])).to_pylist():  # fmt: skip
        key = tuple(row[k] for k in KEYS)
        out[key] = out.get(key, 0) + int(row["n"])
    return out


def test_tallies_count_the_verdicts_of_each_batch_and_again_after_a_merge_and_a_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "MIN_BATCHES", 16)
    folder = _folder(tmp_path)
    tallies = folder.read_tallies()
    assert tallies is not None
    assert _summed(tallies) == _summed(tally(folder.read("verdicts")))
    assert sum(_summed(tallies).values()) == 100
    errors = {k[KEYS.index("error_side")] for k in _summed(tallies) if k[KEYS.index("outcome")] == "error"}
    assert errors == {"baseline", "judge"}  # resolved from the error's text
    merged = folder.compact()
    assert len(merged) == 1
    assert len([r for r in folder.commits() if derived_parts(r, TALLIES)]) == 1
    tallies = folder.read_tallies()
    assert tallies is not None
    assert _summed(tallies) == _summed(tally(folder.read("verdicts")))
    # A removal's rewrite counts the rows it keeps, not the old batch's tallies.
    left = folder.remove_rows(merged[0], "pair_id", {"p0", "p1", "p2"}, "taken out")
    assert left is not None
    tallies = folder.read_tallies()
    assert tallies is not None
    assert sum(_summed(tallies).values()) == 97
    assert _summed(tallies) == _summed(tally(folder.read("verdicts")))


def test_each_tallies_part_is_in_the_order_of_its_conversations_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader merges in one pass (a stable sort of sorted runs): each batch's part, and a merged part tallied
    a few verdicts at a time (its tallies added up more than once), keys ascending, nulls last."""
    from delta_eval.store import tallies as module

    monkeypatch.setattr(compaction, "MIN_BATCHES", 16)
    monkeypatch.setattr(module, "READ_ROWS", 3)
    monkeypatch.setattr(module, "FOLD", 2)
    folder = _folder(tmp_path)

    def parts() -> list[list[int | None]]:
        return [pq.read_table(tmp_path / rel).column("conversation_key").to_pylist()
                for r in folder.commits() for rel in derived_parts(r, TALLIES)]  # fmt: skip

    def ordered(keys: list[int | None]) -> bool:
        known = [k for k in keys if k is not None]
        return known == sorted(known) and keys[: len(known)] == known

    assert len(parts()) == 20
    assert all(ordered(p) for p in parts())
    folder.compact()
    (merged,) = parts()
    assert ordered(merged)
    assert len(set(merged)) == 7
    assert len(merged) > 7  # several rows a conversation
    keyless = tally(pa.table({"conversation_key": pa.array([5, None, 2, 5, None, 1], pa.int64()),
                              "outcome": ["tie", "tie", "candidate", "baseline", "tie", "tie"]}))  # fmt: skip
    assert keyless.column("conversation_key").to_pylist() == [1, 2, 5, 5, None]


def test_a_batch_without_tallies_leaves_them_unread_until_a_merge_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder written before tallies existed (a batch of verdicts without them) has none to read, and no view of
    them; its merge writes them, and the win rate is the same either way."""
    monkeypatch.setattr(compaction, "MIN_BATCHES", 16)
    folder = _folder(tmp_path)
    before = de.open_result(tmp_path).win_rate(by="stratum")
    commit = tmp_path / "_commits" / "000003.json"
    record = json.loads(commit.read_bytes())
    safe_paths.unlink(tmp_path, tmp_path / record.pop("derived")[TALLIES][0])
    commit.write_text(json.dumps(record))
    assert folder.read_tallies() is None
    assert de.open_result(tmp_path)._tallied(Estimand(), None) is None
    con = open_run(tmp_path, datasets=["verdicts", TALLIES])
    views = {r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert "verdicts" in views
    assert TALLIES not in views
    con.close()
    assert de.open_result(tmp_path).win_rate(by="stratum") == before  # from the verdicts
    folder.compact()
    assert folder.read_tallies() is not None
    assert de.open_result(tmp_path)._tallied(Estimand(), None) is not None
    assert de.open_result(tmp_path).win_rate(by="stratum") == before
    con = open_run(tmp_path, datasets=["verdicts", TALLIES])
    assert con.sql(f"SELECT sum(n) FROM {TALLIES}").fetchall() == [(100,)]
    con.close()


def test_tallies_are_never_added_by_hand(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    with pytest.raises(ValueError, match="derived from a batch's verdicts"):
        folder.add(TALLIES, [])


def test_a_damaged_tallies_part_costs_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tallies cut short (a disk that filled up) leave the batch sound: its verdicts are read, nothing is dropped,
    the win rate is counted from the verdicts, and a merge counts them again."""
    monkeypatch.setattr(compaction, "MIN_BATCHES", 16)
    folder = _folder(tmp_path)
    before = de.open_result(tmp_path).win_rate()
    part = tmp_path / "verdict_tallies" / "part-000004.parquet"
    part.write_bytes(part.read_bytes()[:20])
    assert folder.damage() == []
    assert folder.read("verdicts").num_rows == 100
    assert folder.read_tallies() is None
    assert folder.repair() == []
    assert de.open_result(tmp_path).win_rate() == before
    folder.compact()
    assert folder.read_tallies() is not None
    assert de.open_result(tmp_path).win_rate() == before


def test_older_versions_see_no_tallies_and_their_rewrites_leave_none(tmp_path: Path) -> None:
    """A commit record names its tallies apart from its files (an older version checks and fetches its files only:
    it neither misses the tallies nor finds their batch damaged), and a record an older version rewrote, carrying
    the old batch's fields, names no tallies of another batch's rows."""
    folder = _folder(tmp_path, batches=2)
    record = json.loads((tmp_path / "_commits" / "000001.json").read_bytes())
    assert TALLIES not in record["files"]
    assert derived_parts(record, TALLIES) == ["verdict_tallies/part-000001.parquet"]
    # An older version's removal of rows: a new batch with the old record's other fields, its files only.
    moved = {**record, "batch": 3, "files": {"verdicts": ["verdicts/part-000003.parquet"]}}
    assert derived_parts(moved, TALLIES) == []
    (tmp_path / "verdicts" / "part-000001.parquet").rename(tmp_path / "verdicts" / "part-000003.parquet")
    (tmp_path / "_commits" / "000003.json").write_text(json.dumps({**moved, "sizes": {
        "verdicts/part-000003.parquet": (tmp_path / "verdicts" / "part-000003.parquet").stat().st_size,
        **record["sizes"]}}))  # fmt: skip
    (tmp_path / "_commits" / "000001.json").write_text(json.dumps({"batch": 1, "files": {}, "rows": {},
                                                                   "replaced_by": 3}))  # fmt: skip
    assert folder.damage() == []
    assert folder.read_tallies() is None  # batch 3 has verdicts and no tallies of its own


def test_a_decision_on_a_held_connection_reads_the_tallies_of_its_snapshot(tmp_path: Path) -> None:
    """The decision's win rates come from the tallies of its connection's snapshot, as its other figures do: a
    batch committed after the connection was opened changes neither (a new connection sees it in both)."""
    folder = _folder(tmp_path)
    result = de.open_result(tmp_path)
    con = result.connect()
    tallies = tallies_of(con)
    assert tallies is not None
    assert sum(tallies.column("n").to_pylist()) == 100
    rule = de.DecisionRule(weighted=False)
    before = result.decision(rule, con=con)
    folder.add("verdicts", [de.Verdict(pair_id=f"new{i}", conversation_id="c0", turn_index=0, stage="judge",
                                       outcome="baseline") for i in range(30)])  # fmt: skip
    folder.commit()
    assert result.decision(rule, con=con).model_dump() == before.model_dump()
    con.close()
    after = de.open_result(tmp_path).decision(rule)
    assert after.non_inferiority.win_rate.estimate < before.non_inferiority.win_rate.estimate
    assert open_run(tmp_path, datasets=["verdicts"]).execute("SELECT count(*) FROM verdicts").fetchall() == [(130,)]


def test_the_summary_reads_the_tallies_once_and_its_decision_figures_are_the_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold summary reads its connection's tallies once (for its win rates and its decision, within shared_sums;
    every call reads them outside it), and its decision is the run's decision."""
    import delta_eval.result as result_module
    from delta_eval.metrics.counted import shared_sums

    _folder(tmp_path)
    reads: list[object] = []

    def counting(con: object) -> pa.Table | None:
        reads.append(con)
        return tallies_of(con)

    monkeypatch.setattr(result_module, "tallies_of", counting)
    summary = de.analyze(tmp_path).summary()
    assert len(reads) == 1
    assert summary["decision"]["outcome"] == de.open_result(tmp_path).decision().outcome
    con = de.open_result(tmp_path).connect()
    with shared_sums():
        assert result_module.shared_tallies(con) is result_module.shared_tallies(con)
    assert result_module.shared_tallies(con) is not result_module.shared_tallies(con)
    con.close()
