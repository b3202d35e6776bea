"""The replays' tallies of a run folder (delta_eval.store.replay_tallies): written with each batch's replays, summed
again whenever a rewrite writes a new replays part, read only while every batch with replays has them, and the
decision read from them is the decision read from the replays."""

from __future__ import annotations

import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.exceptions import RunFolderError
from delta_eval.metrics import decision_sql
from delta_eval.store import compaction
from delta_eval.store.derived import DERIVED, derive, derived_parts
from delta_eval.store.folder import RunFolder
from delta_eval.store.manifest import RunManifest
from delta_eval.store.replay_tallies import KEYS, ORDER, REPLAY_TALLIES, replay_tally, write_replay_tallies
from delta_eval.store.tables import SCHEMAS, TABLES
from delta_eval.store.tallies import TALLIES
from delta_eval.store.views import open_run, replay_tallies_of, tallies_of


def _manifest() -> RunManifest:
    return RunManifest(status="completed", fingerprint={}, config={}, source="s", baseline="b", candidate="c")  # type: ignore[arg-type]


def _replay(k: int, side: str, epoch: int = 1) -> de.Replay:
    """Pair ``k``'s replay of ``side``: tool calls (some invalid), errors, unpriced turns, texts instead of actions,
    each stored as a run stores them."""
    failed = side != "recorded" and k % 11 == 3
    calls = (k + len(side)) % 3
    return de.Replay(
        pair_id=f"p{k}", conversation_id=f"c{k % 7}", turn_index=k, epoch=epoch, side=side, variant="v", model="m",
        output=de.TurnOutput(final_text="" if k % 5 == 0 else "ok", steps=(de.Step(tool_calls=tuple(
            de.ToolCall(id=f"t{j}", name="book", arguments="{}") for j in range(calls))),)),
        finish_reason="stop", cost_usd=None if k % 13 == 5 else 0.001 * (1 + k % 4) + (0.1 if side == "candidate"
                                                                                      else 0.0),
        latency_ms=100.0 + k, invalid_tool_calls=min(calls, k % 2), matches_recorded=None if failed else k % 3 == 0,
        text_instead_of_action=k % 4 == 1, no_decision=None if failed else k % 5 == 0,
        recorded_acted=None if side == "recorded" or failed else k % 2 == 0, error="timeout" if failed else None,
    )  # fmt: skip


def _folder(out: Path, batches: int = 12, per: int = 5, epochs: int = 1) -> RunFolder:
    """``batches`` batches of ``per`` pairs each (their verdicts and three replays), of conversations that span
    batches."""
    folder = RunFolder(out)
    folder.write_manifest(_manifest())
    for b in range(batches):
        for i in range(per):
            k = b * per + i
            epoch = 1 + k % epochs
            folder.add("verdicts", [de.Verdict(pair_id=f"p{k}", conversation_id=f"c{k % 7}", turn_index=k,
                                               epoch=epoch, stage="judge",
                                               outcome=["candidate", "baseline", "tie"][k % 3])])  # fmt: skip
            folder.add("replays", [_replay(k, side, epoch) for side in ("baseline", "candidate", "recorded")])
        folder.commit()
    return folder


def _summed(table: pa.Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Tallies added up by their keys (the same replays tallied in other batches give other rows, the same sums;
    costs compared apart, to a rounding)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in table.to_pylist():
        mine = out.setdefault(tuple(row[k] for k in KEYS), {})
        for name, value in row.items():
            if name in KEYS or value is None:
                continue
            if name == "most_calls":
                mine[name] = max(mine.get(name, value), value)
            elif name == "least_calls":
                mine[name] = min(mine.get(name, value), value)
            else:
                mine[name] = mine.get(name, 0) + value
    return out


def _same(x: dict[tuple[Any, ...], dict[str, Any]], y: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    assert x.keys() == y.keys()
    for key in x:
        assert x[key].keys() == y[key].keys(), key
        for name in x[key]:
            if name == "cost":
                assert math.isclose(x[key][name], y[key][name], rel_tol=1e-15), (key, x[key][name], y[key][name])
            else:
                assert x[key][name] == y[key][name], (key, name)


def test_replay_tallies_sum_each_batch_and_again_after_a_merge_and_a_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path)
    every = folder.read("replays")
    assert len([r for r in folder.commits() if derived_parts(r, REPLAY_TALLIES)]) == 12
    _same(_summed(folder.read(REPLAY_TALLIES)), _summed(replay_tally(every)))
    assert sum(folder.read(REPLAY_TALLIES).column("n").to_pylist()) == every.num_rows == 180
    monkeypatch.setattr(compaction, "MIN_BATCHES", 8)  # (a run merges from more)
    folder.compact()
    records = folder.commits()
    assert len(records) == 1
    assert derived_parts(records[0], REPLAY_TALLIES) == [f"{REPLAY_TALLIES}/part-{records[0]['batch']:06d}.parquet"]
    merged = folder.read(REPLAY_TALLIES)
    assert merged.num_rows == len(_summed(merged))  # summed again from the merged part: one row a key
    _same(_summed(merged), _summed(replay_tally(every)))
    # A removal of rows sums the rest again.
    folder.remove_rows(int(records[0]["batch"]), "pair_id", {"p0", "p1"}, "removed by hand")
    rest = folder.read("replays")
    assert rest.num_rows == 174
    _same(_summed(folder.read(REPLAY_TALLIES)), _summed(replay_tally(rest)))


def test_replay_tallies_are_never_added_by_hand(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="derived from a batch's replays"):
        RunFolder(tmp_path).add(REPLAY_TALLIES, [])


def _decisions(path: Path) -> tuple[dict[str, Any], list[bool]]:
    """The run's decision, and for each source (the run's, then each epoch's) whose sides' sums the replays'
    tallies were asked for, whether they gave them."""
    read: list[bool] = []
    real = decision_sql._tallied_sums

    def spy(src: Any) -> Any:
        found = real(src)
        read.append(found is not None)
        return found

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decision_sql, "_tallied_sums", spy)
        decision = de.open_result(path).decision()
    return decision.model_dump(), read


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_decision_read_from_the_replay_tallies_is_the_decision_read_from_the_replays(
    tmp_path: Path, epochs: int
) -> None:
    """Through the run's views: the decision with the replays' tallies (each epoch's too) is the one without, to
    the last bit, as written (conversations in several batches: the sides' sums read from the replays, the counts
    from the tallies) and compacted into one batch (the sides' sums from the tallies too, but for a run of two
    epochs: each epoch's alone)."""
    folder = _folder(tmp_path, epochs=epochs)
    for compacted in (False, True):
        mine, read = _decisions(tmp_path)
        assert read == [compacted and epochs == 1] + [compacted] * (epochs if epochs > 1 else 0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("delta_eval.result.replay_tallies_of", lambda con: None)
            theirs = de.open_result(tmp_path).decision().model_dump()
        assert mine == theirs
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(compaction, "MIN_BATCHES", 8)
            folder.compact()


@pytest.mark.parametrize("epochs", [1, 2])
def test_token_priced_costs_of_conversations_across_batches_and_epochs_are_the_same_to_the_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, epochs: int
) -> None:
    """Costs priced by tokens (whose sums are not exact): a conversation's turns in several batches and epochs get
    their cost summed over the turns, as without tallies (each tally row's is rounded once: summed again, 6 of 30
    such runs differed in the last bit of the cost ratio and the costs per conversation); so does the same run
    compacted into one batch; the baseline against itself costs exactly as much."""
    monkeypatch.setattr(compaction, "MIN_BATCHES", 4)
    for run in range(6):
        rnd = random.Random(run)
        out = tmp_path / f"r{run}"
        folder = RunFolder(out)
        folder.write_manifest(_manifest())
        for b in range(6):
            for i in range(8):
                k, conversation, epoch = b * 8 + i, f"c{rnd.randrange(10)}", 1 + rnd.randrange(epochs)
                cost = {"baseline": rnd.randrange(200, 4000) * 3e-6 + rnd.randrange(20, 900) * 15e-6,
                        "candidate": rnd.randrange(200, 4000) * 2.5e-6 + rnd.randrange(20, 900) * 1e-5}  # fmt: skip
                if run % 2:  # the baseline against itself
                    cost["candidate"] = cost["baseline"]
                folder.add("verdicts", [de.Verdict(pair_id=f"p{k}", conversation_id=conversation, turn_index=k,
                                                   epoch=epoch, stage="judge", outcome="tie")])  # fmt: skip
                folder.add("replays", [_replay(k, side, epoch).model_copy(update={
                    "conversation_id": conversation, "cost_usd": cost.get(side), "error": None,
                    "no_decision": None if side == "recorded" else k % 5 == 0,
                    "recorded_acted": None if side == "recorded" else k % 2 == 0})
                    for side in ("baseline", "candidate", "recorded")])  # fmt: skip
            folder.commit()
        for _ in range(2):  # as written, then compacted
            mine, read = _decisions(out)
            assert read
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("delta_eval.result.replay_tallies_of", lambda con: None)
                theirs = de.open_result(out).decision().model_dump()
            assert mine == theirs, run
            ratio = next(g for g in mine["gates"] if g["gate"]["metric"] == "cost_ratio")["value"]
            if run % 2:
                assert ratio == 1.0
            folder.compact()


def test_a_cost_that_makes_no_sum_still_commits_its_batch(tmp_path: Path) -> None:
    """Costs whose exact sum has no double (an infinity of each sign; past the largest double): the batch is
    written, its tallies' cost the plain sum, as the replays' own sum gives it."""
    folder = RunFolder(tmp_path)
    folder.write_manifest(_manifest())
    costs = {"p0": [math.inf, -math.inf], "p1": [1e308, 1e308]}
    for pair, (a, b) in costs.items():
        folder.add("replays", [_replay(0, "candidate").model_copy(update={"pair_id": f"{pair}{j}", "cost_usd": c,
                                                                          "conversation_id": pair, "error": None})
                               for j, c in enumerate((a, b))])  # fmt: skip
        assert folder.commit() is not None
    tallies = folder.read(REPLAY_TALLIES).column("cost").to_pylist()
    assert sum(math.isnan(c) for c in tallies) == 1  # inf - inf
    assert [c for c in tallies if not math.isnan(c)] == [math.inf]  # 1e308 + 1e308


def _read_without_replay_tallies(path: Path, before: dict[str, Any]) -> None:
    """The run's views have no replays' tallies but the verdicts' still, and its decision, read from the replays, is
    ``before``."""
    con = open_run(path, tallies=True)
    assert replay_tallies_of(con) is None
    assert tallies_of(con) is not None
    con.close()
    after, read = _decisions(path)
    assert read == []
    assert after == before


def test_a_damaged_replay_tallies_part_costs_no_replay_and_no_verdict_tally(tmp_path: Path) -> None:
    """A replay tallies part cut short: the folder reads as it is without it (no damage, no view of the replays'
    tallies: the decision reads the replays), the verdicts' tallies still read; a merge sums them again."""
    folder = _folder(tmp_path, batches=3)
    before, _ = _decisions(tmp_path)
    part = tmp_path / REPLAY_TALLIES / "part-000002.parquet"
    part.write_bytes(part.read_bytes()[:-10])
    assert folder.damage() == []
    _read_without_replay_tallies(tmp_path, before)


def test_an_older_versions_batch_without_replay_tallies_leaves_them_unread(tmp_path: Path) -> None:
    """A batch whose record names no replay tallies (written, or rewritten, by a version from before them): no view
    of them, the decision reads the replays, for the same figures; the verdicts' tallies still serve."""
    _folder(tmp_path, batches=3)
    before, _ = _decisions(tmp_path)
    path = tmp_path / "_commits" / "000002.json"
    record = json.loads(path.read_bytes())
    record[DERIVED] = {TALLIES: record[DERIVED][TALLIES]}
    path.write_text(json.dumps(record))
    _read_without_replay_tallies(tmp_path, before)
    # Read by hand, they would leave out that batch's replays: an error, which says how to get them.
    folder = RunFolder(tmp_path)
    with pytest.raises(RunFolderError, match=r"some batches' replays have no replay_tallies.*derive\(") as said:
        folder.read(REPLAY_TALLIES)
    assert "derive({'replays': folder.read('replays')})" in str(said.value)
    derived = derive({"replays": folder.read("replays")})[REPLAY_TALLIES]
    _same(_summed(derived), _summed(replay_tally(folder.read("replays"))))
    assert folder.read(TALLIES).num_rows  # the verdicts' tallies cover every batch still


def test_a_candidates_views_have_no_replay_tallies(tmp_path: Path) -> None:
    """The replays' tallies do not say whose pair a replay is: a candidate's views (of a run of several) read the
    replays; the whole run's views read the tallies."""
    _folder(tmp_path, batches=2)
    with_candidate = open_run(tmp_path, candidate="x", tallies=True)
    assert replay_tallies_of(with_candidate) is None
    with_candidate.close()
    whole = open_run(tmp_path, tallies=True)
    assert replay_tallies_of(whole) == REPLAY_TALLIES
    assert whole.execute(f"SELECT sum(n) FROM {REPLAY_TALLIES}").fetchall() == [(30,)]
    whole.close()


COUNTS = st.one_of(st.none(), st.integers(-1, 3), st.sampled_from([7, 2**20]))


@st.composite
def odd_replays(draw: Any) -> pa.Table:
    """Replay rows with odd values too: null sides and keys, epochs of 0 and none, negative counts, more invalid
    calls than calls, costs of every size, nulls everywhere."""
    rows = []
    for _ in range(draw(st.integers(1, 25))):
        rows.append({
            "pair_id": draw(st.sampled_from(["p0", "p1", ""])),
            "side": draw(st.sampled_from([None, "baseline", "candidate", "recorded", "other"])),
            "epoch": draw(st.sampled_from([None, 0, 1, 2])),
            "conversation_key": draw(st.sampled_from([None, 1, -(2**63), 2**63 - 1])),
            "pair_key": draw(st.sampled_from([None, 5])),
            "error": draw(st.sampled_from([None, None, "boom"])),
            "cost_usd": draw(st.one_of(st.none(), st.floats(0, 10, allow_nan=False), st.sampled_from([0.1, 1e-17]))),
            "n_tool_calls": draw(COUNTS), "invalid_tool_calls": draw(COUNTS),
            **{c: draw(st.one_of(st.none(), st.booleans())) for c in
               ("matches_recorded", "text_instead_of_action", "no_decision", "recorded_acted")},
        })  # fmt: skip
    return pa.Table.from_pylist(rows, schema=TABLES["replays"].schema)


@seed(41)
@settings(max_examples=60, deadline=None)
@given(odd_replays(), st.booleans())
def test_a_batchs_tallies_in_arrow_are_the_sql_sums_a_merged_part_gets(table: pa.Table, narrow: bool) -> None:
    """:func:`replay_tally` (a batch's, in Arrow) gives the sums the SQL definitions of delta_eval.replay_sums give
    over the same rows (a merged part's, in DuckDB, :func:`write_replay_tallies`), every column to the bit, the
    costs exactly rounded both; a part without the newer columns reads them as null in both. Both are written in
    the order the decision reads them in (:data:`ORDER`: it then sorts nothing)."""
    if narrow:  # a part written before whether production acted, "no decision" and the pair's key were stored
        table = table.drop_columns(["recorded_acted", "no_decision", "pair_key"])
    with tempfile.TemporaryDirectory() as tmp:
        part, dest = Path(tmp) / "part.parquet", Path(tmp) / "tallies.parquet"
        pq.write_table(table, part)
        assert write_replay_tallies(part, dest) > 0
        theirs = pq.read_table(dest)
    mine = replay_tally(table)
    for tallies in (mine, theirs):
        assert tallies.to_pylist() == tallies.sort_by(list(ORDER)).to_pylist()
    assert mine.schema == theirs.schema == SCHEMAS[REPLAY_TALLIES]
    assert mine.to_pylist() == theirs.to_pylist()
    assert sum(mine.column("n").to_pylist()) == table.num_rows
