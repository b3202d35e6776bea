"""A session run in the viewer and the HTML report: the two sides' transcripts side by side, each user message and
tool result marked with where it came from."""

from __future__ import annotations

import re
from pathlib import Path

import delta_eval as de
from delta_eval.analysis.html import render_html
from tests.viewer.conftest import client_of


def _sources(run: Path) -> tuple[set[str], set[str]]:
    con = de.open_run(run)
    users = {s for (s,) in con.execute("SELECT DISTINCT user_source FROM transcripts WHERE side <> 'recorded' "
                                       "AND user_source IS NOT NULL").fetchall()}  # fmt: skip
    results = {s for (s,) in con.execute("SELECT DISTINCT result_source FROM tool_calls WHERE side <> 'recorded' "
                                         "AND result_source IS NOT NULL").fetchall()}  # fmt: skip
    return users, results


def test_the_session_page_shows_both_transcripts_with_every_source_marked(session_run: Path) -> None:
    users, results = _sources(session_run)
    assert users == {"simulated"}
    assert {"recorded", "llm"} <= results
    pair_id = de.open_run(session_run).execute("SELECT pair_id FROM verdicts ORDER BY pair_id LIMIT 1").fetchone()[0]
    page = client_of(session_run).get("/run/0/pair", params={"id": pair_id})
    assert page.status_code == 200
    html = page.text
    assert "The session, side by side" in html
    assert "The turn, side by side" not in html
    head = html[html.index('id="session"') : html.index("</thead>", html.index('id="session"'))]
    assert re.findall(r"<th>(baseline|candidate)<", head) == ["baseline", "candidate"]  # no recorded column
    turns = (
        de.open_run(session_run)
        .execute(
            'SELECT side, count(*) FILTER (WHERE "user" IS NOT NULL) FROM transcripts WHERE pair_id = ? GROUP BY side',
            [pair_id],
        )
        .fetchall()
    )
    for side, answered in turns:
        if side != "recorded":
            cells = re.findall(rf'data-side="{side}" data-turn="\d+">(.*?)</td>', html, re.S)
            assert sum(c.count('class="msg user said-simulated"') for c in cells) == answered
    assert "simulated user" in html
    # Every tool result of every session is marked with its source, as the run stored it.
    client, con = client_of(session_run), de.open_run(session_run)
    for (pid,) in con.execute("SELECT pair_id FROM verdicts").fetchall():
        query = ("SELECT result_source, count(*) FROM tool_calls WHERE pair_id = ? AND side <> 'recorded' "
                 "AND result_source IS NOT NULL GROUP BY ALL")  # fmt: skip
        stored = dict(con.execute(query, [pid]).fetchall())
        shown = client.get("/run/0/pair", params={"id": pid}).text
        for source in ("recorded", "llm", "simulated"):
            assert len(re.findall(rf'class="src src-{source}" data-source="{source}"', shown)) == stored.get(source, 0)


def test_the_html_report_shows_a_session_as_two_transcripts(session_run: Path) -> None:
    html = render_html(de.analyze(session_run))
    assert "<div class=side2>" in html
    assert "<div class=transcript data-side=baseline>" in html
    assert "<div class=transcript data-side=candidate>" in html
    assert "<div class='said said-simulated'><b>simulated user</b>" in html
    assert "<span class='src src-recorded'>recorded</span>" in html
    assert "<span class='src src-llm'>simulated by the tool model</span>" in html
    assert "<div class=side>" not in html  # no turn-level pair layout
    calls = de.open_result(session_run).counts.simulating
    for role, label in (("user_simulator", "user simulator"), ("tool_simulator", "tool simulator")):
        assert f"<tr><td>{label} <span class=muted>({calls[role].calls:,} calls)</span>" in html
