"""de.analyze on a real demo run: the summary agrees with RunResult, the behaviour changes re-derive with SQL, the
themes are seeded and cached, the pairs come with both outputs, and the CLI and the skills use the same functions."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.analysis.changes import compare_calls
from delta_eval.analysis.themes import find_themes, prompt_sections
from delta_eval.cli import main
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.skills import SKILLS, install_skills
from delta_eval.store.folder import RunFolder


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> de.RunResult:
    out = tmp_path_factory.mktemp("analysis") / "run"
    return de.run(demo_config(out, n=60, latency_ms=0.0), conversations=demo_conversations())


def test_the_summary_agrees_with_the_run_result(run: de.RunResult) -> None:
    s = de.analyze(run.path).summary()
    assert s["funnel"] == run.counts.by_stage
    assert s["pairs"] == run.counts.pairs
    for over in ("all", "judged"):
        expected = run.win_rate(over=over)
        got = s["win_rate"][over]
        assert got["estimate"] == pytest.approx(expected.estimate, abs=1e-4)
        assert (got["lo"], got["hi"]) == pytest.approx((expected.ci_low, expected.ci_high), abs=1e-4)
        assert got["pairs"] == expected.pairs
    per = {w.stratum: w for w in run.win_rate(by="stratum")}
    assert {r["stratum"]: (r["estimate"], r["lo"], r["hi"]) for r in s["by_stratum"]} == {
        k: pytest.approx((w.estimate, w.ci_low, w.ci_high), abs=1e-4) for k, w in per.items()
    }
    assert s["decision"]["outcome"] == run.decision().outcome
    assert set(s["sides"]) == {"baseline", "candidate"}
    json.dumps(s)  # JSON-ready


def test_a_runs_decision_lists_latencies_and_costs_only_when_asked(run: de.RunResult) -> None:
    """``RunResult.decision()`` gives the figures of a decision on the run's rows in memory, without a Python
    object per turn; ``lists=True`` adds each side's latencies and costs, the rows path's own."""
    from delta_eval.metrics import decide

    lean, full = run.decision(), run.decision(lists=True)
    rows = decide(run.table("verdicts"), run.table("replays"), lean.rule)
    strip = {"sides": {side: {"latencies_ms", "costs_by_conversation"} for side in rows.sides}}
    assert lean.model_dump(exclude=strip) == full.model_dump(exclude=strip)
    assert lean.lines() == rows.lines()
    for side, m in full.sides.items():
        assert lean.sides[side].latencies_ms == []
        assert lean.sides[side].costs_by_conversation == {}
        assert m.latencies_ms == rows.sides[side].latencies_ms
        assert m.costs_by_conversation == pytest.approx(rows.sides[side].costs_by_conversation)
        assert list(m.costs_by_conversation) == sorted(m.costs_by_conversation)  # in order of name
        assert m.conversations == len(m.costs_by_conversation) > 0


def test_a_weighted_decision_taken_again_is_the_same_to_the_bit(run: de.RunResult) -> None:
    """The demo's sample is weighted: sums of weights per conversation are added by DuckDB's threads in any order,
    and plain sums of them gave 8 different decisions (in their last bits) in 40 takes of the same run."""
    assert "weighted to the population" in run.decision().estimand
    assert len({run.decision(lists=True).model_dump_json() for _ in range(20)}) == 1


def test_behaviour_changes_rederive_with_sql(run: de.RunResult) -> None:
    a = de.analyze(run.path)
    rows = {(r["kind"], r["behaviour"]): r for r in a.changes()}
    con = run.connect()
    acts = dict(con.execute(
        "SELECT side, count(*) FILTER (WHERE n_tool_calls > 0) FROM replays r JOIN verdicts v USING (pair_id) "
        "WHERE side <> 'recorded' AND v.outcome <> 'error' GROUP BY side"
    ).fetchall())  # fmt: skip
    row = rows[("behaviour", "makes a tool call")]
    assert (row["baseline"]["count"], row["candidate"]["count"]) == (acts["baseline"], acts["candidate"])
    assert row["candidate"]["lo"] <= row["candidate"]["rate"] <= row["candidate"]["hi"]
    one_side_acts = con.execute(
        "SELECT count(*) FROM (SELECT pair_id, count(*) FILTER (WHERE n_tool_calls > 0) AS acting FROM replays "
        "JOIN verdicts USING (pair_id) WHERE side <> 'recorded' AND outcome <> 'error' GROUP BY pair_id) "
        "WHERE acting = 1"
    ).fetchone()[0]
    assert rows[("difference", "call vs text reply")]["pairs"]["count"] == one_side_acts
    by = a.changes(by="stratum")
    assert {r["stratum"] for r in by} == {v for (v,) in con.execute("SELECT DISTINCT stratum FROM verdicts").fetchall()}


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.dictionaries(st.sampled_from("xyz"), st.integers(0, 2),
                                                                              max_size=2)), max_size=4))  # fmt: skip
def test_calls_compared_with_themselves_do_not_differ(calls: list[tuple[str, Any]]) -> None:
    assert compare_calls(calls, list(calls)) == (None, None, None)
    if calls:
        assert compare_calls(calls, calls[:-1])[0] in ("missing calls", "call vs text reply")
        assert compare_calls(calls[:-1], calls)[0] in ("extra calls", "call vs text reply")


def test_themes_recover_known_groups_and_choose_their_number() -> None:
    groups = {
        "skipped the required get_reservation_details call before cancelling": "a",
        "called book_reservation with a different cabin argument for the passenger": "b",
        "transferred to a human agent although the policy allows the refund": "c",
    }
    texts = [t for t in groups for _ in range(8)]
    ids = [f"{groups[t]}{i}" for i, t in enumerate(texts)]
    themes = find_themes(texts, ids, seed=3)
    assert len(themes) == 3
    assert sorted(sorted({m[0] for m in t.members}) for t in themes) == [["a"], ["b"], ["c"]]
    assert find_themes(texts, ids, seed=3) == themes  # seeded
    assert sum(t.size for t in themes) == len(texts)


def test_prompt_sections_follow_headings_and_rules() -> None:
    sections = prompt_sections(
        "# Booking\nOnly for the user.\n1. Ask for the user id.\n## Refunds\n- Never refund cash."
    )
    assert [s.title for s in sections] == ["Booking: Ask for the user id.", "Booking", "Refunds: Never refund cash."]


def test_themes_are_cached_and_dropped_when_the_run_gains_pairs(run: de.RunResult) -> None:
    a = de.analyze(run.path)
    themes = a.themes(outcome="baseline")
    assert themes
    assert sum(t["size"] for t in themes) == run.counts.by_outcome.get("baseline", 0) - sum(
        1 for r in a._reasons("baseline") if not r[1]
    )
    cached = list((run.path / "analysis").glob("themes-baseline-*.json"))
    assert len(cached) == 1
    assert de.analyze(run.path).themes(outcome="baseline") == themes
    assert {"asked", "confirm"} & {w for t in themes for term in t["terms"] for w in term.split()}
    # the run gains a batch: the cached analyses go
    folder = RunFolder(run.path)
    manifest = folder.manifest()
    assert manifest is not None
    folder.write_manifest(manifest.model_copy(update={"batches": manifest.batches + 1}))
    try:
        de.analyze(run.path)
        assert not (run.path / "analysis").exists()
    finally:
        folder.write_manifest(manifest)


def test_pairs_of_a_theme_show_both_outputs(run: de.RunResult) -> None:
    a = de.analyze(run.path)
    theme = a.themes(outcome="baseline")[0]
    pairs = a.pairs(theme=theme["id"], limit=3)
    assert [p["pair_id"] for p in pairs] == theme["members"][:3]
    for p in pairs:
        assert p["outcome"] == "baseline"
        assert {"baseline", "candidate", "recorded"} <= set(p)
        assert isinstance(p["candidate"]["calls"], list)
        assert p["summary"]
    with pytest.raises(ValueError, match="no theme 99"):
        a.pairs(theme=99)


def test_the_cli_prints_the_same_as_text_and_json(run: de.RunResult, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(run.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"summary", "changes", "themes"}
    assert data["themes"] == de.analyze(run.path).themes(outcome="baseline")
    assert main(["analyze", str(run.path)]) == 0
    text = capsys.readouterr().out
    assert "themes where the candidate lost" in text
    assert f"#0 {data['themes'][0]['name']}" in text


def test_the_skills_install_and_name_only_functions_that_exist(tmp_path: Path, run: de.RunResult) -> None:
    assert main(["skills", "install", str(tmp_path / "skills")]) == 0
    installed = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "skills").rglob("SKILL.md"))
    assert installed == ["skills/delta-eval-analyze/SKILL.md", "skills/delta-eval-run/SKILL.md"]
    assert len(install_skills(tmp_path / "again")) == len(SKILLS) == 2
    a = de.analyze(run.path)
    for skill in SKILLS:
        text = skill.read_text()
        assert text.startswith("---\nname: ")
        for name in re.findall(r"\bde\.(\w+)\(", text):
            assert callable(getattr(de, name)), name
        for name in re.findall(r"\ba\.(\w+)\(", text):
            assert callable(getattr(a, name)), name
        for name in re.findall(r"\bc\.(\w+)\(", text):  # the comparison of several runs
            assert callable(getattr(de.analyze([run.path, run.path]), name)), name


def test_the_html_report_is_one_self_contained_page(run: de.RunResult, tmp_path: Path) -> None:
    from html.parser import HTMLParser

    target = tmp_path / "r.html"
    assert main(["report", str(run.path), "--html", str(target)]) == 0
    page = target.read_text()
    a = de.analyze(run.path)
    s = a.summary()
    assert f"{s['win_rate']['all']['estimate']:.3f}" in page
    for row in s["by_stratum"]:
        assert row["stratum"] in page
    for theme in a.themes():
        assert f"#{theme['id']} " in page
        assert all(member in page for member in theme["members"])  # every pair of a theme, collapsed
    anchors = re.findall(r"<a href=#([\w-]+)>", page)
    assert len(anchors) == 8  # the table of contents
    assert all(f"<h2 id={anchor}>" in page for anchor in anchors)
    assert "minmax(0,1fr)" in page  # side-by-side columns shrink to the page, long outputs wrap
    assert "<script" not in page
    assert "http://" not in page
    assert "https://" not in page  # nothing fetched when the page opens

    class Balanced(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag not in ("meta", "br"):
                self.open.append(tag)

        def handle_endtag(self, tag: str) -> None:
            assert self.open.pop() == tag

    parser = Balanced()
    parser.feed(page)
    assert parser.open == []


def test_themes_are_named_by_the_runs_judge_model_once(run: de.RunResult, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    from delta_eval.analysis.naming import LLMNamer

    a = de.analyze(run.path)
    named = a.themes(outcome="baseline")
    by_terms = a.themes(outcome="baseline", names="terms")
    assert [t["members"] for t in named] == [t["members"] for t in by_terms]
    assert [t["name"] for t in by_terms] == [", ".join(t["terms"][:3]) for t in by_terms]
    # the simulated judge names a theme by the behaviour its reasons state most often
    assert all(t["name"][0].isupper() for t in named)
    assert any("confirm instead of making the required" in t["name"] for t in named)
    namer = a.namer()
    assert namer is not None
    assert namer.model == "simulated:judge"
    # one call per theme, through a response cache: asked again, every name comes from it
    fresh = LLMNamer(namer.model, namer.options, cache_path=tmp_path / "cache.sqlite")
    themes = [(t["terms"], t["examples"]) for t in named]
    assert fresh.name_all(themes) == [t["name"] for t in named]

    def cached() -> int:
        with sqlite3.connect(tmp_path / "cache.sqlite") as db:
            return int(db.execute("SELECT count(*) FROM responses").fetchone()[0])

    assert cached() == len(named)
    assert fresh.name_all(themes) == [t["name"] for t in named]
    assert cached() == len(named)
    shutil.rmtree(run.path / "analysis")
    assert de.analyze(run.path).themes(outcome="baseline") == named


def test_themes_cluster_in_an_embedding_space_when_given_one() -> None:
    import numpy as np

    texts = ["alpha one", "alpha two", "alpha three", "beta one", "beta two", "beta three"]

    def embed(batch: list[str]) -> Any:  # stands in for a provider's embeddings
        return np.array([[1.0, 0.0] if t.startswith("alpha") else [0.0, 1.0] for t in batch])

    themes = find_themes(texts, [f"p{i}" for i in range(6)], seed=0, embed=embed)
    assert sorted(sorted(t.members) for t in themes) == [["p0", "p1", "p2"], ["p3", "p4", "p5"]]
    with pytest.raises(ValueError, match="embed returned 1 vectors for 6 texts"):
        find_themes(texts, [f"p{i}" for i in range(6)], embed=lambda b: np.zeros((1, 2)))


def test_themes_from_a_providers_embeddings_through_the_real_sdk(run: de.RunResult, tau_conversations: list) -> None:
    import numpy as np

    from delta_eval.adapters.embeddings import Embedder
    from delta_eval.testing import FakeOpenAIServer

    with FakeOpenAIServer(recordings=tau_conversations) as server:
        embed = Embedder("openai:text-embedding-3-small", {"base_url": server.base_url, "api_key": "sk-test"})
        vectors = np.array(embed(["skipped the booking call", "skipped the booking call again", "asked to confirm"]))
        assert vectors.shape == (3, 64)
        assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]  # texts sharing words are close
        assert server.requests[-1].json()["encoding_format"] == "base64"  # the SDK's default, decoded by it
        themes = de.analyze(run.path).themes(outcome="baseline", names="terms", embed=embed)
        sent = sum(len(r.json()["input"]) for r in server.requests if r.path.endswith("/embeddings"))
    assert sum(t["size"] for t in themes) == sent - 3
    assert len(themes) >= 2
    cached = [p.name for p in (run.path / "analysis").glob("themes-*Embedder*")]
    assert len(cached) == 1


def test_the_html_report_lists_the_pairs_behind_each_gate(run: de.RunResult, tmp_path: Path) -> None:
    a = de.analyze(run.path)
    target = tmp_path / "r.html"
    assert main(["report", str(run.path), "--html", str(target)]) == 0
    page = target.read_text()
    evidence = page[page.index("<h2 id=evidence>") : page.index("<h2 id=win-rate>")]
    gates = a.decision()["evidence"]["gates"]
    failed = [g for g in gates if not g["passed"]]
    assert failed, "the demo's candidate fails a gate: the test needs one"
    blocks = re.split(r"<h3>", evidence)[1:]
    for g in gates:
        block = next(b for b in blocks if html.escape(g["text"]) in b)
        found = a.filtered(g["query"], limit=50 if not g["passed"] else 10)
        shown = re.findall(r"<details><summary>([^ <]+) ", block)
        assert shown == found["pair_ids"]  # the viewer's filter behind the gate, in its order
        assert ("FAILED" in block) == (not g["passed"])
    assert evidence.index("FAILED") < evidence.index("passed")  # failed gates first
    # a pair opened: what the user said, and the words only one side has marked
    one = a.pairs(pair_ids=a.filtered(failed[0]["query"])["pair_ids"], limit=1)[0]
    assert one["user"]
    assert html.escape(one["user"]) in page
    assert "<ins>" in evidence
    assert "<del>" in evidence


def test_filtered_pairs_are_what_the_query_says(run: de.RunResult) -> None:
    a = de.analyze(run.path)
    con = run.connect()
    for query, where in [("severity=critical", "severity = 'critical'"), ("outcome=baseline", "outcome = 'baseline'"),
                         ("stage=judge&outcome=candidate", "stage = 'judge' AND outcome = 'candidate'")]:  # fmt: skip
        expected = {r[0] for r in con.execute(f"SELECT pair_id FROM verdicts WHERE {where}").fetchall()}
        got = a.filtered(query, limit=10_000)
        assert got["total"] == len(expected) > 0
        assert set(got["pair_ids"]) == expected
    ordered = a.filtered("sort=candidate_latency&dir=desc", limit=5)["pair_ids"]
    latency = dict(con.execute("SELECT pair_id, latency_ms FROM replays WHERE side = 'candidate'").fetchall())
    assert [latency[p] for p in ordered] == sorted((latency[p] for p in ordered), reverse=True)


def test_reasons_all_alike_make_one_theme_without_a_warning() -> None:
    import warnings

    reasons = ["Reply A called get_user_details with a different 'user_id' argument"] * 12
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the SVD divided by their zero variance
        themes = find_themes(reasons, [f"p{i}" for i in range(12)], seed=0)
    assert [t.size for t in themes] == [12]


def test_the_demos_confirm_instead_of_acting_losses_are_one_theme_pointing_at_the_added_rule(
    run: de.RunResult,
) -> None:
    # The demo's candidate adds a "# Style" rule asking for a yes before any write action, and its model asks the
    # user to confirm instead of calling a tool: whatever the tool, those losses are one theme, attributed to that
    # added rule, where the analysis used to split them by tool and point at an old policy line.
    a = de.analyze(run.path)
    assert a.system_prompt("baseline") in a.system_prompt("candidate")  # the candidate's template wraps it
    themes = a.themes(outcome="baseline", names="terms")
    reasons = dict(a._reasons("baseline"))
    confirm = {p for p, text in reasons.items() if "asked the user to confirm instead of" in text}
    tools = {re.search(r"the required (\w+) call", reasons[p]).group(1) for p in confirm}  # type: ignore[union-attr]
    assert len(tools) >= 2  # the behaviour is seen with several tools
    holding = [t for t in themes if confirm & set(t["members"])]
    assert len(holding) == 1
    assert confirm <= set(holding[0]["members"])
    top = themes[0]
    assert top is holding[0]
    assert top["section"].startswith("Style: Before any write action")
    assert top["section_change"] == "added"
    assert top["confidence"] in ("high", "medium", "low")


def test_a_sides_spend_is_summed_exactly_rounded_whatever_the_order() -> None:
    """A plain sum of 0.1, 0.2 and 0.3 is 0.6000000000000001 in that order and 0.6 in another: the spend of a run
    and of a baseline against itself would differ in the last bit. Summed as the decision sums costs (fsum)."""
    import duckdb
    import pyarrow as pa

    from delta_eval.analysis.spend import side_spend

    for costs in ([0.1, 0.2, 0.3], [0.3, 0.2, 0.1]):
        with duckdb.connect() as con:
            con.register("replays", pa.table({"side": ["candidate"] * 3, "model": ["m"] * 3, "cost_usd": costs,
                                              "input_tokens": [1] * 3, "cached_input_tokens": [0] * 3,
                                              "cache_write_tokens": [0] * 3, "output_tokens": [1] * 3}))  # fmt: skip
            assert [s.cost_usd for s in side_spend(con)] == [0.6]


def test_a_sides_latency_figures_are_the_decisions_turns_with_or_without_the_decision(tmp_path: Path) -> None:
    """The summary's latency quantiles are of the turns that did not fail (a failed turn's time to its error is no
    latency of an answer), a missing latency 0, as the decision's latency gate reads them: the same figures whether
    the summary includes the decision (whose scan of the latencies it then reads) or not, and the same as SQL's over
    the same turns; the other figures of a side summed over its models."""
    import duckdb
    import numpy as np

    from delta_eval.store.manifest import RunManifest

    folder = RunFolder(tmp_path / "run")
    folder.write_manifest(RunManifest(status="completed", fingerprint={}, config={}, source="s", baseline="b",
                                      candidate="c"))  # type: ignore[arg-type]  # fmt: skip
    for k in range(40):
        folder.add("verdicts", [de.Verdict(pair_id=f"p{k}", conversation_id=f"c{k % 9}", turn_index=k, stage="judge",
                                           outcome=["candidate", "baseline", "tie"][k % 3])])  # fmt: skip
        for side in ("baseline", "candidate", "recorded"):
            failed = side != "recorded" and k % 7 == 2
            folder.add("replays", [de.Replay(
                pair_id=f"p{k}", conversation_id=f"c{k % 9}", turn_index=k, side=side, variant="v",
                model=f"m{k % 2}", output=de.TurnOutput(final_text="ok"), finish_reason="stop", cost_usd=0.01 * (k % 5),
                latency_ms=90_000.0 if failed else 10.0 * k + (side == "candidate"),
                hit_tool_cap=k % 6 == 1, error="timeout" if failed else None,
            )])  # fmt: skip
        if k % 10 == 9:
            folder.commit()
    with_decision = de.analyze(folder.path).summary()
    without = de.analyze(folder.path).summary(decision=False)
    assert with_decision["sides"] == without["sides"]
    with duckdb.connect() as con:
        con.execute(f"CREATE VIEW r AS SELECT * FROM read_parquet('{folder.path}/replays/*.parquet')")
        for side, got in without["sides"].items():
            q = con.execute("SELECT quantile_cont(coalesce(latency_ms, 0.0), [0.5, 0.9]) FROM r "
                            "WHERE side = ? AND error IS NULL", [side]).fetchall()[0][0]  # fmt: skip
            assert (got["latency_ms_p50"], got["latency_ms_p90"]) == (round(q[0], 1), round(q[1], 1))
            n, errors, cap, cost = con.execute("SELECT count(*), count(error), avg(hit_tool_cap::INT), sum(cost_usd) "
                                               "FROM r WHERE side = ?", [side]).fetchall()[0]  # fmt: skip
            assert (got["replays"], got["errors"], got["hit_tool_cap"]) == (n, errors, round(cap, 4))
            assert got["cost_usd"] == pytest.approx(cost, abs=1e-9)
            assert got["latency_ms_p90"] < 90_000.0  # no failed turn's time
    lists = de.open_result(folder.path).decision(lists=True).sides
    for side, got in with_decision["sides"].items():
        assert got["latency_ms_p50"] == round(float(np.quantile(lists[side].latencies_ms, 0.5)), 1)


def test_a_summary_cached_under_another_definition_of_its_figures_is_computed_again(run: de.RunResult) -> None:
    """A run's summary cached by a version whose figures meant otherwise (an unnumbered file: the sides' latencies
    of failed replays too) is not read: the figures are computed again."""
    a = de.analyze(run.path)
    fresh = a.summary()
    (a.cache / "summary-1.json").write_text(json.dumps({**fresh, "pairs": -1}), encoding="utf-8")
    assert de.analyze(run.path).summary()["pairs"] == fresh["pairs"] == run.counts.pairs


def test_a_sides_cost_in_the_summary_is_of_every_replay_not_of_its_models_rounded_sums() -> None:
    """Costs priced per token often fall half-way at the 7th decimal: the side's cost is summed over every replay
    at once (as DuckDB's fsum gives it: math.fsum's rounding here), not over its models' sums, whose last bit can
    round the 6-decimal figure the other way (it did in 17 of 400 such sides)."""
    import math
    import random

    import duckdb
    import numpy as np
    import pyarrow as pa

    from delta_eval.analysis.analyze import _side_figures
    from delta_eval.analysis.spend import spend_rows

    rng = random.Random(5)
    for _ in range(120):
        n, price = rng.choice([20, 200]), rng.choice([2.5, 0.15, 1.1, 3.0])
        costs = [rng.randint(100, 20000) * price / 1e6 + rng.randint(0, 2000) * 10.0 / 1e6 for _ in range(n)]
        with duckdb.connect() as con:
            con.register("replays", pa.table({"side": ["candidate"] * n, "cost_usd": costs,
                                              "model": [rng.choice("abc") for _ in range(n)]}))  # fmt: skip
            (side,) = [r for r in spend_rows(con) if r.whole_side]
        assert _side_figures(side, np.array([1.0]), None)["cost_usd"] == round(math.fsum(costs), 6)


def test_a_summary_of_a_run_without_rows_yet(tmp_path: Path) -> None:
    """A run that has committed no batch, and one with verdicts but no replays: the summary says so (no sides, an
    empty funnel), as it did before its scans ran on a cursor of their own (which sees the database's tables, not
    a connection's registered ones)."""
    from delta_eval.store.manifest import RunManifest

    def folder_of(name: str) -> RunFolder:
        folder = RunFolder(tmp_path / name)
        folder.write_manifest(RunManifest(status="running", fingerprint={}, config={}, source="s", baseline="b",
                                          candidate="c"))  # type: ignore[arg-type]  # fmt: skip
        return folder

    for decision in (False, True):
        s = de.analyze(folder_of(f"empty{decision}").path).summary(decision=decision)
        assert (s["sides"], s["funnel"], s["pairs"]) == ({}, {}, 0)
    folder = folder_of("verdicts")
    folder.add("verdicts", [de.Verdict(pair_id="p1", conversation_id="c1", turn_index=0, stage="judge",
                                       outcome="candidate")])  # fmt: skip
    folder.commit()
    s = de.analyze(folder.path).summary()
    assert (s["sides"], s["funnel"], s["pairs"]) == ({}, {"judge": 1}, 1)
    assert s["decision"]["outcome"] in ("PARTIAL", "REJECTED", "APPROVED")
