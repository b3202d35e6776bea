"""Cost before spending: ``de.estimate`` / ``delta-eval estimate`` draw the run's own sample, call no model, and land
within 30% of what the run then costs on the fake OpenAI server (prices from the catalogue)."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.cli import main
from delta_eval.estimate import DEFAULT_FUNNEL, CostEstimate, approx_tokens
from delta_eval.testing import FakeOpenAIServer
from tests.conftest import demo_source_toml

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("estimate_bench", ROOT / "benchmarks" / "estimate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any adapter built from here on fails the test: an estimate calls no model."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the estimate built a model adapter")

    monkeypatch.setattr("delta_eval.adapters.registry.create_adapter", refuse)
    monkeypatch.setattr("delta_eval.adapters.pool.create_adapter", refuse)


def test_the_estimate_is_within_30_percent_of_the_run_on_real_model_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench = _bench()
    conversations, _ = de.demo.demo_conversations().load()
    demo = de.demo.behaviours(7, 0.0, "changed")
    behaviour = {"gpt-4.1-mini": demo["baseline"], "gpt-4.1": demo["candidate"]}
    with FakeOpenAIServer(recordings=conversations, behaviour=behaviour) as server:
        config = bench.config_for(server, tmp_path / "run", n=20, seed=7, judges="rule")
        with monkeypatch.context() as m:
            _no_models(m)
            estimated = de.estimate(config, conversations=de.demo.demo_conversations())
        assert server.requests == []  # nothing was sent
        result = de.run(config, conversations=de.demo.demo_conversations(), progress=False)
    actual = bench.actual_costs(result)
    # The same seed draws the same sample: the same conversations and pairs as the run.
    assert estimated.conversations == result.counts.sampled
    assert estimated.pairs == result.counts.pairs
    for side in ("baseline", "candidate"):
        part = estimated.part(side)
        assert part.cost_usd is not None
        assert actual[side] is not None
        assert abs(part.cost_usd - actual[side]) / actual[side] <= 0.30, (side, part.cost_usd, actual[side])
        assert part.low_usd is not None
        assert part.high_usd is not None
        assert part.low_usd <= part.cost_usd <= part.high_usd
    total = actual["baseline"] + actual["candidate"]
    assert estimated.total_usd is not None
    assert abs(estimated.total_usd - total) / total <= 0.30
    # The run kept the estimate made as it began, and its report sets it beside the actual cost.
    assert result.manifest.estimate is not None
    assert result.manifest.estimate["pairs"] == estimated.pairs
    assert result.manifest.estimate["total_usd"] == pytest.approx(estimated.total_usd, rel=1e-4)
    assert "cost estimate vs actual" in render_report(result)


def test_judge_stages_follow_the_funnel_and_the_table_prints_them(tmp_path: Path) -> None:
    config = de.demo.demo_config(tmp_path / "run", n=6).model_copy(
        update={
            "judges": de.Judges(
                equivalence=de.EquivalenceJudge(model="openai:gpt-4.1-nano"),
                judge=de.PairwiseJudge(model="openai:gpt-4.1"),
                order="both",
            )
        }
    )
    est = de.estimate(config, conversations=de.demo.demo_conversations())
    assert isinstance(est, CostEstimate)
    stage2, stage3 = est.part("stage 2 equivalence"), est.part("stage 3 judge")
    assert stage2.pairs == pytest.approx(est.pairs * (1 - DEFAULT_FUNNEL.stage1))
    reach3 = stage2.pairs * (1 - DEFAULT_FUNNEL.stage2) + stage2.pairs * DEFAULT_FUNNEL.stage2 * 0.05  # the audit
    assert stage3.pairs == pytest.approx(reach3)
    assert stage3.calls == pytest.approx(2 * reach3)  # both orders
    assert stage3.input_tokens / stage3.calls > stage2.input_tokens / stage2.calls  # stage 3 sees the whole context
    for part in (stage2, stage3):
        assert part.cost_usd is not None
        assert part.low_usd is not None
        assert part.high_usd is not None
        assert 0 < part.low_usd < part.cost_usd < part.high_usd
    assert est.part("baseline").cost_usd == 0.0  # the simulated models cost nothing
    text = str(est)
    for name in ("baseline", "candidate", "stage 2 equivalence", "stage 3 judge", "total", "funnel (defaults)"):
        assert name in text
    # A model with no known price: its cost, and the total, are unknown (never a partial sum), and the table says so.
    unpriced = config.model_copy(update={"candidate": de.Variant(model="openai:my-finetune")})
    est = de.estimate(unpriced, conversations=de.demo.demo_conversations())
    assert est.part("candidate").cost_usd is None
    assert est.total_usd is None
    assert "openai:my-finetune has no known price" in str(est)


def test_a_pilot_gives_the_funnel_its_shares(tmp_path: Path) -> None:
    pilot_config = de.demo.demo_config(tmp_path / "pilot", n=4, latency_ms=0.0)
    pilot = de.run(pilot_config, conversations=de.demo.demo_conversations(), progress=False)
    by_stage = pilot.counts.by_stage
    config = de.demo.demo_config(tmp_path / "run", n=6)
    est = de.estimate(config, conversations=de.demo.demo_conversations(), pilot=tmp_path / "pilot")
    decided = sum(n for stage, n in by_stage.items() if stage != "error")
    assert est.funnel.stage1 == pytest.approx(by_stage.get("deterministic", 0) / decided)
    assert est.funnel.source.startswith("pilot ")


def test_a_tokenizer_given_counts_the_tokens() -> None:
    config = de.demo.demo_config("unused", n=3)
    words = de.estimate(config, conversations=de.demo.demo_conversations(), tokenizer=lambda text: len(text.split()))
    approx = de.estimate(config, conversations=de.demo.demo_conversations())
    assert words.pairs == approx.pairs
    assert words.part("baseline").input_tokens < approx.part("baseline").input_tokens  # a word is > 1 token
    assert "<lambda>" in words.tokenizer
    assert approx.tokenizer == "approximation"


def test_each_tool_spec_is_counted_once_per_side_not_per_request() -> None:
    # Every request offers the same specs: counting their parameters' JSON per request was most of an estimate's time.
    seen: Counter[str] = Counter()

    def tokenizer(text: str) -> int:
        seen[text] += 1
        return len(text.split())

    config = de.demo.demo_config("unused", n=3)
    estimated = de.estimate(config, conversations=de.demo.demo_conversations(), tokenizer=tokenizer)
    conversations, _ = de.demo.demo_conversations().load()
    schemas = {json.dumps(t.parameters) for c in conversations for t in c.tools}
    assert estimated.pairs > 2
    assert schemas
    assert {seen[s] for s in schemas} == {2}  # the baseline's and the candidate's count


def test_approximation_counts_json_denser_than_prose() -> None:
    prose = "Your reservation is confirmed for the flight to Boston on May 15."
    data = json.dumps({"reservation_id": "ZFA04Y", "flights": [{"number": "HAT001", "date": "2024-05-15"}]})
    assert len(prose) / approx_tokens(prose) > len(data) / approx_tokens(data)
    assert approx_tokens(prose, "anthropic") > approx_tokens(prose, "openai")
    assert approx_tokens("") == 0


def test_the_estimate_command_prints_the_table_or_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_provider_keys: None
) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        'out = "run"\n'
        + demo_source_toml(5)
        + '[baseline]\nmodel = "openai:gpt-4.1-mini"\n[candidate]\nmodel = "anthropic:claude-sonnet-4-5"\n'
    )
    _no_models(monkeypatch)
    # No key in the environment either: an estimate needs none, it calls nothing.
    assert main(["estimate", str(config)]) == 0
    out = capsys.readouterr().out
    assert "cost estimate: 5 pairs from 5 conversations" in out
    assert "openai:gpt-4.1-mini" in out
    assert "anthropic:claude-sonnet-4-5" in out
    assert main(["estimate", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pairs"] == 5
    assert [p["part"] for p in data["parts"]] == ["baseline", "candidate"]
    assert data["low_usd"] <= data["total_usd"] <= data["high_usd"]
    assert not (tmp_path / "run").exists()  # nothing written


def test_the_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Progress, and the cost before spending", 1)[1].split("`de.run` also works", 1)[0]
    [python] = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {"de": de}
    exec(python, scope)
    out = capsys.readouterr()
    assert "cost estimate:" in out.out
    assert out.err.splitlines()[-1].startswith("delta-eval completed:")  # the closing progress line
    result = scope["actual"]
    assert isinstance(result, de.RunResult)
    assert result.manifest.estimate is not None


def test_a_batching_run_is_estimated_at_the_batch_discount_where_the_provider_batches(tmp_path: Path) -> None:
    from delta_eval.adapters.batch import BATCH_DISCOUNT, BatchSettings

    judges = de.Judges(
        equivalence=de.EquivalenceJudge(model="anthropic:claude-haiku-4-5"),
        judge=de.PairwiseJudge(model="gemini:gemini-2.5-pro"),
    )
    sides = {"baseline": de.Variant(model="openai:gpt-4.1-mini"), "candidate": de.Variant(model="openai:gpt-4.1")}
    plain = de.demo.demo_config(tmp_path / "run", n=6).model_copy(update={"judges": judges, **sides})
    conversations = de.demo.demo_conversations()
    interactive = de.estimate(plain, conversations=conversations)
    judged = de.estimate(plain.model_copy(update={"batch": BatchSettings()}), conversations=conversations)
    replayed = de.estimate(plain.model_copy(update={"batch": BatchSettings(replays=True)}), conversations=conversations)
    for name in ("stage 2 equivalence", "stage 3 judge"):
        for field in ("cost_usd", "low_usd", "high_usd"):
            assert getattr(judged.part(name), field) == pytest.approx(
                getattr(interactive.part(name), field) * BATCH_DISCOUNT
            )
            assert getattr(replayed.part(name), field) == pytest.approx(getattr(judged.part(name), field))
    for side in ("baseline", "candidate"):
        assert judged.part(side).cost_usd == pytest.approx(interactive.part(side).cost_usd)  # replayed at once
        assert replayed.part(side).cost_usd == pytest.approx(interactive.part(side).cost_usd * BATCH_DISCOUNT)
    assert any("batch" in note for note in judged.notes)
    # A provider with no batch API wired in keeps its price.
    azure = plain.model_copy(update={"batch": BatchSettings(replays=True), "baseline": de.Variant(model="simulated:x")})
    assert de.estimate(azure, conversations=conversations).part("baseline").cost_usd == 0.0
