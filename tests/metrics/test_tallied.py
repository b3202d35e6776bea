"""The win rate's sums per stratum from the verdicts' tallies (delta_eval.metrics.tallied): the same to the last bit
as DuckDB's over the verdicts they count, whatever batches the verdicts were tallied in, or no answer (``None``)
only where tallies cannot give them."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics.counted import counted
from delta_eval.metrics.estimand import Estimand, contribution, weights_vary
from delta_eval.metrics.tallied import tallied
from delta_eval.metrics.winrate import win_rate_of
from delta_eval.store.conversation_key import conversation_key
from delta_eval.store.tables import TABLES
from delta_eval.store.tallies import tally
from tests.metrics.test_conversation_keys import _same
from tests.metrics.test_counted import runs


def _verdicts(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as a run stores them (every column of the verdicts' schema), with their conversations' keys."""
    schema = TABLES["verdicts"].schema
    full = [{**r, "conversation_key": conversation_key(r.get("conversation_id"))} for r in rows]
    return pa.Table.from_pylist(full, schema=schema) if full else schema.empty_table()


def _tallied_in(table: pa.Table, cuts: list[int]) -> pa.Table:
    """``table``'s tallies as a run writes them: one set a batch, the batches cut at ``cuts``."""
    edges = sorted({0, table.num_rows, *(c % (table.num_rows + 1) for c in cuts)})
    return pa.concat_tables([tally(table.slice(lo, hi - lo)) for lo, hi in itertools.pairwise(edges)] or
                            [tally(table)])  # fmt: skip


@st.composite
def varied(draw: Any) -> list[dict[str, Any]]:
    """:func:`runs`' rows, some with an empty error side, no stratum, a weight of 0 or none, or a second candidate;
    no row without a conversation unless drawn so."""
    rows = draw(runs())
    keep_missing = draw(st.booleans())
    scale = draw(st.sampled_from([1.0, 0.1, 1 / 3]))  # weights of no exact product: what the order of sums changes
    # Weights of 0 or none (read as 1) on some rows: a conversation of two weights, which tallies do not serve
    # weighted; in half the runs, so that weights that vary between conversations are served too.
    blank = draw(st.booleans())
    out = []
    for r in rows:
        r = dict(r)
        if not keep_missing and not r["conversation_id"]:
            r["conversation_id"] = "c0"
        if r["outcome"] == "error" and draw(st.integers(0, 4)) == 0:
            r["error_side"] = ""
        if draw(st.integers(0, 9)) == 0:
            r["stratum"] = draw(st.sampled_from([None, "", "é"]))  # null and "" are one stratum, as the query reads
        if blank and draw(st.integers(0, 9)) == 0:
            r["weight"] = draw(st.sampled_from([None, 0.0]))
        r["candidate"] = draw(st.sampled_from(["x", "x", "y"]))
        if r["weight"]:
            r["weight"] *= scale
        out.append(r)
    return out


@seed(40)
@settings(max_examples=150, deadline=None)
@given(varied(), st.lists(st.integers(0, 60), max_size=4), st.sampled_from(["all", "judged"]),
       st.sampled_from(["loss", "exclude"]), st.sampled_from([False, "auto", True]),
       st.sampled_from([None, "stratum", "candidate"]))  # fmt: skip
def test_sums_from_tallies_are_the_sums_over_the_verdicts(
    rows: list[dict[str, Any]], cuts: list[int], over: Any, errors: Any, weighted: Any, by: str | None
) -> None:
    e = Estimand(over=over, errors=errors, weighted=weighted)
    table = _verdicts(rows)
    tallies = _tallied_in(table, cuts)
    total: dict[str, Any] = {}
    mine = tallied(tallies, e, by=by, null="None", total=total)
    kept = [r for r in rows if contribution(r, e) is not None]
    weighs = weighted is True or (weighted == "auto" and weights_vary([r["weight"] or 1.0 for r in kept]))
    theirs_total: dict[str, Any] = {}
    # Weighted sums: per conversation, as the verdicts' path takes them.
    theirs = counted(table, e, by=by, null="None", per_conversation=weighs, total=theirs_total)
    if mine is None:
        # Only where tallies cannot serve: no verdict at all, a counted verdict without a conversation, or weighted
        # sums of a conversation with two weights in one stratum (of a group, or of the total over the groups).
        weights: dict[tuple[Any, ...], set[float]] = {}
        for r in kept:
            cell = (r["conversation_id"], r["stratum"] or "")
            for group in {r.get(by) if by else "", "(every group)"}:
                weights.setdefault((group, *cell), set()).add(r["weight"] or 1.0)
        unserved = (not rows or any(not r["conversation_id"] for r in kept)
                    or (weighs and any(len(w) > 1 for w in weights.values())))  # fmt: skip
        assert unserved
        return
    assert mine.keys() == theirs.keys()
    for g in mine:
        if weighs:
            _same_weighted(mine[g], theirs[g], e)
        else:
            _same(mine[g], theirs[g])
    assert total.keys() == theirs_total.keys()
    for g in total:
        if weighs:
            _same_weighted(total[g], theirs_total[g], e)
        else:
            _same(total[g], theirs_total[g])


def _same_weighted(x: Any, y: Any, e: Estimand) -> None:
    """Two weighted Counted alike to the last bit in what every interval reads (the conversations' order aside):
    their win rates by every method but the bootstrap, and their counts."""
    assert (x.counts, x.error_losses, x.sign_counts(), x.pairs, x.weighted) == (
        y.counts, y.error_losses, y.sign_counts(), y.pairs, y.weighted)  # fmt: skip
    for method in ("cluster", "wilson", "iid"):
        assert win_rate_of(x, e, method=method).model_dump() == win_rate_of(y, e, method=method).model_dump()


def test_tallies_serve_a_plain_run_and_decline_what_they_cannot_give() -> None:
    rows = [{"pair_id": f"p{i}", "conversation_id": f"c{i % 4}", "stratum": f"s{i % 2}", "weight": 1.0,
             "outcome": ["candidate", "baseline", "tie", "equivalent", "error"][i % 5],
             "error": "candidate replay failed: 500" if i % 5 == 4 else None} for i in range(40)]  # fmt: skip
    table = _verdicts(rows)
    got = tallied(tally(table))
    assert got is not None
    _same(got[""], counted(table, Estimand(), per_conversation=False)[""])
    assert got[""].error_losses["candidate"] == 8  # resolved from the error's text as the query resolves it
    assert tallied(tally(table), Estimand(soft=True)) is None
    total: dict[str, Any] = {}
    weighted = tallied(tally(table), Estimand(weighted=True), by="stratum", total=total)
    assert weighted is not None  # the weighted total too
    _same_weighted(total[""], counted(table, Estimand(weighted=True))[""], Estimand(weighted=True))
    assert tallied(tally(table), by="epoch") is None
    varying = _verdicts([{**r, "weight": 1.0 + i % 2} for i, r in enumerate(rows)])
    assert tallied(tally(varying), total={}) is not None  # weighted="auto" settles on weighted sums
    assert tallied(tally(varying)) is not None
    two = _verdicts([{**r, "weight": 1.0 + i // 4 % 2, "stratum": "s"} for i, r in enumerate(rows)])
    assert tallied(tally(two)) is None  # a conversation of two weights in one stratum
    assert tallied(tally(varying), Estimand(weighted=False)) is not None
    lone = _verdicts([*rows, {"pair_id": "q", "conversation_id": None, "outcome": "tie"}])
    assert tallied(tally(lone)) is None  # its own cluster, named by its pair
    assert tallied(tally(table.slice(0, 0))) is None
    # No pair counted (every one equivalent, over the judged), weighted: nothing, as over the verdicts.
    equivalent = _verdicts([{**r, "outcome": "equivalent", "error": None} for r in rows])
    for by in (None, "stratum"):
        got = tallied(tally(equivalent), Estimand(over="judged", weighted=True), by=by)
        assert got is not None
        theirs = counted(equivalent, Estimand(over="judged", weighted=True), by=by)
        assert got.keys() == theirs.keys()
        for g in got:
            assert got[g].pairs == theirs[g].pairs == 0
            _same_weighted(got[g], theirs[g], Estimand(over="judged", weighted=True))


@pytest.mark.parametrize("by", ["candidate", "stratum"])
def test_a_weighted_total_over_two_groups_of_one_conversations_stratum_is_the_verdicts(by: str) -> None:
    """A conversation whose stratum is in two groups (two candidates; a null and an empty stratum, one stratum):
    its weighted total weighs its counts of both groups added up (0.1 * 7, not 0.1 * 2 + 0.1 * 5: another double),
    from tallies as from the verdicts; and each group alone."""
    rows, i = [], 0
    for group, wins, losses in (("A", 2, 1), ("B", 5, 3)):
        where = {"candidate": group, "stratum": "s"} if by == "candidate" else {"stratum": None if group == "A" else ""}
        for outcome, n in (("candidate", wins), ("baseline", losses)):
            for _ in range(n):
                rows.append({"pair_id": f"p{i}", "conversation_id": "c0", "weight": 0.1, "outcome": outcome, **where})
                i += 1
    rows += [
        {
            "pair_id": f"q{j}",
            "conversation_id": "c1",
            "weight": 0.3,
            "outcome": o,
            "candidate": "A",
            "stratum": "s" if by == "candidate" else None,
        }
        for j, o in enumerate(["candidate", "tie", "baseline"])
    ]
    table, e = _verdicts(rows), Estimand(weighted=True)
    theirs_total: dict[str, Any] = {}
    theirs = counted(table, e, by=by, null="None", per_conversation=True, total=theirs_total)
    total: dict[str, Any] = {}
    mine = tallied(tally(table), e, by=by, null="None", total=total)
    assert mine is not None
    assert mine.keys() == theirs.keys()
    for g in mine:
        _same_weighted(mine[g], theirs[g], e)
    _same_weighted(total[""], theirs_total[""], e)
    alone = counted(table, e, per_conversation=True)[""]  # over every row alone: the same total
    _same_weighted(total[""], alone, e)


@pytest.mark.parametrize("dictionary", [False, True])
def test_text_read_dictionary_encoded_gives_the_same_sums(dictionary: bool) -> None:
    rows = [{"pair_id": f"p{i}", "conversation_id": f"c{i % 7}", "stratum": [None, "b", "a"][i % 3],
             "outcome": ["candidate", "baseline", "tie"][i % 3], "candidate": "x"} for i in range(30)]  # fmt: skip
    tallies = pa.concat_tables([tally(_verdicts(rows[:10])), tally(_verdicts(rows[10:]))])
    if dictionary:
        tallies = pa.table({name: tallies.column(name).dictionary_encode()
                            if pa.types.is_string(tallies.schema.field(name).type) else tallies.column(name)
                            for name in tallies.column_names})  # fmt: skip
    got = tallied(tallies, by="stratum", null="None")
    assert got is not None
    theirs = counted(_verdicts(rows), Estimand(), by="stratum", null="None", per_conversation=False)
    assert got.keys() == theirs.keys() == {"None", "a", "b"}
    for g in got:
        _same(got[g], theirs[g])


def test_within_shared_sums_the_same_tallies_are_summed_once_whatever_a_null_group_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The summary's win rates and its decision sum the same tallies alike (the null group named "None", then ""):
    within ``shared_sums`` the second call reads the first one's sums, its total too, in a dict of its own. Where the
    stratum has nulls, each name is summed apart (the groups differ); outside the block, every call sums."""
    import delta_eval.metrics.tallied as module
    from delta_eval.metrics.counted import shared_sums
    from delta_eval.metrics.tallied import tallied_or_counted

    calls: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("null", ""))
        return tallied(*args, **kwargs)

    monkeypatch.setattr(module, "tallied", counting)
    rows = [{"pair_id": f"p{i}", "conversation_id": f"c{i % 5}", "stratum": f"s{i % 2}", "weight": 1.0,
             "outcome": ["candidate", "baseline", "tie"][i % 3]} for i in range(30)]  # fmt: skip
    tallies = tally(_verdicts(rows))
    with shared_sums():
        total: dict[str, Any] = {}
        first = tallied_or_counted(tallies, "unused", Estimand(), con=None, by="stratum", null="None", total=total)
        first["extra"] = first["s0"]  # a caller's change to its dict is its own
        again_total: dict[str, Any] = {}
        again = tallied_or_counted(tallies, "unused", Estimand(), con=None, by="stratum", null="", total=again_total)
        judged = tallied_or_counted(tallies, "unused", Estimand(over="judged"), con=None)
    assert calls == ["None", ""]  # the second grouping read the first's; the judged estimand summed
    assert again.keys() == {"s0", "s1"}
    assert all(again[g] is first[g] for g in again)
    assert again_total[""] is total[""]
    _same(again["s1"], tallied(tallies, by="stratum")["s1"])  # type: ignore[index]
    assert judged[""].pairs == 30
    nulls = tally(_verdicts([{**r, "stratum": None if i % 2 else "s"} for i, r in enumerate(rows)]))
    calls.clear()
    with shared_sums():
        named = tallied_or_counted(nulls, "unused", Estimand(), con=None, by="stratum", null="")
        renamed = tallied_or_counted(nulls, "unused", Estimand(), con=None, by="stratum", null="None")
    assert calls == ["", "None"]
    assert named.keys() == {"", "s"}
    assert renamed.keys() == {"None", "s"}
    tallied_or_counted(tallies, "unused", Estimand(), con=None)
    tallied_or_counted(tallies, "unused", Estimand(), con=None)
    assert len(calls) == 4
