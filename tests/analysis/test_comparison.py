"""Runs side by side on real demo runs: de.analyze([a, b]) gives each run's decision as RunResult decides it, the
differing pairs re-derive with SQL from both folders' verdicts, runs of the same candidate get their consistency,
and ``delta-eval compare`` prints the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.analysis.comparison import Comparison, PairOutcomes
from delta_eval.cli import main
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.metrics.intervals import wilson_interval


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, de.RunResult]:
    """``changed`` and ``reword``: two candidates on the same sample; ``changed-small``: the first candidate again
    on a smaller sample of the same source (some pairs shared, some not)."""
    out = tmp_path_factory.mktemp("comparison")
    made = {}
    for name, n, candidate in (("changed", 20, "changed"), ("reword", 20, "reword"), ("changed-small", 12, "changed")):
        config = demo_config(out / name, n=n, latency_ms=0.0, candidate=candidate)
        made[name] = de.run(config, conversations=demo_conversations(), progress=False)
    return made


def _outcomes_sql(*folders: Path) -> dict[str, tuple[str | None, ...]]:
    """Every pair of any of the folders with its outcome in each (None where absent), read from their verdicts'
    Parquet files with plain SQL: nothing of the comparison's code."""
    con = duckdb.connect()
    selects = [f"(SELECT pair_id, outcome AS o{i} FROM read_parquet('{f}/verdicts/*.parquet'))"
               for i, f in enumerate(folders)]  # fmt: skip
    joined = selects[0] + "".join(f" FULL JOIN {s} USING (pair_id)" for s in selects[1:])
    rows = con.execute(f"SELECT pair_id, {', '.join(f'o{i}' for i in range(len(folders)))} FROM {joined}").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def test_two_candidates_side_by_side_with_the_pairs_that_differ(runs: dict[str, de.RunResult]) -> None:
    a, b = runs["changed"], runs["reword"]
    c = de.analyze([a.path, str(b.path)])
    assert isinstance(c, Comparison)
    assert isinstance(de.analyze(a.path), de.Analysis)  # one folder stays an Analysis
    s = c.summary()
    for row, result in zip(s["runs"], (a, b), strict=True):
        d = result.decision()
        assert row["decision"] == {"outcome": d.outcome, "decided_by": d.decided_by}
        w = result.win_rate()
        assert (row["win_rate"]["estimate"], row["win_rate"]["lo"], row["win_rate"]["hi"]) == pytest.approx(
            (w.estimate, w.ci_low, w.ci_high), abs=1e-4
        )
        assert row["pairs"] == result.counts.pairs
        assert row["candidate_model"] == result.manifest.candidate_model
        assert set(row["sides"]) == {"baseline", "candidate"}
    assert [r["name"] for r in s["runs"]] == ["changed", "reword"]

    expected = _outcomes_sql(a.path, b.path)
    differ = sorted(p for p, (x, y) in expected.items() if x != y)
    assert differ, "the two candidates should decide some pair differently"
    assert (s["differing"], s["pairs"]) == (len(differ), len(expected))
    got = c.differences(limit=10_000)
    assert got["total"] == len(differ)
    assert [r["pair_id"] for r in got["rows"]] == differ
    assert all(tuple(r["outcomes"]) == expected[r["pair_id"]] for r in got["rows"])
    # pages: the same rows a slice at a time
    assert c.differences(limit=3, offset=2)["rows"] == got["rows"][2:5]
    assert s["consistency"] == []  # two candidates: none repeated
    json.dumps({"summary": s, "differences": got})  # JSON-ready


def test_runs_of_the_same_candidate_get_their_consistency(runs: dict[str, de.RunResult]) -> None:
    big, other, small = runs["changed"], runs["reword"], runs["changed-small"]
    c = de.analyze((big.path, other.path, small.path))
    [group] = c.consistency()
    assert group["runs"] == ["changed", "changed-small"]
    outcomes = [big.decision().outcome, small.decision().outcome]
    approved = outcomes.count("APPROVED")
    lo, hi = wilson_interval(approved / 2, 2)
    assert group["approved"] == {"count": approved, "of": 2, "share": approved / 2, "lo": round(lo, 4),
                                 "hi": round(hi, 4)}  # fmt: skip
    both = _outcomes_sql(big.path, small.path)
    shared = [p for p, (x, y) in both.items() if x is not None and y is not None]
    assert 0 < len(shared) < len(both)  # a smaller sample: some pairs of the larger run are not in it
    agree = sum(both[p][0] == both[p][1] for p in shared)
    assert group["agreement"] == {"shared_pairs": len(shared), "agree": agree, "share": round(agree / len(shared), 4)}
    # a pair only one run has differs: the three-way differences count them
    three = _outcomes_sql(big.path, other.path, small.path)
    assert c.differences()["total"] == sum(len(set(o)) > 1 for o in three.values())


def test_the_viewer_compares_with_the_same_matching(runs: dict[str, de.RunResult]) -> None:
    pytest.importorskip("starlette", reason="the viewer's web stack is the 'view' extra")
    from delta_eval.viewer.compare import Comparison as ViewerComparison
    from delta_eval.viewer.queries import RunView

    a, b = runs["changed"], runs["changed-small"]
    page = ViewerComparison([RunView(a.path), RunView(b.path)]).differences(page=1, size=10_000)
    ours = de.analyze([a.path, b.path]).differences(limit=10_000)
    assert (page.total, page.pairs) == (ours["total"], ours["pairs"])
    assert [(r["pair_id"], [r["o0"], r["o1"]]) for r in page.rows] == [(r["pair_id"], r["outcomes"])
                                                                       for r in ours["rows"]]  # fmt: skip


_OUTCOMES = st.sampled_from(["candidate", "baseline", "tie", "equivalent", "error"])


# deadline=None: each example opens its own DuckDB connection, whose first query can take a few hundred ms on a
# loaded machine
@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from([f"c{i}#1" for i in range(8)]), _OUTCOMES), min_size=1, max_size=4))
def test_pair_outcomes_match_by_id_and_count_a_missing_pair_as_a_difference(runs: list[dict[str, str]]) -> None:
    tables = [pa.table({"pair_id": pa.array(list(r), pa.string()), "outcome": pa.array(list(r.values()), pa.string())})
              for r in runs]  # fmt: skip
    po = PairOutcomes(tables)
    every = sorted(set().union(*runs))
    differ = [p for p in every if len({r.get(p) for r in runs}) > 1]
    assert po.counts() == (len(differ), len(every))
    rows = po.differing(100)
    assert [r["pair_id"] for r in rows] == differ
    assert all([r[f"o{i}"] for i in range(len(runs))] == [x.get(r["pair_id"]) for x in runs] for r in rows)
    shared = [p for p in every if all(p in r for r in runs)]
    assert po.agreement(range(len(runs))) == (len(shared), sum(len({r[p] for r in runs}) == 1 for p in shared))


def test_compare_command_prints_both_decisions_and_the_pairs_that_differ(
    runs: dict[str, de.RunResult], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = runs["changed"], runs["reword"]
    assert main(["compare", str(a.path), str(b.path), "--limit", "1000"]) == 0
    out = capsys.readouterr().out
    for result in (a, b):
        assert result.decision().lines()[0] in out  # "DECISION: ... - decided by ..."
    expected = _outcomes_sql(a.path, b.path)
    differ = sorted(p for p, (x, y) in expected.items() if x != y)
    assert f"pairs whose outcome differs: {len(differ)} of {len(expected)}" in out
    listed = [line.split() for line in out.splitlines() if line.strip().split(" ")[0] in expected]
    assert [row[0] for row in listed] == differ
    assert all(tuple(row[1:]) == expected[row[0]] for row in listed)
    assert "consistency: no two runs share a candidate" in out

    assert main(["compare", str(a.path), str(b.path), "--json", "--limit", "2"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert data["differences"]["total"] == len(differ)
    assert len(data["differences"]["rows"]) == min(2, len(differ))
    assert [r["decision"]["outcome"] for r in data["summary"]["runs"]] == [a.decision().outcome,
                                                                           b.decision().outcome]  # fmt: skip

    assert main(["compare", str(a.path), str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("delta-eval: error:")
    assert "not a delta_eval run folder" in err
    assert "\n" not in err  # one line
    with pytest.raises(SystemExit) as info:
        main(["compare", str(a.path)])
    assert info.value.code == 2
