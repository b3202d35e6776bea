from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_and_the_readme_gives_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", section)
    assert len(commands) == 2
    demo, tests = commands
    assert demo.startswith("python3 -m venv")
    assert demo.endswith("delta-eval demo")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_provider_example_of_the_readme_builds_its_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    import anyio

    import delta_eval as de
    from delta_eval.adapters.registry import create_adapter

    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "VLLM_API_KEY",
                 "GOOGLE_VERTEX_ACCESS_TOKEN", "VERTEX_API_KEY"):  # fmt: skip
        monkeypatch.setenv(name, "test-key")
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use real models", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)
    assert len(blocks) == 3
    overrides = {m: de.ModelOverride.model_validate(o) for m, o in tomllib.loads(blocks.pop())["models"].items()}
    assert overrides["openai:gpt-6-preview"].efforts == ("low", "medium", "high")
    # each table on its own: the second block lists alternatives for one [candidate]
    tables = [t for block in blocks for t in re.split(r"\n(?=\[)", block)]
    variants = []
    for table in tables:
        parsed = tomllib.loads("\n".join(line for line in table.splitlines() if not line.startswith("# or:")))
        variants += [de.Variant.model_validate(v) for v in parsed.values()]
    assert {v.model.split(":")[0] for v in variants} == {
        "openai", "gemini", "openai-responses", "anthropic", "azure", "vertex", "anthropic-vertex", "bedrock"
    }  # fmt: skip
    for variant in variants:
        adapter = create_adapter(variant.model, variant.provider_options)
        anyio.run(adapter.aclose)


def test_every_judge_example_of_the_readme_builds_its_judges(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import tomllib

    import anyio

    import delta_eval as de
    from delta_eval.adapters.pool import ModelPool
    from delta_eval.judges.config import build_cascade
    from delta_eval.judges.context import JudgeContext

    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "VLLM_API_KEY"):
        monkeypatch.setenv(name, "test-key")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rubric.md").write_text("Refund only with a reason.\n\n## Dimensions\n- refunds: policy kept\n")
    section = (ROOT / "README.md").read_text().split("## Judges", 1)[1].split("\n## ", 1)[0]

    # The Python example, with de.run standing in for a real run.
    [python] = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)
    ran: dict[str, object] = {}
    monkeypatch.setattr(de, "run", lambda config, **options: ran.update(options))
    exec(python, {"de": de, "config": None})
    judges = ran["judges"]
    assert isinstance(judges, de.Judges)
    assert judges.models() == {"equivalence": ["openai:gpt-5.4-nano"], "judge": ["anthropic:claude-sonnet-4-6"]}

    blocks = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)
    assert len(blocks) == 3
    seen: set[str] = set()
    for block in [*blocks, None]:
        judges = de.Judges.model_validate(tomllib.loads(block)["judges"]) if block else judges
        pool = ModelPool()
        cascade = build_cascade(judges, JudgeContext(pool=pool))  # every adapter built, every rubric read
        seen.update(m.split(":")[0] for models in judges.models().values() for m in models)
        rubrics = {getattr(j, "rubric", None) and j.rubric.dimensions for j in cascade._judges}
        assert rubrics <= {("refunds",), ("task_success", "policy", "accuracy", "communication"), None}
        anyio.run(pool.aclose)
    assert seen == {"openai", "openai-responses", "anthropic", "gemini", "azure"}


def test_the_decision_examples_of_the_readme_run(tmp_path: Path) -> None:
    import tomllib

    import delta_eval as de
    from delta_eval.demo import demo_config, demo_conversations

    section = (ROOT / "README.md").read_text().split("## The decision", 1)[1].split("\n## ", 1)[0]
    [python] = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)
    [toml] = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)
    result = de.run(demo_config(tmp_path / "run", n=8, latency_ms=0.0), conversations=demo_conversations())
    scope = {"de": de, "result": result, "con": result.connect()}
    exec(python, scope)
    assert scope["d"].outcome in ("APPROVED", "PARTIAL", "REJECTED")
    rule = de.DecisionRule.model_validate(tomllib.loads(toml)["decision"])
    assert [g.metric for g in rule.gates] == ["critical_rate", "cost_ratio", "check:no_refund_promise"]
    assert [c.name for c in rule.checks] == ["no_refund_promise", "no_transfer"]
    # The rule from the README decides a run, its check gate included.
    d = result.decision(rule)
    assert [g.gate.metric for g in d.gates][-1] == "check:no_refund_promise"
    assert set(d.checks["candidate"]) == {"no_refund_promise", "no_transfer"}


def test_the_nested_export_example_of_the_readme_reads_a_tau2_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tau_raw: list
) -> None:
    import json

    import delta_eval as de
    from tests.ingest.test_nested_exports import tau2_document

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.+?)\n```", readme, flags=re.S) if "records=" in b)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(tau2_document(tau_raw[:5])))
    scope: dict[str, object] = {"de": de}
    exec(block, scope)
    good, bad = scope["convs"].load()  # type: ignore[attr-defined]
    assert bad == []
    assert len(good) == 5
    assert good[0].metadata["domain"] == "airline"


_NATIVE = {"claude": "anthropic", "gemini": "gemini", "responses": "openai-responses", "logs": "anthropic"}
_TRACES = {"otel": ("otel-traces", "otel"), "phoenix": ("spans", "openinference"),
           "langfuse": ("observations", "langfuse"), "langsmith": ("runs", "langsmith")}  # fmt: skip


def _write_format_files(folder: Path) -> list[Any]:
    """The files the README's one-line reads name (chat.jsonl, claude.jsonl, otel-traces.jsonl, ...), holding
    three demo conversations each in that format; the conversations."""
    import json

    import delta_eval as de
    from delta_eval.testing.exports import trace_records
    from tests.ingest.test_native_formats import records_of

    convs, _ = de.demo.demo_conversations().load()
    convs = convs[:3]
    files: dict[str, list[dict[str, object]]] = {"chat": [{"id": c.id, "messages": c.model_dump()["messages"]}
                                                          for c in convs]}  # fmt: skip
    files |= {name: records_of(fmt, convs) for name, fmt in _NATIVE.items()}
    files |= {file: list(trace_records(fmt, convs)) for file, fmt in _TRACES.values()}
    for name, records in files.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    return convs


def test_the_format_examples_of_the_readme_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import delta_eval as de

    convs = _write_format_files(tmp_path)
    readme = (ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.+?)\n```", readme, flags=re.S) if "message_format=" in b]
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"de": de}
    for block in blocks:
        exec(block, scope)
    native, traces = _NATIVE, _TRACES
    for name in ["chat", *native, *traces, "traces"]:
        good, bad = scope[name].load()  # type: ignore[attr-defined]
        assert bad == [], name
        assert [len(c.messages) for c in good] == [
            1 + max(i for i, m in enumerate(c.messages) if m.role == "assistant")
            if name in traces or name == "traces"
            else len(c.messages)
            for c in convs
        ], name  # a trace ends with the last model call; a message log may end with the user's last word
    assert scope["traces"].load()[0][0].metadata == {"model": "gpt-4o", "name": "support-agent"}  # type: ignore[attr-defined]


def test_the_analyze_json_documented_in_the_readme_is_what_it_prints(tmp_path: Path) -> None:
    import delta_eval as de
    from delta_eval.demo import demo_config, demo_conversations

    readme = (ROOT / "README.md").read_text()
    doc = " ".join(readme.split("`delta-eval analyze RUN_DIR", 1)[1].split("- `delta-eval report", 1)[0].split())
    result = de.run(demo_config(tmp_path / "run", n=20, latency_ms=0.0), conversations=demo_conversations())
    a = de.analyze(result.path)
    summary, themes = a.summary(), a.themes()
    documented = re.findall(r"[a-z_0-9]+", doc.split("`summary` has", 1)[1].split("; each `changes`", 1)[0])
    assert set(summary) <= set(documented)
    assert set(summary["win_rate"]["all"]) <= set(documented)
    assert set(summary["sides"]["candidate"]) <= set(documented)
    assert set(summary["decision"]) <= set(documented)
    theme_keys = re.findall(r"[a-z_]+", doc.split("each theme", 1)[1])
    assert themes
    assert set(themes[0]) <= set(theme_keys)
    assert {row["kind"] for row in a.changes()} == {"behaviour", "difference", "length"}


def _fake_for(model: str) -> tuple[Any, Any]:
    """The fake server of ``model``'s provider, and how to point the README's options at it."""
    from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer

    prefix = model.split(":")[0]
    token = {"access_token": "ya29.readme-test-token"}
    aws = {"aws_access_key": "AKIAREADMETESTKEY000", "aws_secret_key": "readme-test-secret"}
    if prefix in ("openai", "openai-responses"):
        return FakeOpenAIServer, lambda s, o: {**o, "base_url": s.base_url, "api_key": "k"}
    if prefix in ("azure", "azure-responses"):
        return FakeOpenAIServer, lambda s, o: {**o, "endpoint": s.url, "api_key": "k"}
    if prefix == "anthropic":
        return FakeAnthropicServer, lambda s, o: {**o, "base_url": s.url, "api_key": "k"}
    if prefix == "anthropic-vertex":
        return FakeAnthropicServer, lambda s, o: {**o, "base_url": s.url + "/v1", **token}
    if prefix in ("bedrock", "anthropic-bedrock"):
        return FakeAnthropicServer, lambda s, o: {**o, "base_url": s.url, **aws}
    if prefix == "gemini":
        return FakeGeminiServer, lambda s, o: {**o, "base_url": s.url, "api_key": "k"}
    assert prefix == "vertex", model
    return FakeGeminiServer, lambda s, o: {**{k: v for k, v in o.items() if k != "api_key_env"}, "base_url": s.url,
                                           **token}  # fmt: skip


def test_every_readme_example_is_accepted_by_a_fake_that_refuses_what_its_model_refuses() -> None:
    # The fakes' per-model rules are written from the providers' documentation, apart from the adapters: each
    # example's request, built by the real SDK, must be one the real model would take.
    import tomllib

    import anyio

    import delta_eval as de
    from delta_eval.adapters.registry import create_adapter
    from delta_eval.calls import ModelRequest
    from delta_eval.schema import Message

    readme = (ROOT / "README.md").read_text()
    examples: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    section = readme.split("## Use real models", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)[:2]
    for table in (t for block in blocks for t in re.split(r"\n(?=\[)", block)):
        for v in tomllib.loads(table).values():
            examples.append((v["model"], v.get("params", {}), v.get("provider_options", {})))
    judges = readme.split("## Judges", 1)[1].split("\n## ", 1)[0]
    for block in re.findall(r"```toml\n(.+?)\n```", judges, flags=re.S):
        tables = tomllib.loads(block)["judges"]
        for judge in [tables.get("equivalence"), *([tables["judge"]] if isinstance(tables.get("judge"), dict)
                                                   else tables.get("judge", []))]:  # fmt: skip
            if judge:
                examples.append((judge["model"], judge.get("params", {}), judge.get("provider_options", {})))
    assert len(examples) >= 15
    prefixes = {m.split(":")[0] for m, _, _ in examples}
    assert prefixes >= {"openai", "openai-responses", "azure", "anthropic", "gemini", "vertex", "anthropic-vertex",
                        "bedrock"}  # fmt: skip
    refused = []
    for model, params, options in examples:
        server_class, point = _fake_for(model)
        with server_class(respond=lambda r: Message(role="assistant", content="ok")) as server:

            async def send(model: str = model, params: dict[str, Any] = params, options: dict[str, Any] = options,
                           server: Any = server, point: Any = point) -> None:  # fmt: skip
                adapter = create_adapter(model, point(server, options))
                try:
                    request = ModelRequest(model=model, messages=(Message(role="user", content="hi"),),
                                           params=de.GenerateParams(**params))  # fmt: skip
                    await adapter.generate(request)
                finally:
                    await adapter.aclose()

            try:
                anyio.run(send)
            except de.DeltaEvalError as exc:
                refused.append(f"{model} {params}: {exc}")
    assert refused == []


@pytest.mark.slow
def test_every_python_example_of_the_readme_runs_in_order_from_a_fresh_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tau_raw: list, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's session: every Python block of the README, top to bottom in one namespace, in an empty folder
    holding only the files the examples say are the user's own (their exports). Nothing is defined for them: each
    block stands on what it and the blocks before it define. The judges' block calls real providers and is run by
    test_every_judge_example_of_the_readme_builds_its_judges instead."""
    import json

    from tests.ingest.test_nested_exports import tau2_document

    readme = (ROOT / "README.md").read_text()
    judges = readme.split("## Judges", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```python\n(.+?)\n```", readme, flags=re.S) if b not in judges]
    assert len(blocks) >= 10
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DELTA_EVAL_RUN", raising=False)
    _write_format_files(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(tau2_document(tau_raw[:3])))
    (tmp_path / "export.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "I am Ana Lima"}], "user": {"name": "Ana Lima"}}) + "\n"
    )
    scope: dict[str, Any] = {"__name__": "readme"}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    assert (tmp_path / "runs" / "demo" / "manifest.json").exists()  # the run folder the later examples open
    assert scope["a"].summary()["pairs"] == scope["result"].counts.pairs > 0
    assert scope["actual"].manifest.estimate is not None  # the estimated run keeps its estimate
    assert scope["d"].outcome in ("APPROVED", "PARTIAL", "REJECTED")
    assert (tmp_path / "runs" / "demo-stream" / "manifest.json").exists()
    compared = scope["c"].summary()  # the runs side by side: the stream's and the estimate's share their candidate
    assert [r["name"] for r in compared["runs"]] == ["demo", "demo-stream", "demo-estimate"]
    assert [g["runs"] for g in compared["consistency"]] == [["demo-stream", "demo-estimate"]]
    printed = capsys.readouterr().out
    assert re.search(r"^\S+#\d+ (deterministic|equivalence|judge) ", printed, flags=re.M)  # the stream's verdicts
