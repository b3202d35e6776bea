"""Session mode through the real SDKs on the fake provider servers, and a session run killed and resumed."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.demo import WIRES, behaviours, demo_models
from delta_eval.schema import Conversation
from tests.killing import commits_at_least, kill_when

READS = ["get_*", "search_*", "list_*", "calculate", "think"]


def airline(n: int) -> list[Conversation]:
    data = de.demo.DATA
    good, _ = de.read_conversations(
        data / "gpt-4o-airline.json",
        messages="traj",
        id="{task_id}/{trial}",
        metadata={"actions": "info.task.actions", "instruction": "info.task.instruction"},
        tools=data / "airline_tools.json",
    ).load()
    return good[:n]


@pytest.mark.parametrize("wire", list(WIRES))
def test_a_session_run_on_each_wire_completes_with_the_fake_playing_the_user(wire: str, tmp_path: Path) -> None:
    conversations = airline(3)
    prefix, server_class = WIRES[wire]
    with server_class(recordings=conversations, behaviour=behaviours(7, 0.0, "changed")) as server:
        url = server.base_url if hasattr(server, "base_url") else server.url
        where = {"base_url": url, "api_key": "k"}
        models = demo_models(prefix, where, latency_ms=0.0)
        config = de.RunConfig(
            baseline=models.baseline,
            candidate=models.candidate,
            judges=models.judges,
            models=models.models,
            mode="session",
            session=de.Session(
                user=f"{prefix}:user",
                user_options=where,
                scripted=False,
                goal="instruction",
                stop_tools=["transfer_to_human_agents"],
                expected="actions",
                ignore=READS,
            ),
            max_tool_rounds=10,
            out=tmp_path / "run",
        )
        result = de.run(config, conversations=conversations, progress=False)
        asked = [str(r.json()) for r in server.requests]
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert result.counts.pairs == len(conversations)
    assert any("<transcript>" in body for body in asked)  # the user simulator's calls went over the wire
    con = de.open_run(tmp_path / "run")
    sources = dict(
        con.execute(
            'SELECT side, list(DISTINCT user_source) FROM transcripts WHERE "user" IS NOT NULL GROUP BY side'
        ).fetchall()
    )
    assert sources == {"baseline": ["simulated"], "candidate": ["simulated"], "recorded": ["recorded"]}


def cached_responses(run_dir: Path) -> int:
    con = sqlite3.connect(run_dir / "cache.sqlite")
    try:
        return int(con.execute("SELECT count(*) FROM responses").fetchone()[0])
    finally:
        con.close()


SCRIPT = """
import sys
import delta_eval as de
sys.path.insert(0, {root!r})
from tests.test_session_runs import READS, airline

slow = {{"latency_ms": 40, "seed": 7}}
config = de.RunConfig(
    baseline=de.Variant(model="simulated:baseline", provider_options=slow),
    candidate=de.Variant(model="simulated:candidate", provider_options={{**slow, "reword_rate": 0.3}}),
    mode="session",
    session=de.Session(user="simulated:user", user_options=slow, scripted=False, goal="instruction",
                       expected="actions", ignore=READS),
    flush_every=2,
    out={out!r},
)
de.run(config, conversations=airline(24), progress=False)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_session_run_killed_then_resumed_writes_each_session_once_and_pays_nothing_twice(tmp_path: Path) -> None:
    out = tmp_path / "run"
    script = tmp_path / "run_sessions.py"
    script.write_text(SCRIPT.format(root=str(Path(__file__).resolve().parents[1]), out=str(out)))
    cmd = [sys.executable, str(script)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, commits_at_least(out))
    killed = de.open_result(out)
    assert killed.status == "running"
    kept = killed.table("verdicts").num_rows
    assert 0 < kept < 24

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = de.open_result(out)
    assert result.status == "completed"
    con = result.connect()
    total, distinct = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
    replays, keys = con.execute("SELECT count(*), count(DISTINCT (pair_id, side)) FROM replays").fetchone()
    assert total == distinct == result.counts.pairs_planned == 24
    assert replays == keys == 3 * total
    sessions = result.manifest.sessions
    assert [s.status for s in sessions] == ["killed", "completed"]
    # every answer was paid once: the resumed session found the killed one's in the cache
    assert result.counts.calls.answered == cached_responses(out)


def test_the_command_line_runs_a_config_in_session_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from delta_eval.cli import main

    config = tmp_path / "sessions.toml"
    config.write_text(
        f"""
out = "{tmp_path / "run"}"
max_tool_rounds = 10

[source]
path = "{de.demo.DEMO_CONVERSATIONS}"
messages = "traj"
id = "{{task_id}}/{{trial}}"
tools = "{de.demo.DEMO_TOOLS}"
metadata = {{ actions = "info.task.actions", instruction = "info.task.instruction" }}

[sample]
n = 4

[baseline]
model = "simulated:base"

[candidate]
model = "simulated:cand"
provider_options = {{ skip_tools = ["cancel_reservation", "book_reservation"] }}

[session]
user = "simulated:user"
goal = "instruction"
expected = "actions"
ignore = ["get_*", "search_*", "list_*", "calculate", "think"]
"""
    )
    assert main(["run", str(config), "--mode", "session", "--no-progress"]) in (0, 3, 4)
    result = de.open_result(tmp_path / "run")
    assert result.status == "completed"
    assert result.manifest.config["mode"] == "session"
    assert result.counts.pairs == 4  # one pair per conversation
    con = result.connect()
    assert con.execute("SELECT count(DISTINCT pair_id) FROM replays WHERE pair_id LIKE '%#session'").fetchone() == (4,)


@pytest.mark.parametrize(("mode", "dimensions"), [
    ("session", ("goal_reached", "correctness", "policy", "efficiency", "tone")),
    ("turn", None),
])  # fmt: skip
def test_a_session_run_s_judges_score_whole_sessions_unless_given_a_rubric(
    mode: str, dimensions: tuple[str, ...] | None, tmp_path: Path
) -> None:
    import anyio

    from delta_eval.judges.llm import LLMPairwiseJudge
    from delta_eval.judges.prompts import Rubric
    from delta_eval.run_models import build_models

    where = {"base_url": "http://127.0.0.1:9/v1", "api_key": "k"}
    models = demo_models("openai", where, latency_ms=0.0)
    config = de.RunConfig(
        baseline=models.baseline, candidate=models.candidate, judges=models.judges, models=models.models,
        mode=mode, session=de.Session(user="openai:user", user_options=where), out=tmp_path / "run",
    )  # fmt: skip

    async def judges() -> list[LLMPairwiseJudge]:
        built = await build_models(config, "source", None)
        try:
            return [j for j in built.cascade._judges if isinstance(j, LLMPairwiseJudge)]
        finally:
            await built.aclose()

    found = anyio.run(judges)
    assert found  # the demo's stage-3 judge is an LLM's
    expected = dimensions or Rubric.default().dimensions
    assert all(j.rubric.dimensions == expected for j in found)


def test_the_llm_tool_simulator_takes_its_own_provider_options(tmp_path: Path) -> None:
    conversations = airline(4)
    prefix, server_class = WIRES["openai"]
    from delta_eval.adapters.simulated import SimulatedBehaviour

    # A candidate that changes arguments: calls the recording never made, which the tool model answers.
    behaviour = {**behaviours(7, 0.0, "changed"), "candidate": SimulatedBehaviour(change_args_rate=0.5, seed=7)}
    with server_class(recordings=conversations, behaviour=behaviour) as server:
        where = {"base_url": server.base_url, "api_key": "k"}
        models = demo_models(prefix, where, latency_ms=0.0)
        config = de.RunConfig(
            baseline=models.baseline, candidate=models.candidate, judges=models.judges, models=models.models,
            mode="session", session=de.Session(
                user=f"{prefix}:user", user_options=where, scripted=False, goal="instruction",
                tool_model=f"{prefix}:tools", tool_options=where, expected="actions", ignore=READS,
            ),
            max_tool_rounds=10, out=tmp_path / "run",
        )  # fmt: skip
        de.run(config, conversations=conversations, progress=False)
        asked = [r for r in server.requests if r.path.endswith("/chat/completions")]
    con = de.open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM errors").fetchone() == (0,)
    simulated = con.execute("SELECT count(*) FROM simulator_calls WHERE role = 'tool_simulator'").fetchone()
    assert simulated is not None
    assert simulated[0] > 0  # the tool model answered through the fake server named by its options
    assert any(r.json().get("model") == "tools" for r in asked)
