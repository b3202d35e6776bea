"""The viewer in a real browser: Debian's chromium, headless, driven by Playwright, against the server on a free
port of 127.0.0.1. A person filters the list, opens a pair, walks with j/k, labels it, and calibrate sees the
label; hostile output stays text in the rendered page.

Never ``playwright install``: the browser is the system's (CI installs Debian's ``chromium`` package). Skipped, with
the reason, only where /usr/bin/chromium is absent, and never in CI (``DELTA_EVAL_BROWSER_TESTS=required``: a
missing browser fails there).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.viewer import Server
from tests.viewer.conftest import HOSTILE

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if os.environ.get("DELTA_EVAL_BROWSER_TESTS") == "required":
    assert CHROMIUM.exists(), "the browser tests are required here and /usr/bin/chromium is missing"
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium here (apt-get install chromium; .ci/run installs it)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def test_filter_open_walk_label_and_calibrate_sees_it(page: Any, demo_run: Path) -> None:
    with Server([demo_run], user="browser-tester") as server:
        page.goto(server.url + "/")
        assert page.locator("#outcome").inner_text() in ("APPROVED", "PARTIAL", "REJECTED")
        # filter: the pairs the baseline won, through the form
        page.check("input[name=outcome][value=baseline]")
        page.click("#apply")
        page.wait_for_url(re.compile(r"outcome=baseline"))
        ids = page.locator("a.pair-link").all_inner_texts()
        outcomes = dict(de.open_run(demo_run).execute("SELECT pair_id, outcome FROM verdicts").fetchall())
        assert ids
        assert all(outcomes[p] == "baseline" for p in ids)
        # open the first pair, then j / k walk the filtered list
        page.click("a.pair-link >> nth=0")
        page.wait_for_selector("#pair-id")
        assert page.locator("#pair-id").inner_text() == ids[0]
        if len(ids) > 1:
            page.keyboard.press("j")
            page.wait_for_function("id => document.querySelector('#pair-id').textContent === id", arg=ids[1])
            page.keyboard.press("k")
            page.wait_for_function("id => document.querySelector('#pair-id').textContent === id", arg=ids[0])
        # the conversation so far is collapsed, and opens
        assert not page.locator("details.history").evaluate("d => d.open")
        page.click("details.history > summary")
        assert page.locator("details.history").evaluate("d => d.open")
        # label it: the judge was wrong
        page.check("input[name=label][value=judge_wrong]")
        page.fill("textarea[name=note]", "the candidate asked first, as it should")
        page.click("#save-label")
        page.wait_for_selector("#labels")
        assert "judge_wrong by browser-tester" in page.locator("#labels").inner_text()
        assert page.locator("#pair-id").inner_text() == ids[0]
    cal = de.calibrate(demo_run)
    assert cal.overall.pairs == 1
    assert cal.overall.agreement == 0.0
    assert sum(cal.overall.confusion["judge_wrong"].values()) == 1


def test_hostile_output_is_text_in_the_rendered_page(page: Any, synthetic: Path) -> None:
    with Server([synthetic], user="browser-tester") as server:
        page.goto(server.url + "/run/0?q=pwned")
        page.click("a.pair-link >> nth=0")
        page.wait_for_selector("#pair-id")
        candidate = page.locator('pre.text[data-side="candidate"]').inner_text()
        assert HOSTILE in candidate  # shown, character for character
        assert page.locator("img[src=x]").count() == 0
        assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    assert page.dialogs == []  # no alert() ran


def test_a_session_page_shows_the_two_transcripts_side_by_side_with_their_sources(page: Any, session_run: Path) -> None:
    con = de.open_run(session_run)
    pair_id, answered = con.execute(
        'SELECT pair_id, count(*) FILTER (WHERE "user" IS NOT NULL) AS n FROM transcripts '
        "WHERE side = 'candidate' GROUP BY pair_id ORDER BY n DESC, pair_id LIMIT 1"
    ).fetchone()
    llm = con.execute(
        "SELECT count(*) FROM tool_calls WHERE pair_id = ? AND side <> 'recorded' AND result_source = 'llm'", [pair_id]
    ).fetchone()[0]
    with Server([session_run], user="browser-tester") as server:
        page.goto(server.url + "/run/0")
        page.click(f"a.pair-link:text-is('{pair_id}')")
        page.wait_for_selector("#session")
        assert page.locator("#pair-id").inner_text() == pair_id
        headers = page.locator("#session thead th").all_inner_texts()
        assert [h.split("\n")[0] for h in headers[1:]] == ["baseline", "candidate"]
        # the two transcripts are laid out side by side: the same turn's cells on one row, baseline left
        left = page.locator('#session td[data-side="baseline"][data-turn="1"]').bounding_box()
        right = page.locator('#session td[data-side="candidate"][data-turn="1"]').bounding_box()
        assert left is not None
        assert right is not None
        assert left["x"] + left["width"] <= right["x"] + 1
        assert abs(left["y"] - right["y"]) < 1
        # every user message of the candidate's transcript is marked as the simulated user's
        said = page.locator('#session td[data-side="candidate"] .msg.user')
        assert said.count() == answered > 0
        assert set(said.locator(".role").all_text_contents()) == {"simulated user"}
        # tool results say where they came from, and open to show the result
        marks = page.locator("#session .src")
        assert page.locator('#session .src[data-source="llm"]').count() == llm
        sources = set(marks.all_inner_texts())
        assert "recorded" in sources
        result = page.locator("#session details.result").first
        assert not result.evaluate("d => d.open")
        result.locator("summary").click()
        assert result.evaluate("d => d.open")
    assert page.dialogs == []
