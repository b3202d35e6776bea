"""Progress where it matters: a run shows it by default, as plain lines on stderr where stderr is no terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.calls import CallStats
from delta_eval.display import LineProgress, NotebookProgress, ProgressDisplay, progress_display, status_line
from delta_eval.progress import RunProgress
from delta_eval.schema import Usage


def _config(out: Path) -> de.RunConfig:
    return de.demo.demo_config(out, n=3, latency_ms=0.0, judges="rule")


def test_a_run_without_a_terminal_prints_plain_lines_with_the_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = de.run(_config(tmp_path / "run"), conversations=de.demo.demo_conversations(), progress_every=0.01)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("delta-eval ")]
    assert lines, err
    last = lines[-1]  # the line printed when the run ends
    pairs = result.counts.pairs
    assert last.startswith(f"delta-eval completed: {pairs}/{pairs} pairs")
    for field in ("stage1 ", "stage2 ", "judge ", "error ", "calls ", "retries ", "rate-limited ", "tokens ", "cost $"):
        assert field in last, field
    assert "ETA" in last
    assert f"saved {pairs}" in last


def test_progress_false_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    de.run(_config(tmp_path / "run"), conversations=de.demo.demo_conversations(), progress=False, progress_every=0.01)
    printed = capsys.readouterr()
    assert printed.err == ""
    assert printed.out == ""


def test_by_default_a_short_run_without_a_terminal_prints_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default interval (10 s) is longer than this run: only the closing line, so test logs and CI stay quiet.
    # (A slow machine may add a line; what is checked is that the closing line is there and that there are few.)
    de.run(_config(tmp_path / "run"), conversations=de.demo.demo_conversations())
    lines = capsys.readouterr().err.splitlines()
    assert lines
    assert lines[-1].startswith("delta-eval completed:")
    assert len(lines) <= 3


def test_the_counters_carry_tokens_cost_calls_and_eta() -> None:
    stats = {"m": CallStats(answered=5, cached=1, retries=2, rate_limited=1)}
    p = RunProgress(phase="replaying", pairs_total=10, judge=5, replay_started=0.0)
    p.call_stats = lambda: stats
    p.add_spend(Usage(input_tokens=1500, output_tokens=20), 0.25)
    line = status_line(p)
    assert "5/10 pairs" in line
    assert "calls 6 (retries 2, rate-limited 1)" in line
    assert "tokens 1.5k in 20 out" in line
    assert "cost $0.2500" in line
    p.add_spend(None, None)  # a call of unknown usage and price: the cost so far is unknown, not a partial sum
    assert "cost unknown" in status_line(p)
    assert p.eta_seconds(now=50.0) == 50.0


def test_the_display_suits_where_the_output_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    p = RunProgress()
    stream = io.StringIO()
    assert isinstance(progress_display(p, stream=stream), LineProgress)
    with progress_display(p, every=60.0, stream=stream):
        pass
    assert stream.getvalue().count("\n") == 1  # the closing line only

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    assert isinstance(progress_display(p), ProgressDisplay)
    monkeypatch.setattr("delta_eval.display.in_notebook", lambda: True)
    assert isinstance(progress_display(p), NotebookProgress)


def test_a_display_without_a_terminal_does_not_import_rich() -> None:
    # rich is the terminal bar's alone: a run in CI, a log or a notebook does not pay its import (30 ms).
    code = (
        "import io, sys\n"
        "from delta_eval.display import progress_display\n"
        "from delta_eval.progress import RunProgress\n"
        "with progress_display(RunProgress(), stream=io.StringIO()):\n"
        "    pass\n"
        "print('rich' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_progress_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(de.ConfigError, match="progress_every"):
        de.run(_config(tmp_path / "run"), conversations=de.demo.demo_conversations(), progress_every=0)
    assert not (tmp_path / "run").exists()


def test_the_command_line_sets_the_interval_of_its_progress_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from delta_eval.cli import main

    config = tmp_path / "eval.toml"
    config.write_text(
        f'out = "run"\n[source]\npath = "{de.demo.DEMO_CONVERSATIONS}"\nmessages = "traj"\n'
        '[sample]\nn = 3\n[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
    )
    assert main(["run", str(config), "--progress-every", "0.001", "--fail-on", "never"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("delta-eval ")]
    assert len(lines) >= 2  # lines while it ran, then the closing one
    assert lines[-1].startswith("delta-eval completed:")
    with pytest.raises(SystemExit):
        main(["run", str(config), "--progress-every", "x"])
