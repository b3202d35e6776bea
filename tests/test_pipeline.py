"""End to end: the real pipeline on the bundled tau-bench data, real Parquet files and a real DuckDB."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderError
from delta_eval.pipeline import FIRST_BATCH
from delta_eval.store.folder import RunFolder


def small_config(out: Path, n: int = 12, **changes: Any) -> de.RunConfig:
    cfg = demo_config(out, n=n, latency_ms=0.0)
    return cfg.model_copy(update=changes) if changes else cfg


def test_demo_run_numbers_rederive_with_sql(tmp_path: Path) -> None:
    result = de.run(small_config(tmp_path / "run"), conversations=demo_conversations())
    assert result.status == "completed"
    counts = result.counts
    assert (counts.read, counts.population, counts.sampled) == (200, 200, 12)
    assert counts.pairs == counts.pairs_planned > 0
    assert counts.conversations_replayed == 12
    con = de.open_run(result.path)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (counts.pairs,) * 2
    assert con.execute("SELECT count(*) FROM replays").fetchone() == (3 * counts.pairs,)
    assert con.execute("SELECT count(*) FROM conversations").fetchone() == (12,)
    by_stage = dict(con.execute("SELECT stage, count(*) FROM verdicts GROUP BY stage").fetchall())
    assert by_stage == counts.by_stage
    sql_rate = con.execute(
        "SELECT avg(CASE outcome WHEN 'candidate' THEN 1 WHEN 'baseline' THEN 0 ELSE 0.5 END) "
        "FROM verdicts WHERE outcome <> 'error'"
    ).fetchone()[0]
    assert result.win_rate(weighted=False).estimate == pytest.approx(sql_rate)
    # The sample is not self-weighting (at least one conversation per stratum): the default estimate is weighted.
    weighted_sql = con.execute(
        "SELECT sum(weight * CASE outcome WHEN 'candidate' THEN 1.0 WHEN 'baseline' THEN 0.0 ELSE 0.5 END) "
        "/ sum(weight) FROM verdicts WHERE outcome <> 'error'"
    ).fetchone()[0]
    assert result.win_rate().weighted
    assert result.win_rate().estimate == pytest.approx(weighted_sql)
    judged = con.execute(
        "SELECT avg(CASE outcome WHEN 'candidate' THEN 1 WHEN 'baseline' THEN 0 ELSE 0.5 END) FROM verdicts "
        "WHERE stage = 'judge'"
    ).fetchone()[0]
    assert result.win_rate(over="judged").estimate == pytest.approx(judged)
    # weights: sampled conversations stand for the population
    assert con.execute("SELECT sum(weight) FROM conversations").fetchone()[0] == pytest.approx(200)
    # the recorded answer sits beside the replays, and the candidate really differs from the baseline
    assert con.execute("SELECT count(*) FROM replays WHERE side = 'recorded'").fetchone() == (counts.pairs,)
    assert by_stage.get("judge", 0) > 0
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["config"]["baseline"]["model"] == "simulated:baseline"
    assert manifest["versions"]["python"]


def test_rerun_of_a_completed_run_pays_nothing_and_writes_nothing(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "run", n=6)
    first = de.run(cfg, conversations=demo_conversations())
    second = de.run(cfg, conversations=demo_conversations())
    assert second.counts.pairs == first.counts.pairs
    session = second.manifest.sessions[-1]
    assert session.resumed_pairs == first.counts.pairs
    assert all(stats.made == 0 for stats in session.calls.values())


def test_interrupted_run_resumes_without_duplicates_or_repaid_calls(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "run", n=20, flush_every=5)
    seen: list[str] = []

    async def stop_early() -> None:
        async with de.stream(cfg, conversations=demo_conversations()) as verdicts:
            async for v in verdicts:
                seen.append(v.pair_id)
                if len(seen) == 30:
                    break

    anyio.run(stop_early)
    interrupted = de.open_result(cfg.out)
    assert interrupted.status == "interrupted"
    kept = interrupted.counts.pairs
    assert 30 <= kept < interrupted.counts.pairs_planned
    answered_before = interrupted.manifest.sessions[0].answered

    resumed = de.run(cfg, conversations=demo_conversations())
    assert resumed.status == "completed"
    con = resumed.connect()
    total, distinct = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
    assert total == distinct == resumed.counts.pairs_planned
    assert con.execute("SELECT count(*) FROM conversations").fetchone() == (20,)
    session = resumed.manifest.sessions[-1]
    assert session.resumed_pairs == kept

    fresh = de.run(small_config(tmp_path / "fresh", n=20), conversations=demo_conversations())
    answered_fresh = fresh.manifest.sessions[0].answered
    answered_after = session.answered
    # Nothing answered before the stop is asked again (simulated calls with no latency are never cut mid-flight).
    assert answered_before + answered_after == answered_fresh
    assert resumed.win_rate() == fresh.win_rate()


def test_broken_jsonl_export_replays_every_good_record(tmp_path: Path, tau_raw: list[dict[str, Any]]) -> None:
    lines = [json.dumps({"id": f"conv-{i}", "messages": r["traj"], "tier": i % 2}) for i, r in enumerate(tau_raw[:6])]
    lines.insert(2, '{"id": "half-written", "messages": [{"role": "user"')
    bad_role = {"id": "bad-role", "messages": [{"role": "customer", "content": "hi"}]}
    orphan = {
        "id": "orphan",
        "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "r"}],
    }
    lines += [json.dumps(bad_role), json.dumps(orphan)]
    path = tmp_path / "export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    source = de.read_conversations(path, metadata=["tier"], tools=de.demo.DEMO_TOOLS)
    result = de.run(
        conversations=source,
        out=tmp_path / "run",
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b", provider_options={"reword_rate": 0.5}),
    )
    con = result.connect()
    replayed = {row[0] for row in con.execute("SELECT DISTINCT conversation_id FROM verdicts").fetchall()}
    assert replayed == {f"conv-{i}" for i in range(6)}
    errors = con.execute("SELECT stage, source, record, field, message FROM errors ORDER BY record").fetchall()
    assert [(e[0], e[2].split(" (")[0], e[3]) for e in errors] == [
        ("ingest", "line 3", ""),
        ("ingest", "line 8", "messages[0].role"),
        ("ingest", "line 9", "messages[1].tool_call_id"),
    ]
    assert all(e[1] == str(path) for e in errors)
    assert "unknown role 'customer'" in errors[1][4]
    assert result.counts.read_errors == 3


def test_stream_yields_each_verdict_once(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "run", n=5)

    async def collect() -> tuple[list[de.Verdict], de.RunResult | None]:
        out = []
        stream = de.stream(cfg, conversations=demo_conversations())
        async for v in stream:
            out.append(v)
        return out, stream.result

    verdicts, result = anyio.run(collect)
    assert result is not None
    assert result.status == "completed"
    assert len(verdicts) == len({v.pair_id for v in verdicts}) == result.counts.pairs


def test_a_different_config_cannot_reuse_a_folder(tmp_path: Path) -> None:
    de.run(small_config(tmp_path / "run", n=3), conversations=demo_conversations())
    with pytest.raises(RunFolderError, match="different configuration"):
        de.run(small_config(tmp_path / "run", n=4), conversations=demo_conversations())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not a delta_eval run folder"):
        de.run(small_config(tmp_path / "other", n=3), conversations=demo_conversations())


def test_run_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    # As in Jupyter, where an event loop is already running in the main thread.
    async def notebook_cell() -> de.RunResult:
        return de.run(small_config(tmp_path / "run", n=3), conversations=demo_conversations())

    assert anyio.run(notebook_cell).status == "completed"


def test_provider_failures_become_error_verdicts_and_rows(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "run", n=4).model_copy(
        update={
            # no name: the run names it after its side even though model_copy skipped validation
            "candidate": de.Variant(model="simulated:flaky", provider_options={"server_error_rate": 1.0}),
            "retry": de.RetryPolicy(max_attempts=2, initial_wait=0.0),
        }
    )
    result = de.run(cfg, conversations=demo_conversations())
    con = result.connect()
    assert con.execute("SELECT DISTINCT stage, outcome FROM verdicts").fetchall() == [("error", "error")]
    rows = con.execute("SELECT stage, error_type, attempts FROM errors").fetchall()
    assert len(rows) == result.counts.pairs
    assert set(rows) == {("replay", "TransientError", 2)}
    assert con.execute("SELECT DISTINCT variant FROM replays WHERE side = 'candidate'").fetchall() == [("candidate",)]
    # Every candidate replay failed: each pair is a loss of the side that failed, unless errors are left out.
    assert (result.win_rate().estimate, result.win_rate().errors_counted) == (0.0, result.counts.pairs)
    assert result.win_rate(errors="exclude").estimate is None
    assert result.win_rate().errors == result.counts.pairs


def test_inline_credentials_never_reach_the_run_folder(tmp_path: Path) -> None:
    from delta_eval.adapters.base import ModelAdapter
    from delta_eval.adapters.registry import register_adapter
    from delta_eval.calls import ModelRequest, ModelResponse
    from delta_eval.schema import Message

    class KeyedEcho(ModelAdapter):
        def __init__(self, model: str, api_key: str) -> None:
            super().__init__(model)
            self._api_key = api_key

        async def generate(self, request: ModelRequest) -> ModelResponse:
            assert self._api_key == "sk-very-secret-123"
            return ModelResponse(message=Message(role="assistant", content="ok"))

    register_adapter("keyed-test", lambda model, options, context: KeyedEcho(model, options["api_key"]))
    secret = "sk-very-secret-123"
    cfg = small_config(tmp_path / "run", n=2).model_copy(
        update={"candidate": de.Variant(model="keyed-test:m", name="candidate", provider_options={"api_key": secret})}
    )
    result = de.run(cfg, conversations=demo_conversations())
    assert result.status == "completed"
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert result.manifest.config["candidate"]["provider_options"] == {"api_key": "***"}


def test_a_stalled_judge_holds_back_replays(tmp_path: Path) -> None:
    """Backpressure: with the judge stuck, only the pairs that fit in the bounded streams get replayed."""
    from delta_eval.judges.base import PairwiseResult

    release = anyio.Event()
    entered = anyio.Event()

    class StuckJudge:
        name = "stuck"

        async def compare(self, pair: de.PairView) -> PairwiseResult:
            entered.set()
            await release.wait()
            return PairwiseResult(winner="tie", confidence=0.5)

    cfg = small_config(tmp_path / "run", n=30).model_copy(
        update={
            "concurrency": 2,
            "judge_concurrency": 1,
            "judges": de.Judges(equivalence=None, judge=StuckJudge()),
            "candidate": de.Variant(model="simulated:c", provider_options={"reword_rate": 1.0, "skip_tool_rate": 1.0}),
        }
    )
    progress = de.RunProgress()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: de.arun(cfg, conversations=demo_conversations(), progress=progress))
            with anyio.fail_after(60):
                await entered.wait()
            await anyio.sleep(0.5)  # let everything upstream run as far as it can
            # The one judge worker holds a pair; behind it: 1 in its inbox, and the 4 side workers (2 pairs' worth)
            # each holding at most one finished pair it cannot hand on. Only pairs stage 1 settled before the judge
            # stuck got past; nothing else is replayed, however many pairs are planned.
            assert progress.pairs_total > 100
            assert progress.replayed - progress.deterministic <= 1 + 1 + 4
            assert progress.written == 0
            release.set()

    anyio.run(main)
    assert de.open_result(cfg.out).status == "completed"


def test_a_model_that_cannot_work_stops_the_run_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_provider_keys: None
) -> None:
    from delta_eval.adapters import registry
    from delta_eval.exceptions import ConfigError

    real = registry.installed
    monkeypatch.setattr(registry, "installed", lambda module: module != "google.genai" and real(module))
    base = de.Variant(model="simulated:a")
    for candidate, said in (
        (de.Variant(model="gemini:gemini-2.5-flash"), "pip install 'delta-eval[gemini]'"),
        (de.Variant(model="anthropic:claude-sonnet-4-5"), "set ANTHROPIC_API_KEY"),
        (de.Variant(model="openai:gpt-4.1", provider_options={"base_urll": "x"}), "base_urll"),
        (de.Variant(model="nosuch:model"), "unknown model prefix 'nosuch'"),
    ):
        out = tmp_path / candidate.model.replace(":", "-")
        with pytest.raises(ConfigError, match=re.escape(said)):
            de.run(conversations=demo_conversations(), baseline=base, candidate=candidate, out=out)
        assert not out.exists()


def ticket_runs(n: int) -> list[de.Conversation]:
    """Autonomous agents: each handed a ticket in its system prompt, with no user message at all."""
    from delta_eval.schema import Message, ToolCall

    tool = de.ToolSpec(name="get_order", description="Look up an order.", parameters={"type": "object"})
    return [
        de.Conversation(
            id=f"ticket-{k}",
            messages=(
                Message(role="system", content=f"You resolve support tickets. Ticket #{k}: refund order {k}."),
                Message(
                    role="assistant", tool_calls=(ToolCall(id=f"c{k}", name="get_order", arguments=f'{{"id": {k}}}'),)
                ),
                Message(role="tool", tool_call_id=f"c{k}", name="get_order", content='{"status": "delivered"}'),
                Message(role="assistant", content=f"Refunded order {k}; ticket #{k} closed."),
            ),
            tools=(tool,),
            metadata={"queue": "billing" if k % 2 else "returns"},
        )
        for k in range(4)
    ]


def test_autonomous_runs_are_replayed_not_skipped_as_greetings(tmp_path: Path) -> None:
    result = de.run(
        conversations=ticket_runs(4),
        out=tmp_path / "run",
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b", provider_options={"reword_rate": 0.5}),
        sample=de.Stratified(by=["queue"]),
    )
    assert result.status == "completed"
    assert (result.counts.greetings_skipped, result.counts.errors) == (0, 0)
    assert result.counts.pairs == result.counts.pairs_planned == 4
    con = result.connect()
    assert con.execute("SELECT DISTINCT pair_id FROM verdicts ORDER BY 1").fetchall() == [
        (f"ticket-{k}#0",) for k in range(4)
    ]
    assert {d.stratum for d in result.decision().strata} == {"queue=billing", "queue=returns"}


def test_a_source_with_nothing_to_replay_fails_saying_why(tmp_path: Path) -> None:
    from delta_eval.exceptions import SourceError
    from delta_eval.schema import Message

    sides = {"baseline": de.Variant(model="simulated:a"), "candidate": de.Variant(model="simulated:b")}
    questions = [
        de.Conversation(id=f"q{k}", messages=(Message(role="user", content=f"question {k}"),)) for k in range(3)
    ]
    with pytest.raises(SourceError, match=r"3 conversations read from .*, none has an assistant turn to replay"):
        de.run(conversations=questions, out=tmp_path / "none", **sides)
    failed = de.open_result(tmp_path / "none")
    assert failed.status == "failed"
    assert failed.manifest.failure is not None
    assert "none has an assistant turn" in failed.manifest.failure

    greeted = [
        de.Conversation(
            id=f"g{k}",
            messages=(Message(role="assistant", content="Hi! How can I help?"), Message(role="user", content="hi")),
        )
        for k in range(2)
    ]
    said = r"all 2 assistant turns of the 2 conversations drawn from .* are greetings .* set replay_greetings"
    with pytest.raises(SourceError, match=said):
        de.run(conversations=greeted, out=tmp_path / "greetings", **sides)
    # told to, it replays them
    result = de.run(conversations=greeted, out=tmp_path / "replayed", replay_greetings=True, **sides)
    assert (result.status, result.counts.pairs) == ("completed", 2)


def test_a_sampled_stratum_with_no_pairs_is_named_with_why(tmp_path: Path) -> None:
    from delta_eval.analysis.report import render_report
    from delta_eval.schema import Message

    asked = [
        de.Conversation(id=f"q{k}", messages=(Message(role="user", content="anyone?"),), metadata={"queue": "chat"})
        for k in range(2)
    ]
    greeted = [
        de.Conversation(
            id=f"g{k}",
            messages=(Message(role="assistant", content="Hi! How can I help?"), Message(role="user", content="hi")),
            metadata={"queue": "phone"},
        )
        for k in range(3)
    ]
    result = de.run(
        conversations=[*ticket_runs(4), *asked, *greeted],
        out=tmp_path / "run",
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b"),
        sample=de.Stratified(by=["queue"]),
    )
    assert result.status == "completed"
    assert result.counts.pairs == 4
    empty = {
        "queue=chat": "2 conversations drawn, no assistant turns to replay",
        "queue=phone": "3 conversations drawn, all 3 turns are greetings, left out (replay_greetings replays them)",
    }
    assert result.counts.strata_without_pairs == empty
    assert json.loads((result.path / "manifest.json").read_text())["counts"]["strata_without_pairs"] == empty
    report = render_report(result)
    for stratum, why in empty.items():
        assert f"WARNING stratum {stratum}: no pairs ({why}); it is in no win rate and no decision" in report


def test_a_stratum_field_missing_from_most_conversations_is_in_the_notes_and_the_report(tmp_path: Path) -> None:
    from delta_eval.analysis.report import render_report
    from delta_eval.exceptions import SampleWarning

    runs = ticket_runs(4)
    # a field renamed part way through the export: three of four conversations lack 'queue'
    convs = [runs[0], *(c.model_copy(update={"metadata": {"queues": "billing"}}) for c in runs[1:])]
    with pytest.warns(SampleWarning, match="'queue' is missing from 3 of 4 conversations"):
        result = de.run(
            conversations=convs,
            out=tmp_path / "run",
            baseline=de.Variant(model="simulated:a"),
            candidate=de.Variant(model="simulated:b"),
            sample=de.Stratified(by=["queue"]),
        )
    note = (
        "stratum field 'queue' is missing from 3 of 4 conversations, which fall in its '(missing)' stratum; did you "
        "mean 'queues'?"
    )
    assert result.manifest.notes == [note]
    assert note in render_report(result)


def _wire_config(out: Path, models: Any, **candidate_changes: Any) -> de.RunConfig:
    cfg = demo_config(out, n=3, latency_ms=0.0, models=models)
    return cfg.model_copy(update={"candidate": cfg.candidate.model_copy(update=candidate_changes)})


def test_a_new_port_or_timeout_resumes_but_a_new_model_or_params_are_refused(tmp_path: Path) -> None:
    # `delta-eval demo --wire openai` starts its fake server on a random port: a rerun must resume, not refuse.
    from delta_eval.demo import wire_models

    out = tmp_path / "run"
    with wire_models("openai", latency_ms=0.0) as models:
        first = de.run(demo_config(out, n=3, latency_ms=0.0, models=models), conversations=demo_conversations())
    with wire_models("openai", latency_ms=0.0) as models:
        cfg = demo_config(out, n=3, latency_ms=0.0, models=models)
        port = cfg.candidate.provider_options["base_url"]
        assert port != first.manifest.config["candidate"]["provider_options"]["base_url"]
        options = {**cfg.candidate.provider_options, "timeout": 42.0, "connection_pools": 2, "api_key_env": "X_KEY"}
        again = de.run(_wire_config(out, models, provider_options=options), conversations=demo_conversations())
        assert again.status == "completed"
        assert again.manifest.sessions[-1].resumed_pairs == first.counts.pairs
        with pytest.raises(RunFolderError) as info:
            de.run(_wire_config(out, models, model="openai:another"), conversations=demo_conversations())
        assert "differs in: candidate.model" in str(info.value)
        assert "Compared: " in str(info.value)
        assert "base_url" in str(info.value)
        params = cfg.candidate.params.model_copy(update={"temperature": 0.9})
        with pytest.raises(RunFolderError, match=r"differs in: candidate\.params\.temperature"):
            de.run(_wire_config(out, models, params=params), conversations=demo_conversations())


def test_the_longest_recorded_turns_start_first_and_the_order_changes_no_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from delta_eval import pipeline
    from delta_eval.replay.points import replay_calls, replay_points

    conversations, _ = demo_conversations().load()
    pairs = [pipeline._Pair(p, "all", 1.0) for c in conversations[:20] for p in replay_points(c)]
    ordered = pipeline.longest_first(pairs, max_tool_rounds=5)
    calls = [replay_calls(pair.point.recorded, 5) for pair in ordered]
    assert calls == sorted(calls, reverse=True)
    assert calls[0] > calls[-1]  # the demo's turns differ in length: the order is not the source's
    for n in set(calls):  # turns of one length keep their source order
        same = [pair.point.pair_id for pair in ordered if replay_calls(pair.point.recorded, 5) == n]
        assert same == [p.point.pair_id for p in pairs if replay_calls(p.point.recorded, 5) == n]

    def verdicts(out: Path) -> list[tuple[Any, ...]]:
        result = de.run(small_config(out, n=20), conversations=demo_conversations())
        sql = "SELECT pair_id, outcome, stage, preference, reasoning FROM verdicts ORDER BY pair_id"
        return list(de.open_run(result.path).execute(sql).fetchall())

    longest = verdicts(tmp_path / "longest")
    monkeypatch.setattr(pipeline, "_LOOKAHEAD", 0)  # the source's order
    assert verdicts(tmp_path / "source") == longest
    assert len(longest) > 20


class _CountedSource(de.ConversationSource):
    """A source that counts how often it is read."""

    readings = 0

    def __iter__(self) -> Any:
        self.readings += 1
        return super().__iter__()


def test_a_run_reads_a_small_source_once_and_a_large_one_again_with_the_same_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sampling keeps the conversations it read where the source's pairs fit the loader's window: the estimate and
    the loader take them from memory (they read the source twice more before). Over the budget, they read it
    again, and the run's verdicts and estimate are the same."""
    from delta_eval import pipeline

    def run(out: Path) -> tuple[int, list[tuple[Any, ...]], Any]:
        source = _CountedSource.from_conversations(demo_conversations().load()[0])
        # 64 pairs at once: the loader's window (32 x 64 pairs) holds the source's 1,341
        result = de.run(small_config(out, n=20, concurrency=64), conversations=source, progress=False)
        assert result.status == "completed"
        sql = "SELECT pair_id, outcome, stage, preference, reasoning FROM verdicts ORDER BY pair_id"
        return source.readings, de.open_run(result.path).execute(sql).fetchall(), result.manifest.estimate

    kept = run(tmp_path / "kept")
    assert kept[0] == 1
    monkeypatch.setattr(pipeline, "_LOOKAHEAD", 0)  # a budget of no pairs: nothing kept
    again = run(tmp_path / "again")
    assert again[0] == 3  # sampling, the estimate, the loader
    assert again[1:] == kept[1:]
    assert kept[2] is not None
    assert len(kept[1]) > 20


def test_the_estimate_made_beside_the_replays_is_in_the_manifest_or_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from delta_eval import runner

    result = de.run(small_config(tmp_path / "made"), conversations=demo_conversations(), progress=False)
    assert result.manifest.estimate == de.estimate(small_config(tmp_path / "x"), demo_conversations()).to_dict()

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ValueError("the render function failed")

    monkeypatch.setattr(runner, "estimate_sample", fail)
    result = de.run(small_config(tmp_path / "failed"), conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert result.manifest.estimate is None
    assert "no cost estimate: ValueError: the render function failed" in result.manifest.notes

    def leave(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the render function called sys.exit")

    # Not an Exception: the thread would end without a word.
    monkeypatch.setattr(runner, "estimate_sample", leave)
    result = de.run(small_config(tmp_path / "left"), conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert "no cost estimate: SystemExit: the render function called sys.exit" in result.manifest.notes


def test_the_writer_commits_once_when_the_last_pairs_are_in_flight(tmp_path: Path) -> None:
    """The run's end waited for the write of every pair since the last batch: the writer commits what it holds when
    the pairs left are a quarter of those run at once, so the end writes only those."""
    from delta_eval.store.folder import RunFolder

    cfg = small_config(tmp_path / "run", n=20, concurrency=8, flush_every=1000)
    result = de.run(cfg, conversations=demo_conversations(), progress=False)
    pairs = [c["rows"].get("verdicts", 0) for c in RunFolder(result.path).commits()]
    assert pairs[0] == 0  # the population's batch
    assert 0 < pairs[-1] <= 2  # the end wrote the last pairs in flight (a slow machine may add a 5 s commit)
    assert sum(pairs) == result.counts.pairs > 20

    cfg = small_config(tmp_path / "few", n=1, concurrency=64, flush_every=1000)
    few = de.run(cfg, conversations=demo_conversations(), progress=False)
    assert [c["rows"].get("verdicts", 0) for c in RunFolder(few.path).commits()] == [0, few.counts.pairs]


def test_a_turn_that_ended_on_a_tool_round_starts_before_a_one_call_turn() -> None:
    """Its replay asks the model again after the tool results (two calls), though the recording has one call: the
    run's tail was such turns, ordered among the one-call turns and started last."""
    from delta_eval import pipeline
    from delta_eval.replay.points import replay_points
    from delta_eval.schema import Conversation, Message, ToolCall

    call = ToolCall(id="c1", name="look_up", arguments="{}")
    ended_on_a_round = Conversation(id="tool", messages=(
        Message(role="user", content="find it"), Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_call_id="c1", content="found"), Message(role="user", content="thanks")))  # fmt: skip
    plain = Conversation(id="plain", messages=(Message(role="user", content="hi"),
                                               Message(role="assistant", content="hello")))  # fmt: skip
    pairs = [pipeline._Pair(p, "all", 1.0) for c in (plain, ended_on_a_round) for p in replay_points(c)]
    assert [pair.point.conversation_id for pair in pipeline.longest_first(pairs, 5)] == ["tool", "plain"]


def test_the_writer_takes_the_pairs_waiting_for_it_without_a_pass_of_the_event_loop_each(tmp_path: Path) -> None:
    """A stage that took one item per pass of the event loop (``receive()`` yields first) fell behind the replays
    under a loaded loop: the pairs waiting for the writer are taken in runs, the loop passing now and then."""
    import time

    from delta_eval import pipeline
    from delta_eval.replay.points import replay_points

    conversations, _ = demo_conversations().load()
    pairs = [pipeline._Pair(p, "all", 1.0) for c in conversations[:30] for p in replay_points(c)]
    assert len(pairs) >= 64

    class Folder:  # the writer's side of a run folder: pairs with no decisions add nothing
        def add(self, dataset: str, rows: Any) -> None:
            raise AssertionError(dataset)

        def commit(self, note: Any = None) -> None:
            return None

    stages = pipeline.Stages(
        config=small_config(tmp_path / "run"),
        source=demo_conversations(),
        folder=Folder(),  # type: ignore[arg-type]
        state=None,  # type: ignore[arg-type]
        progress=de.RunProgress(),
        recordings=None,
        on_verdict=None,
        last_commit=time.monotonic(),
    )
    passes = 0

    async def main() -> None:
        nonlocal passes
        send, recv = anyio.create_memory_object_stream[Any](len(pairs))
        for pair in pairs:
            send.send_nowait(pair)
        send.close()
        async with anyio.create_task_group() as tg:
            tg.start_soon(stages.write, recv)
            while not stages.wake.is_set():  # set as the writer ends
                await anyio.lowlevel.checkpoint()
                passes += 1

    anyio.run(main)
    assert 0 < passes <= len(pairs) // 8


def test_a_sessions_first_batches_are_small_and_grow_to_flush_every(tmp_path: Path) -> None:
    """A run killed in its first minutes loses little: its first batches hold 50 pairs, then a quarter of what the
    session has written, up to ``flush_every`` (and a batch is also cut every 5 seconds, which only shortens one)."""
    result = de.run(small_config(tmp_path / "run", n=60).model_copy(update={"flush_every": 70}),
                    conversations=demo_conversations())  # fmt: skip
    records = [c for c in RunFolder(result.path).commits() if "verdicts" in c["rows"]]
    sizes = [c["rows"]["verdicts"] for c in records]
    assert sum(sizes) == result.counts.pairs > 300
    written = 0
    for size in sizes[:-1]:
        assert size <= min(70, max(FIRST_BATCH, written // 4))
        written += size
    assert sizes[0] == FIRST_BATCH  # cut by the size, not the clock: the simulated models answer at once
    assert max(sizes) == 70  # grown to flush_every


def test_a_render_function_is_never_called_from_two_threads_at_once(tmp_path: Path) -> None:
    """The estimate runs beside the replays unless a side has a render function of the user's (which may not be
    thread-safe, as a tokenizer's chat template is not): then it is made before them."""
    import threading
    import time

    lock, state = threading.Lock(), {"inside": 0, "overlap": 0, "threads": set()}

    def render(inp: Any) -> list[Any]:
        with lock:
            state["inside"] += 1
            state["overlap"] += state["inside"] > 1
            state["threads"].add(threading.current_thread().name)
        time.sleep(0.0005)  # a render that works a little, as a chat template does
        with lock:
            state["inside"] -= 1
        return list(inp.messages)

    cfg = small_config(tmp_path / "run", n=40)
    cfg = cfg.model_copy(update={"candidate": cfg.candidate.model_copy(update={"render": render})})
    result = de.run(cfg, conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert result.manifest.estimate is not None
    assert len(state["threads"]) == 2  # the estimate's thread, and the replays'
    assert state["overlap"] == 0


def test_an_estimate_asked_to_stop_stops_before_its_next_conversation(tmp_path: Path) -> None:
    from delta_eval.estimate import EstimateCancelled, estimate_sample
    from delta_eval.ingest.source import ConversationSource
    from delta_eval.sampling.stratified import SampleResult

    cfg = small_config(tmp_path / "run")
    conversations = demo_conversations().load()[0][:3]
    source = ConversationSource.from_conversations(conversations)
    sample = SampleResult(selected={i: ("all", 1.0) for i in range(3)}, strata=(), population=3)
    asked: list[int] = []
    kept = list(enumerate(conversations))
    with pytest.raises(EstimateCancelled):
        estimate_sample(cfg, source, sample, conversations=kept, cancelled=lambda: len(asked) > 1 or asked.append(1))
    assert len(asked) == 2  # asked before each conversation: counted two, stopped before the third
    assert estimate_sample(cfg, source, sample, conversations=kept, cancelled=lambda: False).to_dict()
