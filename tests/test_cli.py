from __future__ import annotations

from pathlib import Path

import pytest

import delta_eval as de
from delta_eval.cli import main
from tests.conftest import demo_source_toml


def test_demo_prints_counts_win_rate_and_says_it_is_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo"), "-n", "8", "--latency-ms", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "simulated" in out.lower()
    assert "no real model was called" in out
    assert "read 200" in out
    assert "sampled 8" in out
    assert "judging funnel" in out
    assert "1 deterministic" in out
    assert "2 equivalence" in out
    assert "3 judge" in out
    assert "before stage 3" in out
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


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_the_demo_through_a_real_sdk_against_a_fake_server(
    wire: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--wire", wire, "--out", str(out), "-n", "4", "--latency-ms", "0", "--no-progress"]) == 0
    printed = capsys.readouterr()
    assert f"fake {wire} server on 127.0.0.1" in printed.out
    assert "no real model was called" in printed.out
    result = de.open_result(out)
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert result.manifest.baseline_model == f"{wire}:baseline"
    con = result.connect()
    assert con.execute("SELECT count(*) FROM replays WHERE side = 'candidate' AND request_ids <> []").fetchone()[0] > 0


@pytest.mark.slow
def test_fake_server_command_serves_a_real_sdk_until_interrupted() -> None:
    import signal
    import subprocess
    import sys

    import anyio
    import openai

    command = [sys.executable, "-m", "delta_eval", "fake-server", "openai"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base_url = line.split(" on ")[1].split(" ")[0]

        async def ask() -> str | None:
            async with openai.AsyncOpenAI(base_url=base_url, api_key="any", max_retries=0) as client:
                reply = await client.chat.completions.create(
                    model="gpt-4.1", messages=[{"role": "user", "content": "hello?"}]
                )
                return reply.choices[0].message.content

        assert anyio.run(ask)  # a generic reply: the context matches no recording
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0


def test_run_a_toml_config_on_a_real_adapter_with_its_key_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tau_conversations: list
) -> None:
    from delta_eval.testing import FakeOpenAIServer

    monkeypatch.setenv("EVAL_OPENAI_KEY", "sk-from-the-env")
    with FakeOpenAIServer(recordings=tau_conversations, api_key="sk-from-the-env") as server:
        config = tmp_path / "eval.toml"
        config.write_text(
            'out = "run"\n'
            + demo_source_toml()
            + f"""
[baseline]
model = "openai:gpt-4.1-mini"
provider_options = {{ base_url = "{server.base_url}", api_key_env = "EVAL_OPENAI_KEY" }}

[candidate]
model = "openai-responses:gpt-4.1-mini"
provider_options = {{ base_url = "{server.base_url}", api_key_env = "EVAL_OPENAI_KEY" }}
params = {{ stream = true }}
"""
        )
        assert main(["run", str(config), "--no-progress"]) == 0
    result = de.open_result(tmp_path / "run")
    assert (result.counts.pairs, result.counts.errors) == (3, 0)
    assert {r.path for r in server.requests} == {"/v1/chat/completions", "/v1/responses"}
    for path in (tmp_path / "run").rglob("*"):
        assert not path.is_file() or b"sk-from-the-env" not in path.read_bytes()


def test_run_refuses_a_changed_config_until_told_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "eval.toml"
    body = (
        'out = "runs/x"\nmax_turns_per_conversation = 1\n[source]\npath = "{path}"\nmessages = "traj"\n'
        'id = "{{task_id}}/{{trial}}"\ntools = "{tools}"\n[sample]\nn = {n}\n'
        '[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
    )
    paths = {"path": de.demo.DEMO_CONVERSATIONS, "tools": de.demo.DEMO_TOOLS}
    config.write_text(body.format(n=2, **paths))
    assert main(["run", str(config), "--no-progress"]) == 0
    config.write_text(body.format(n=3, **paths))
    capsys.readouterr()
    assert main(["run", str(config), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "differs in: sample.n" in err
    assert "--overwrite" in err
    assert "Traceback" not in err
    assert main(["run", str(config), "--no-progress", "--overwrite"]) == 0
    assert de.open_result(tmp_path / "runs" / "x").counts.sampled == 3


def test_early_errors_are_one_line_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_provider_keys: None
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    source = f'[source]\npath = "{de.demo.DEMO_CONVERSATIONS}"\nmessages = "traj"\n'
    sides = '[baseline]\nmodel = "{base}"\n{extra}[candidate]\nmodel = "simulated:b"\n'
    cases = [
        ('out = "a-file"\n', {"base": "simulated:a", "extra": ""}, "'out' is a file, not a folder"),
        ('out = "a-file/run"\n', {"base": "simulated:a", "extra": ""}, "cannot create the run folder"),
        ('out = "r1"\n', {"base": "nosuch:model", "extra": ""}, "nosuch"),
        ('out = "r2"\n', {"base": "openai:gpt-4.1", "extra": ""}, "no API key; set OPENAI_API_KEY"),
        (
            'out = "r3"\n',
            {"base": "openai:gpt-4.1", "extra": "provider_options = { timeout = -1 }\n"},
            "bad provider_options for openai:gpt-4.1",
        ),
        (
            'out = "r4"\n',
            {"base": "simulated:a", "extra": 'params = { temperature = "hot" }\n'},
            "baseline.params.temperature: expected a number, got 'hot' (",
        ),
    ]
    for head, side, said in cases:
        config = tmp_path / "eval.toml"
        config.write_text(head + source + sides.format(**side))
        assert main(["run", str(config), "--no-progress"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith("delta-eval: error: ")
        assert said in err[0]
    for name in ("r1", "r2", "r3", "r4"):
        assert not (tmp_path / name).exists()  # nothing written: the errors came before the run began
    config.write_text('out = "r5"\n' + source + sides.format(base="openai:gpt-4.1", extra=""))
    with pytest.raises(de.ConfigError, match="no API key"):
        main(["--debug", "run", str(config), "--no-progress"])


def test_a_source_with_no_assistant_turn_exits_nonzero_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    records = [{"id": f"q{k}", "messages": [{"role": "user", "content": f"question {k}"}]} for k in range(3)]
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = tmp_path / "eval.toml"
    config.write_text(
        'out = "run"\n[source]\npath = "questions.jsonl"\n[baseline]\nmodel = "simulated:a"\n'
        '[candidate]\nmodel = "simulated:b"\n'
    )
    assert main(["run", str(config), "--no-progress"]) == 5  # the run started, then failed: no decision
    err = capsys.readouterr().err.strip().splitlines()
    path = tmp_path / "questions.jsonl"
    assert err == [
        f"delta-eval: error: 3 conversations read from {path}, none has an assistant turn to replay: the first record "
        "holds 1 message at 'messages' (roles: user; no assistant message); its fields: id, messages"
    ]
    assert de.open_result(tmp_path / "run").status == "failed"
