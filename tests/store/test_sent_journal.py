"""Calls are counted as they are sent: a killed session's calls in flight are reported, not lost from the books."""

from __future__ import annotations

from pathlib import Path

import pytest

from delta_eval.calls import CallStats
from delta_eval.exceptions import RunFolderLinkError
from delta_eval.store.manifest import RunCounts, RunManifest
from delta_eval.store.sent import SentJournal, remove_journals, sent_by


def manifest() -> RunManifest:
    return RunManifest(fingerprint={}, config={}, source="s", baseline="b", candidate="c")


def test_a_killed_sessions_unrecorded_sends_are_lost_at_the_kill_and_counted(tmp_path: Path) -> None:
    journal = SentJournal(tmp_path, 1)
    for _ in range(10):
        journal.record()
    journal.close()
    m = manifest()
    m.begin_session(resumed_pairs=0, cached_responses=0)
    m.checkpoint(1, pairs_decided=2, calls={"openai:gpt-4.1": CallStats(made=4, answered=4)})
    # killed here: 6 more were sent, 2 of them answered and cached before the kill
    m.begin_session(resumed_pairs=2, cached_responses=6, sent=lambda n: sent_by(tmp_path, n))
    killed = m.sessions[0]
    assert (killed.status, killed.sent, killed.answered_unrecorded, killed.lost_at_kill) == ("killed", 10, 2, 4)
    m.end_session("completed", seconds=1.0, pairs_decided=3, calls={"openai:gpt-4.1": CallStats(made=1, answered=1)},
                  cache=None, counts=RunCounts())  # fmt: skip
    total = m.counts.calls
    assert (total.made, total.answered, total.lost) == (10 + 1, 4 + 2 + 1, 4)


def test_a_session_of_an_older_version_has_no_journal_and_no_guess(tmp_path: Path) -> None:
    m = manifest()
    m.begin_session(resumed_pairs=0, cached_responses=0)
    m.begin_session(resumed_pairs=0, cached_responses=0, sent=lambda n: sent_by(tmp_path, n))
    assert (m.sessions[0].sent, m.sessions[0].lost_at_kill) == (None, 0)


def test_journals_go_with_a_reset_and_are_never_written_through_a_link(tmp_path: Path) -> None:
    SentJournal(tmp_path, 1).close()
    assert remove_journals(tmp_path) == [tmp_path / "_sent" / "1"]
    assert not (tmp_path / "_sent").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "_sent").symlink_to(elsewhere)
    with pytest.raises(RunFolderLinkError, match="_sent"):
        SentJournal(tmp_path, 1)
    assert list(elsewhere.iterdir()) == []
