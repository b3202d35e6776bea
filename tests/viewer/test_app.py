"""The viewer's endpoints through the app's test client (httpx): the decision and its links, the pair list's
filters, sorting and pages against the same questions asked of the run in DuckDB, a pair's page, escaping of
untrusted output, several runs, and what the viewer refuses."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from starlette.testclient import TestClient

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.viewer import create_app
from delta_eval.viewer.queries import PAGE_SIZE
from tests.viewer.conftest import HOSTILE, client_of

_LINK = re.compile(r'class="pair-link" href="([^"]+)">([^<]+)</a>')


def listed(page: str) -> list[str]:
    """The pair ids a list page shows, in order."""
    return [html.unescape(pair) for _, pair in _LINK.findall(page)]


def count(page: str) -> int:
    found = re.search(r'id="count"><b>(\d+)</b>', page)
    assert found is not None
    return int(found.group(1))


def sql(run: Path, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = de.open_run(run).execute(query, params or []).fetchall()
    return rows


def all_pages(client: TestClient, query: str) -> list[str]:
    first = client.get(f"/run/0?{query}")
    assert first.status_code == 200
    pages = -(-count(first.text) // PAGE_SIZE)
    ids = listed(first.text)
    for p in range(2, pages + 1):
        ids += listed(client.get(f"/run/0?{query}&page={p}").text)
    return ids


def test_the_decision_is_at_the_top_and_each_gate_links_to_its_pairs(demo_client: TestClient, demo_run: Path) -> None:
    page = demo_client.get("/").text  # one run: the index is its page
    decision = de.open_result(demo_run).decision()
    assert re.search(rf'id="outcome">{decision.outcome}<', page)
    assert html.escape(decision.decided_by) in page
    links = dict(re.findall(r'data-metric="([^"]+)" href="([^"]+)"', page))
    assert set(links) >= {"critical_rate", "severity_rate", "error_rate", "undecided_rate"}
    critical = html.unescape(links["critical_rate"])
    ids = listed(demo_client.get(critical).text)
    assert sorted(ids) == sorted(
        p for (p,) in sql(demo_run, "SELECT pair_id FROM verdicts WHERE severity = 'critical'")
    )
    # the non-inferiority test links to the pairs each side won
    assert 'href="/run/0?outcome=baseline"' in page


@pytest.mark.parametrize(
    ("query", "where", "params"),
    [
        ("outcome=baseline", "outcome = ?", ["baseline"]),
        ("outcome=candidate&outcome=baseline", "outcome IN (?, ?)", ["candidate", "baseline"]),
        ("stage=equivalence", "stage = ?", ["equivalence"]),
        ("severity=minor&severity=critical", "severity IN (?, ?)", ["minor", "critical"]),
        ("severity=none", "coalesce(severity, 'none') = 'none'", []),
        ("failed=judge", "error_side = ?", ["judge"]),
        ("failed=baseline&failed=candidate", "error_side IN (?, ?)", ["baseline", "candidate"]),
        ("stratum=task_type%3Dt3", "stratum = ?", ["task_type=t3"]),
        ("outcome=tie&stratum=task_type%3Dt1", "outcome = ? AND stratum = ?", ["tie", "task_type=t1"]),
    ],
)
def test_filters_list_exactly_the_pairs_duckdb_finds(
    synthetic_client: TestClient, synthetic: Path, query: str, where: str, params: list[str]
) -> None:
    expected = sorted(p for (p,) in sql(synthetic, f"SELECT pair_id FROM verdicts WHERE {where}", params))
    assert expected, "a filter that matches nothing proves little"
    assert sorted(all_pages(synthetic_client, query)) == expected


def test_tool_flag_and_text_search_filters(synthetic_client: TestClient, synthetic: Path) -> None:
    by_tool = sql(
        synthetic,
        "SELECT DISTINCT pair_id FROM tool_calls WHERE name = ? AND side IN ('baseline', 'candidate')",
        ["calculate"],
    )
    assert sorted(all_pages(synthetic_client, "tool=calculate")) == sorted(p for (p,) in by_tool)
    word = "UPGRADE"  # case does not matter
    found = sql(
        synthetic,
        "SELECT pair_id FROM pairs WHERE lower(concat_ws(' ', pair_id, summary, baseline_text, candidate_text)) LIKE ?",
        [f"%{word.lower()}%"],
    )
    assert sorted(all_pages(synthetic_client, f"q={word}")) == sorted(p for (p,) in found)
    assert listed(synthetic_client.get("/run/0?q=no+such+words+anywhere").text) == []


def test_pages_cover_every_pair_once_in_the_default_order(synthetic_client: TestClient, synthetic: Path) -> None:
    ids = all_pages(synthetic_client, "")
    expected = [p for (p,) in sql(synthetic, "SELECT pair_id FROM verdicts ORDER BY conversation_id, turn_index")]
    assert ids == expected
    assert len(listed(synthetic_client.get("/run/0?page=2").text)) == PAGE_SIZE
    last = -(-len(expected) // PAGE_SIZE)
    # a page past the end shows the last one; a page that is not a number, the first
    assert listed(synthetic_client.get("/run/0?page=999").text) == listed(
        synthetic_client.get(f"/run/0?page={last}").text
    )
    assert listed(synthetic_client.get("/run/0?page=x").text) == expected[:PAGE_SIZE]


def test_sorting_by_a_column_both_ways(synthetic_client: TestClient, synthetic: Path) -> None:
    ids = all_pages(synthetic_client, "stage=judge&sort=preference&dir=desc")
    preference = dict(sql(synthetic, "SELECT pair_id, preference FROM verdicts WHERE stage = 'judge'"))
    values = [preference[p] for p in ids]
    assert values == sorted(values, reverse=True)
    up = all_pages(synthetic_client, "stage=judge&sort=candidate_latency")
    latency = dict(sql(synthetic, "SELECT pair_id, latency_ms FROM replays WHERE side = 'candidate'"))
    assert [latency[p] for p in up] == sorted(latency[p] for p in up)


def test_hostile_input_is_data_never_sql(synthetic_client: TestClient, synthetic: Path) -> None:
    before = count(synthetic_client.get("/run/0").text)
    for query in ("q=%27%3B+DROP+TABLE+pair_index%3B+--", "outcome=%27+OR+1%3D1+--", "sort=pair_id%3B+DROP+TABLE+x",
                  "tool=%27%5D%29+OR+TRUE+--", "theme=%27", "q=%25", "q=_"):  # fmt: skip
        assert synthetic_client.get(f"/run/0?{query}").status_code == 200
    assert listed(synthetic_client.get("/run/0?outcome=%27+OR+1%3D1+--").text) == []
    assert listed(synthetic_client.get("/run/0?q=%25").text) == []  # a literal %, not a wildcard
    assert count(synthetic_client.get("/run/0").text) == before


def test_model_output_is_shown_as_text_never_run(synthetic_client: TestClient, synthetic: Path) -> None:
    (pair,) = sql(synthetic, "SELECT pair_id FROM replays WHERE final_text = ?", [HOSTILE])[0]
    listing = synthetic_client.get("/run/0", params={"q": "pwned"}).text
    assert listed(listing) == [pair]
    page = synthetic_client.get("/run/0/pair", params={"id": pair}).text
    for text in (listing, page):
        assert "<script>alert" not in text
        assert "<img src=x" not in text
        assert "&lt;script&gt;" in text
    # the word diff keeps the whole text, escaped, on the candidate's side (marked up in spans of changed words)
    assert html.escape(HOSTILE, quote=False) in re.sub(r'<span class="(?:ins|del)">|</span>', "", page).replace(
        "&#34;", '"'
    )


def test_a_pair_page_shows_the_context_both_sides_and_every_judge_answer(
    demo_client: TestClient, demo_run: Path
) -> None:
    ((pair,),) = sql(demo_run, "SELECT pair_id FROM verdicts WHERE stage = 'judge' LIMIT 1")
    page = demo_client.get("/run/0/pair", params={"id": pair}).text
    assert f'id="pair-id">{html.escape(pair)}<' in page
    judgements = sql(demo_run, "SELECT judge, answer FROM judgements WHERE pair_id = ?", [pair])
    assert page.count('class="judgement"') == len(judgements) > 0
    assert 'id="user-message"' in page
    assert "Tools offered (" in page
    for side in ("baseline", "candidate", "recorded"):
        assert f'class="side {side}"' in page
    baseline_calls = sql(demo_run, "SELECT name FROM tool_calls WHERE pair_id = ? AND side = 'baseline'", [pair])
    for (name,) in baseline_calls:
        assert f"<b>{name}</b>" in page
    # Every tool result is marked with where it came from, as in a session's page (one template serves both).
    query = "SELECT result_source, count(*) FROM tool_calls WHERE pair_id = ? AND result IS NOT NULL GROUP BY ALL"
    stored = dict(sql(demo_run, query, [pair]))
    shown = re.findall(r'class="src src-(\w+)" data-source="\w+"', page)
    assert sum(stored.values()) > 0
    assert {s: shown.count(s) for s in set(shown)} == stored
    assert demo_client.get("/run/0/pair", params={"id": "no such pair"}).status_code == 404
    assert demo_client.get("/run/7").status_code == 404


def test_next_and_previous_walk_the_current_filter(synthetic_client: TestClient) -> None:
    listing = synthetic_client.get("/run/0?outcome=baseline&sort=candidate_latency&dir=desc").text
    links = _LINK.findall(listing)
    ids = [html.unescape(p) for _, p in links]
    second = html.unescape(links[1][0])
    page = synthetic_client.get(second).text
    nxt = re.search(r'id="next" rel="next" href="([^"]+)"', page)
    prev = re.search(r'id="prev" rel="prev" href="([^"]+)"', page)
    assert nxt is not None
    assert prev is not None
    assert parse_qs(urlsplit(html.unescape(nxt.group(1))).query)["id"] == [ids[2]]
    assert parse_qs(urlsplit(html.unescape(prev.group(1))).query)["id"] == [ids[0]]
    assert parse_qs(urlsplit(html.unescape(nxt.group(1))).query)["outcome"] == ["baseline"]


def test_labels_are_saved_beside_the_run_and_calibrate_reads_them(demo_run: Path) -> None:
    client = client_of(demo_run, user="ana")
    rows = sql(demo_run, "SELECT pair_id, outcome FROM verdicts WHERE outcome IN ('baseline', 'candidate') LIMIT 2")
    (agree, outcome), (other, _) = rows
    r = client.post("/run/0/label", data={"pair_id": agree, "label": outcome, "note": "as the judge said",
                                          "back": f"id={agree}&pos=3"}, follow_redirects=False)  # fmt: skip
    assert r.status_code == 303
    assert r.headers["location"].startswith("/run/0/pair?id=")
    client.post("/run/0/label", data={"pair_id": other, "label": "judge_wrong", "note": "<b>no</b>"})
    files = sorted((demo_run / "labels").glob("labels-*.parquet"))
    assert len(files) == 2  # one file a batch, nothing rewritten
    cal = de.calibrate(demo_run)  # no labels file given: the run's own
    assert cal.overall.pairs == 2
    assert cal.overall.agreement == 0.5
    assert sum(cal.overall.confusion["judge_wrong"].values()) == 1  # listed apart, counted as a disagreement
    page = client.get("/run/0/pair", params={"id": other}).text
    assert "judge_wrong</b> by ana" in page
    assert "&lt;b&gt;no&lt;/b&gt;" in page
    # a later label of the same person replaces the earlier one in calibrate
    client.post("/run/0/label", data={"pair_id": other, "label": "same"})
    assert de.calibrate(demo_run).overall.pairs == 2
    assert "judge_wrong" not in de.calibrate(demo_run).overall.confusion


def test_labels_that_cannot_be_taken(demo_client: TestClient, demo_run: Path) -> None:
    (pair,) = sql(demo_run, "SELECT pair_id FROM verdicts LIMIT 1")[0]
    assert demo_client.post("/run/0/label", data={"pair_id": pair, "label": "great"}).status_code == 400
    assert demo_client.post("/run/0/label", data={"pair_id": "nope#0", "label": "same"}).status_code == 404
    elsewhere = demo_client.post(
        "/run/0/label", data={"pair_id": pair, "label": "same"}, headers={"Origin": "https://evil.example"}
    )
    assert elsewhere.status_code == 403
    # the redirect goes back to a pair page, whatever the form says
    r = demo_client.post("/run/0/label", data={"pair_id": pair, "label": "same", "back": "//evil.example/"},
                         follow_redirects=False)  # fmt: skip
    assert r.headers["location"].startswith("/run/0/pair?id=")
    assert not (demo_run / "labels").exists() or len(list((demo_run / "labels").iterdir())) == 1
    # a request addressed to another host name (DNS rebinding) is not served
    assert TestClient(demo_client.app, base_url="http://evil.example").get("/run/0").status_code == 400


def test_several_runs_side_by_side_and_where_they_differ(synthetic_master: Path, tmp_path: Path) -> None:
    from tests.viewer.conftest import load_benchmark

    other = Path(load_benchmark().synthetic_run(tmp_path / "other", 300, seed=1))
    # the same pairs (same seed); change some outcomes of the copy
    client = client_of(synthetic_master, other)
    index = client.get("/").text
    assert index.count('href="/run/0"') >= 1
    assert index.count('href="/run/1"') >= 1
    assert 'id="differences"' in index
    page = client.get("/compare").text
    # same seed, same pairs and outcomes: nothing differs but the hostile text, which is not an outcome
    assert "0 of 300 pairs differ" in page

    changed = Path(load_benchmark().synthetic_run(tmp_path / "changed", 300, seed=2))
    client = client_of(synthetic_master, changed)
    a = dict(sql(synthetic_master, "SELECT pair_id, outcome FROM verdicts"))
    b = dict(sql(changed, "SELECT pair_id, outcome FROM verdicts"))
    differ = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    page = client.get("/compare").text
    assert f"{len(differ)} of {len(set(a) | set(b))} pairs differ" in page
    shown = re.findall(r"<tr>\s*<td>([^<]+)</td>", page)
    assert [html.unescape(s) for s in shown] == differ[:PAGE_SIZE]


def test_the_decision_is_shown_whatever_the_run_s_size(synthetic: Path) -> None:
    """The decision is computed in DuckDB over the run's files: no size above which the page leaves it out."""
    client = client_of(synthetic)
    page = client.get("/run/0").text
    outcome = de.open_result(synthetic).decision().outcome
    assert f'<span class="{outcome}" id="outcome">{outcome}</span>' in page
    assert "decide=1" not in page
    assert count(page) == 300


def test_themes_the_analysis_saved_filter_the_list(demo_run: Path) -> None:
    themes = de.analyze(demo_run).themes(outcome="baseline", names="terms")
    assert themes, "the demo's candidate loses some pairs: their reasons make at least one theme"
    client = client_of(demo_run)
    page = client.get("/run/0").text
    theme = themes[0]
    label = f"baseline: {theme['name']}"
    assert f'name="theme" value="{html.escape(label)}"' in page
    assert sorted(all_pages(client, f"theme={quote(label)}")) == sorted(theme["members"])
    # beside it, the prompt section it is attributed to, how the candidate changed it and how sure that is
    assert theme["section"]
    assert theme["section_change"]
    assert theme["confidence"]
    said = f"prompt section: {theme['section']} ({theme['section_change']}, {theme['confidence']} confidence"
    assert html.escape(said) in page


def test_a_text_search_pages_sorts_and_says_when_it_stopped_counting(
    synthetic_client: TestClient, synthetic: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = dict(
        sql(
            synthetic,
            "SELECT v.pair_id, v.preference FROM verdicts v JOIN pairs p USING (pair_id) "
            "WHERE lower(concat_ws(' ', p.summary, p.baseline_text, p.candidate_text)) LIKE '%economy%'",
        )
    )
    assert len(found) > PAGE_SIZE
    ids = all_pages(synthetic_client, "q=economy&sort=preference&dir=desc")
    assert sorted(ids) == sorted(found)
    values = [found[p] for p in ids]
    assert [v for v in values if v is not None] == sorted((v for v in values if v is not None), reverse=True)
    monkeypatch.setattr("delta_eval.viewer.queries.SEARCH_CAP", 60)
    page = synthetic_client.get("/run/0?q=economy").text
    assert re.search(r'id="count">more than <b>60</b>', page)
    assert "page 1 of 2" in page
    assert len(listed(synthetic_client.get("/run/0?q=economy&page=2").text)) == 10


def test_a_pair_opened_from_elsewhere_finds_its_place_in_the_list(synthetic_client: TestClient) -> None:
    ids = listed(synthetic_client.get("/run/0?outcome=baseline").text)
    page = synthetic_client.get("/run/0/pair", params={"id": ids[3], "outcome": "baseline"}).text  # no pos
    nxt = re.search(r'id="next" rel="next" href="([^"]+)"', page)
    assert nxt is not None
    query = parse_qs(urlsplit(html.unescape(nxt.group(1))).query)
    assert query["id"] == [ids[4]]
    assert query["pos"] == ["4"]
    # a pair the filter does not list has no neighbours in it
    other = listed(synthetic_client.get("/run/0?outcome=candidate").text)[0]
    page = synthetic_client.get("/run/0/pair", params={"id": other, "outcome": "baseline", "pos": "2"}).text
    assert 'id="next"' not in page
    assert 'id="prev"' not in page


def test_the_index_of_several_runs_gives_each_decision_and_win_rate(demo_run: Path, synthetic: Path) -> None:
    page = client_of(demo_run, synthetic).get("/").text
    for run in (demo_run, synthetic):
        d = de.open_result(run).decision()
        estimate = d.non_inferiority.win_rate.estimate
        assert d.outcome in page
        assert f"{estimate:.1%}" in page


def test_a_run_of_several_candidates_shows_each_candidate_as_a_run(tmp_path: Path) -> None:
    config = demo_config(tmp_path / "fleet", n=6, latency_ms=0.0)
    variant = config.the_candidate.model_dump()
    candidates = (de.Variant.model_validate({**variant, "name": "warm"}),
                  de.Variant.model_validate({**config.baseline.model_dump(), "name": "same"}))  # fmt: skip
    fleet = config.model_copy(update={"candidate": None, "candidates": candidates})
    run = de.run(fleet, conversations=demo_conversations(), progress=False)
    client = TestClient(create_app([run.path], user="ana"), base_url="http://127.0.0.1")
    index = client.get("/").text
    for name in ("warm", "same"):
        decision = run.of(name).decision()
        assert f"fleet · {name}" in index
        assert decision.outcome in index
    # each candidate's own pairs, and its label lands beside the run for that candidate's calibration
    (same,) = sql(run.path, "SELECT pair_id FROM verdicts WHERE candidate = 'same' LIMIT 1")[0]
    page = client.get("/run/1/pair", params={"id": same})
    assert page.status_code == 200
    assert client.get("/run/0/pair", params={"id": same}).status_code == 404  # not warm's pair
    client.post("/run/1/label", data={"pair_id": same, "label": "same"})
    assert de.calibrate(run.of("same")).overall.pairs == 1
