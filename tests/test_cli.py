from __future__ import annotations

from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.cli import main


def test_demo_prints_counts_win_rate_and_says_it_is_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo"), "-n", "8", "--latency-ms", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "simulated" in out.lower()
    assert "no real model was called" in out
    assert "read 200" in out
    assert "sampled 8" in out
    assert "stage 1 deterministic equivalent" in out
    assert "stage 3 judge" in out
    assert "95% CI" in out
    assert str(tmp_path / "demo") in out
    assert main(["report", str(tmp_path / "demo")]) == 0
    assert "win rate of the candidate" in capsys.readouterr().out


def test_run_from_a_toml_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "prompt.txt").write_text("Be brief. {{recorded_system_prompt}}")
    config = tmp_path / "eval.toml"
    config.write_text(
        f"""
out = "runs/cfg"
max_turns_per_conversation = 2

[source]
path = "{de.demo.DEMO_CONVERSATIONS}"
messages = "traj"
id = "{{task_id}}/{{trial}}"
metadata = {{ reward = "reward", actions = "info.task.actions" }}
tools = "{de.demo.DEMO_TOOLS}"

[sample]
by = ["task_type", "reward"]
n = 10
seed = 3
derived = {{ task_type = {{ function = "delta_eval.demo:airline_task_type" }} }}

[baseline]
model = "simulated:base"

[candidate]
model = "simulated:cand"
system_prompt_file = "prompt.txt"
provider_options = {{ reword_rate = 0.5, skip_tool_rate = 0.5 }}

[judges]
order = "both"
"""
    )
    assert main(["run", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "sampled 10" in out
    result = de.open_result(tmp_path / "runs" / "cfg")
    assert result.manifest.config["candidate"]["system_prompt"].startswith("Be brief.")
    con = result.connect()
    assert con.execute("SELECT max(n_pairs) FROM conversations").fetchone()[0] <= 2
    # order = "both": every pair that reached stage 3 was judged twice, once with the candidate in each position
    judged = con.execute("SELECT count(*) FROM verdicts WHERE stage = 'judge'").fetchone()[0]
    assert judged > 0
    assert con.execute("SELECT DISTINCT candidate_position FROM verdicts WHERE stage = 'judge'").fetchall() == [
        ("both",)
    ]
    per_pair = con.execute(
        "SELECT list(candidate_position ORDER BY candidate_position) FROM judgements WHERE stage = 'judge' "
        "GROUP BY pair_id"
    ).fetchall()
    assert len(per_pair) == judged
    assert {tuple(row[0]) for row in per_pair} == {("A", "B")}


def test_errors_exit_nonzero_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'out = "x"\n[baseline]\nmodel = "nosuch:model"\n[candidate]\nmodel = "simulated:b"\n'
        '[source]\npath = "missing.jsonl"\n'
    )
    assert main(["run", str(bad), "--no-progress"]) == 1
    assert "conversation file not found" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 1
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
