"""CI mode: ``delta-eval run`` / ``report`` as a merge gate (exit status, Markdown summary, JUnit XML), the GitHub
Action that runs it, and the README section that documents both."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

import delta_eval as de
from delta_eval.analysis.ci import PAIR_URL, WORST_PAIRS, junit_xml
from delta_eval.cli import main
from delta_eval.metrics import DecisionRule, ExitCode, decide

ROOT = Path(__file__).resolve().parents[1]

#: What the common JUnit schema (Jenkins' junit-10.xsd, which CI test reporters follow) allows: each element's
#: attributes (required ones in the second set) and children.
JUNIT_SCHEMA: dict[str, tuple[set[str], set[str], set[str]]] = {
    "testsuites": ({"name", "time", "tests", "failures", "disabled", "errors"}, set(), {"testsuite"}),
    "testsuite": (
        {
            "name",
            "tests",
            "failures",
            "errors",
            "time",
            "disabled",
            "skipped",
            "timestamp",
            "hostname",
            "id",
            "package",
            "file",
            "log",
            "url",
            "version",
        },
        {"name", "tests"},
        {"properties", "testcase", "system-out", "system-err"},
    ),
    "properties": (set(), set(), {"property"}),
    "property": ({"name", "value"}, {"name", "value"}, set()),
    "testcase": (
        {"name", "assertions", "time", "classname", "status", "class", "file", "line"},
        {"name"},
        {"skipped", "error", "failure", "system-out", "system-err"},
    ),
    "failure": ({"message", "type"}, set(), set()),
    "skipped": ({"message"}, set(), set()),
}


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests may run inside a GitHub job: they set the step summary themselves where they test it."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def write_config(folder: Path, name: str, *, candidate: str = "", n: int = 20, strata: bool = False) -> Path:
    """A run config on the bundled tau-bench export and simulated models; ``candidate`` is its provider options
    (``skip_tool_rate = 1.0``: a candidate that never calls the tools the recording called, and loses)."""
    sample = f"[sample]\nn = {n}\nseed = 3\n"
    if strata:
        sample += 'by = ["task_type"]\nderived = { task_type = { function = "delta_eval.demo:airline_task_type" } }\n'
    config = folder / f"{name}.toml"
    config.write_text(
        f"""out = "runs/{name}"
max_turns_per_conversation = 1

[source]
path = "{de.demo.DEMO_CONVERSATIONS}"
messages = "traj"
id = "{{task_id}}/{{trial}}"
tools = "{de.demo.DEMO_TOOLS}"
metadata = {{ actions = "info.task.actions" }}

{sample}
[baseline]
model = "simulated:base"

[candidate]
model = "simulated:base"
provider_options = {{ {candidate} }}
"""
    )
    return config


def check_junit_schema(element: ET.Element) -> None:
    """``element`` and its subtree hold only the elements and attributes the common schema allows, with the
    required attributes present and the counts of each suite matching its cases."""
    allowed, required, children = JUNIT_SCHEMA[element.tag]
    assert set(element.attrib) <= allowed, (element.tag, element.attrib)
    assert required <= set(element.attrib), (element.tag, element.attrib)
    for child in element:
        assert child.tag in children, (element.tag, child.tag)
        check_junit_schema(child)
    if element.tag == "testsuite":
        cases = element.findall("testcase")
        assert element.get("tests") == str(len(cases))
        assert element.get("failures") == str(sum(c.find("failure") is not None for c in cases))
        assert element.get("skipped") == str(sum(c.find("skipped") is not None for c in cases))
        assert all({"name", "classname", "time"} <= set(c.attrib) for c in cases)


def cases_of(root: ET.Element, suite: str) -> dict[str, ET.Element]:
    found = root.find(f"testsuite[@name='delta-eval {suite}']")
    assert found is not None, suite
    return {c.get("name", ""): c for c in found.findall("testcase")}


def md(text: str) -> str:
    """How the summary writes plain text (markup characters escaped)."""
    return re.sub(r"([\\`*_\[\]<>|~&#])", r"\\\1", text)


def test_a_rejected_candidate_exits_3_with_its_summary_and_junit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, "rejected", candidate="skip_tool_rate = 1.0", strata=True)
    step = tmp_path / "step-summary.md"
    step.write_text("earlier output of the step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    summary, junit = tmp_path / "out" / "summary.md", tmp_path / "out" / "junit.xml"
    code = main(["run", str(config), "--no-progress", "--summary", str(summary), "--junit", str(junit)])
    assert code == ExitCode.REJECTED == 3

    result = de.open_result(tmp_path / "runs" / "rejected")
    d = result.decision()
    assert d.outcome == "REJECTED"
    assert d.exit_code == ExitCode.REJECTED
    assert result.exit_code() == ExitCode.REJECTED
    assert result.exit_code("never") == ExitCode.OK

    text = summary.read_text()
    # appended to the step summary, after what the step wrote before
    assert step.read_text() == "earlier output of the step\n" + text
    lines = text.splitlines()
    assert lines[0] == "### delta-eval: ❌ REJECTED (exit 3, fails on rejected)"
    assert f"**Decided by** {md(d.decided_by)}" in lines
    w = d.non_inferiority.win_rate
    assert w.estimate is not None
    assert f"**Win rate** of the candidate {w.estimate:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}] (95% CI" in text
    failed = [g for g in d.gates if g.passed is False]
    assert failed
    assert all(f"- {md(str(g))}" in lines for g in failed)
    assert "| | baseline `simulated:base` | candidate `simulated:base` |" in lines
    assert any(line.startswith("| cost | $") for line in lines)
    assert any(line.startswith("| latency p50 / p95 | ") for line in lines)

    # The most severe losing pairs, in order: critical before minor, then the surest losses.
    verdicts = result.table("verdicts").to_pylist()
    rank = {"critical": 0, "minor": 1}
    lost = sorted((v for v in verdicts if v["outcome"] == "baseline"),
                  key=lambda v: (rank.get(v["severity"], 2), v["preference"], v["pair_id"]))  # fmt: skip
    assert len(lost) > WORST_PAIRS
    table = [line for line in lines if line.startswith("| `")]
    assert [row.split("`")[1] for row in table] == [v["pair_id"] for v in lost[:WORST_PAIRS]]
    for row, v in zip(table, lost, strict=False):
        assert f"| {md(v['stratum'])} | {v['severity']} |" in row
    assert f"**Most severe losing pairs** ({WORST_PAIRS} of {len(lost)} the baseline won)" in lines
    first = PAIR_URL.format(pair_id=quote(lost[0]["pair_id"], safe=""))
    assert f"Open a pair: `delta-eval view runs/rejected` serves each at `{first}` (its id after `id=`)" in lines
    assert len(text) < 6000  # a PR comment, not a report

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    check_junit_schema(root)
    gates = cases_of(root, "gates")
    assert list(gates) == [f"non-inferiority (margin {d.rule.margin:g})", *(g.gate.label for g in d.gates)]
    for g in d.gates:
        failure = gates[g.gate.label].find("failure")
        assert (failure is not None) == (g.passed is False)
        if failure is not None:
            assert failure.get("message") == str(g)
            assert failure.get("type") == g.gate.on_fail
    strata = cases_of(root, "strata")
    assert len(d.strata) > 1
    assert list(strata) == [s.stratum for s in d.strata]
    assert [n for n, c in strata.items() if c.find("failure") is not None] == [s.stratum for s in d.strata if s.worse]
    run = cases_of(root, "run")
    decided = run["decision REJECTED"].find("failure")
    assert decided is not None
    assert decided.get("message") == f"REJECTED: {d.decided_by}"
    assert run["run finished"].find("failure") is None

    # The same gate from the finished folder, without running again (the run and the gate as two CI steps).
    again = tmp_path / "again.md"
    assert main(["report", "runs/rejected", "--fail-on", "rejected", "--summary", str(again)]) == 3
    assert again.read_text() == text
    assert main(["report", "runs/rejected", "--fail-on", "never"]) == 0
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert main(["report", "runs/rejected"]) == 0  # only a report, as before


def test_a_candidate_identical_to_the_baseline_is_approved_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # 100 conversations: enough for "no difference" to clear the margin (about 92 are needed for 2 points).
    config = write_config(tmp_path, "same", n=100)
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    assert main(["run", str(config), "--no-progress", "--fail-on", "partial", "--junit", str(junit),
                 "--summary", str(summary)]) == 0  # fmt: skip
    result = de.open_result(tmp_path / "runs" / "same")
    assert result.decision().outcome == "APPROVED"
    assert result.decision().exit_code == ExitCode.OK
    text = summary.read_text()
    assert text.startswith("### delta-eval: ✅ APPROVED (exit 0, fails on partial)\n")
    assert "Most severe losing pairs" not in text
    root = ET.parse(junit).getroot()
    check_junit_schema(root)
    assert root.get("failures") == "0"
    assert "decision APPROVED" in cases_of(root, "run")


def test_fail_on_partial_turns_a_partial_into_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # The same model on both sides, but too few conversations to show the difference is within the margin.
    config = write_config(tmp_path, "partial", n=12)
    assert main(["run", str(config), "--no-progress"]) == 0  # PARTIAL passes the default gate
    result = de.open_result(tmp_path / "runs" / "partial")
    d = result.decision()
    assert (d.outcome, d.decided_by) == ("PARTIAL", "non-inferiority: undecided")
    assert d.exit_code_at("partial") == ExitCode.PARTIAL
    assert main(["run", str(config), "--no-progress", "--fail-on", "partial"]) == ExitCode.PARTIAL == 4  # resumed
    junit = tmp_path / "junit.xml"
    assert main(["report", "runs/partial", "--fail-on", "partial", "--junit", str(junit)]) == 4
    root = ET.parse(junit).getroot()
    check_junit_schema(root)
    # undecided is "not enough evidence": skipped, not failed; the decision itself fails the gate
    gates = cases_of(root, "gates")
    skipped = gates[f"non-inferiority (margin {d.rule.margin:g})"].find("skipped")
    assert skipped is not None
    assert (skipped.get("message") or "").startswith("undecided")
    failure = cases_of(root, "run")["decision PARTIAL"].find("failure")
    assert failure is not None
    assert failure.get("type") == "PARTIAL"


def test_a_run_that_gives_no_decision_exits_5_and_one_that_cannot_start_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    ci = ["--no-progress", "--summary", str(summary), "--junit", str(junit)]

    # The run starts, then finds nothing to replay: it failed.
    records = [{"id": f"q{k}", "messages": [{"role": "user", "content": f"question {k}"}]} for k in range(3)]
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = tmp_path / "empty.toml"
    config.write_text('out = "runs/empty"\n[source]\npath = "questions.jsonl"\n[baseline]\nmodel = "simulated:a"\n'
                      '[candidate]\nmodel = "simulated:b"\n')  # fmt: skip
    assert main(["run", str(config), *ci]) == ExitCode.INCOMPLETE == 5
    assert de.open_result(tmp_path / "runs" / "empty").status == "failed"
    assert summary.read_text().startswith("### delta-eval: 🛑 no decision (exit 5)\n\nthe run failed: 3 conversations")
    root = ET.parse(junit).getroot()
    check_junit_schema(root)
    failure = cases_of(root, "run")["run finished"].find("failure")
    assert failure is not None
    assert "none has an assistant turn to replay" in (failure.get("message") or "")

    # Every pair ends in an error (the candidate's provider always fails): completed, but nothing to decide on.
    broken = write_config(tmp_path, "broken", candidate="server_error_rate = 1.0", n=4)
    broken.write_text(broken.read_text() + "\n[retry]\nmax_attempts = 1\n")
    capsys.readouterr()
    assert main(["run", str(broken), *ci]) == 5
    result = de.open_result(tmp_path / "runs" / "broken")
    assert result.status == "completed"
    assert result.unfinished() == "every one of the 4 pairs ended in an error (the errors table says why)"
    assert result.exit_code() == ExitCode.INCOMPLETE
    assert "every one of the 4 pairs ended in an error" in summary.read_text()

    # Interrupted (Ctrl-C, SIGTERM) once the run has begun: the finished pairs are saved, but there is no decision.
    async def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("delta_eval.runner.run_stages", interrupt)
    stopped = write_config(tmp_path, "stopped", n=4)
    assert main(["run", str(stopped), *ci]) == 5
    assert de.open_result(tmp_path / "runs" / "stopped").status == "interrupted"
    assert summary.read_text().startswith("### delta-eval: 🛑 no decision (exit 5)\n\nthe run was interrupted")
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    # A configuration error: nothing ran, the code every command gives an error; the summary still says why.
    bad = tmp_path / "bad.toml"
    bad.write_text('out = "runs/bad"\n[baseline]\nmodel = "nosuch:model"\n[candidate]\nmodel = "simulated:b"\n')
    assert main(["run", str(bad), *ci]) == ExitCode.ERROR == 1
    err = capsys.readouterr().err
    said = md(err.split("error: ", 1)[1].strip())
    assert summary.read_text() == f"### delta-eval: 🛑 no decision (exit 1)\n\n{said}\n"
    assert not (tmp_path / "runs" / "bad").exists()
    with pytest.raises(SystemExit) as usage:
        main(["run", str(bad), "--fail-on", "sometimes"])
    assert usage.value.code == ExitCode.USAGE == 2


def test_junit_escapes_what_a_stratum_or_a_reason_may_hold() -> None:
    strata = ['tier=<gold> & "vip"', "lang=pt\x01br"]
    rows = [{"outcome": o, "conversation_id": f"c{i}", "stratum": strata[i % 2]}
            for i in range(40) for o in ("equivalent", "baseline")]  # fmt: skip
    d = decide(rows, rule=DecisionRule(gates=()))
    text = junit_xml(d, code=d.exit_code, unfinished=None, run="runs/<x>")
    root = ET.fromstring(text)
    check_junit_schema(root)
    assert sorted(cases_of(root, "strata")) == ["lang=pt\ufffdbr", 'tier=<gold> & "vip"']
    no_run = ET.fromstring(junit_xml(None, code=ExitCode.ERROR, unfinished="bad <config> & \x07key"))
    failure = cases_of(no_run, "run")["run finished"].find("failure")
    assert failure is not None
    assert failure.get("message") == "bad <config> & \ufffdkey"


def action_step(action: dict[str, Any], step_id: str) -> dict[str, Any]:
    [step] = [s for s in action["runs"]["steps"] if s.get("id") == step_id]
    return step


def resolve(expression: str, inputs: dict[str, str]) -> str:
    """An action's ``${{ inputs.name }}`` expressions replaced as the runner does; any other expression fails."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        assert name.startswith("inputs."), name
        return inputs[name.removeprefix("inputs.")]

    return re.sub(r"\$\{\{(.+?)\}\}", value, expression)


def test_the_github_action_runs_its_gate_command_as_the_action_does(tmp_path: Path) -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    declared = action["inputs"]
    assert {"config", "fail-on", "python-version", "extra-pip", "working-directory"} <= set(declared)
    assert declared["fail-on"]["default"] == "rejected"
    steps = action["runs"]["steps"]
    assert steps[0]["uses"].startswith("actions/setup-python@")
    assert steps[0]["with"]["python-version"] == "${{ inputs.python-version }}"
    assert '"$GITHUB_ACTION_PATH' in steps[1]["run"]  # the project from the action's own checkout
    assert all("${{" not in step.get("run", "") for step in steps)  # inputs reach the shell only as env

    work = tmp_path / "repo"
    work.mkdir()
    write_config(work, "gate", candidate="skip_tool_rate = 1.0")
    inputs = {name: str(spec.get("default", "")) for name, spec in declared.items()}
    inputs.update({"config": "gate.toml", "working-directory": "repo"})
    step = action_step(action, "gate")
    step_summary = tmp_path / "step_summary.md"
    env = {
        **os.environ,
        # what the runner sets; the action's install step put delta-eval on the PATH, here the test's environment
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_STEP_SUMMARY": str(step_summary),
        **{k: resolve(v, inputs) for k, v in step.get("env", {}).items()},
    }
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    cwd = tmp_path / resolve(step["working-directory"], inputs)
    # The runner's `shell: bash`: bash --noprofile --norc -eo pipefail {0}
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 3, done.stderr
    text = step_summary.read_text()
    assert text.startswith("### delta-eval: ❌ REJECTED (exit 3, fails on rejected)\n")
    assert text.count("### delta-eval") == 1  # --summary is the step summary itself: written once
    root = ET.parse(work / inputs["junit"]).getroot()
    check_junit_schema(root)
    assert "decision REJECTED" in cases_of(root, "run")


def test_the_readme_ci_section_uses_the_action_and_gives_the_exit_codes() -> None:
    section = (ROOT / "README.md").read_text().split("## Gate a merge in CI", 1)[1].split("\n## ", 1)[0]
    [workflow] = re.findall(r"```yaml\n(.+?)\n```", section, flags=re.S)
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = yaml.safe_load(workflow)["jobs"]["gate"]["steps"]
    [gate] = [s for s in steps if "delta_eval@" in s.get("uses", "")]
    given = set(gate["with"])
    assert given <= set(action["inputs"])
    assert {n for n, spec in action["inputs"].items() if spec.get("required")} <= given
    assert gate["with"]["fail-on"] in ("rejected", "partial", "never")
    # The exit-code table: one row per code, as ExitCode has them.
    rows = re.findall(r"^\| (\d) \| `(\w+)` \|", section, flags=re.M)
    assert [(int(c), n) for c, n in rows] == [(int(e), e.name) for e in ExitCode]
    [bash] = re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)
    for line in bash.splitlines():
        command = line.split("  #", 1)[0].split()
        assert command[:2] in (["delta-eval", "run"], ["delta-eval", "report"]), line
        options = [w for w in command if w.startswith("--")]
        parsed = de.cli._parser().parse_args(
            [w if not w.endswith(".toml") else "eval.toml" for w in command[1:]]
        )  # every option exists, with a valid value
        assert all(hasattr(parsed, o[2:].replace("-", "_")) for o in options)


def test_no_known_secret_reaches_the_summary_or_the_junit_file(tmp_path: Path) -> None:
    from delta_eval.analysis.ci import gate_error
    from delta_eval.redact import register_secrets

    secret = "sk-ci-mode-0123456789abcdefghij"
    register_secrets([secret])  # as an adapter does with the key it reads
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    gate_error(f"the provider said: bad key {secret}", ExitCode.ERROR, summary=summary, junit=junit)
    for path in (summary, junit):
        text = path.read_text()
        assert "bad key" in text
        assert secret not in text
