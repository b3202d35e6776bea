"""A run whose provider reports no usage: the replays' token columns and cost are null in Parquet, the summary and
the report say unknown (never 0 or $0), and the manifest says once how many calls had no usage."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config, demo_conversations, demo_models
from delta_eval.store.manifest import NO_USAGE_NOTE
from delta_eval.store.tables import TABLES
from delta_eval.testing.servers.openai import FakeOpenAIServer


def test_a_run_without_usage_writes_nulls_and_says_unknown(tmp_path: Path) -> None:
    conversations, _ = demo_conversations().load()
    with FakeOpenAIServer(recordings=conversations, usage=False) as server:
        options = {"base_url": server.base_url, "api_key": "test-key"}
        models = demo_models("openai", options, latency_ms=0.0, judges="rule")
        config = demo_config(tmp_path / "run", n=3, models=models)
        result = de.run(config, conversations=demo_conversations())
    replays = pq.read_table(tmp_path / "run" / "replays").to_pylist()
    replayed = [r for r in replays if r["side"] != "recorded" and r["model_calls"]]
    assert replayed
    for column in ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "cost_usd"):
        assert all(r[column] is None for r in replayed), column
    # The rows read back as unknown usage, not zero usage.
    table = TABLES["replays"]
    assert all(table.parse(r).usage is None for r in replayed)

    summary = de.analyze(result.path).summary()
    for side in ("baseline", "candidate"):
        figures = summary["sides"][side]
        assert figures["input_tokens"] is None
        assert figures["cost_usd"] is None
        assert figures["saved_by_caching_usd"] is None

    report = render_report(result)
    assert "unknown" in report
    # The per-side tokens/cost rows, the prompt-cache rows and the estimate-vs-actual rows: unknown, never 0 or 0.0000.
    per_side = [line for line in report.splitlines() if line.startswith(("  baseline ", "  candidate "))]
    assert len(per_side) == 6
    assert all("unknown" in line and " 0.0000" not in line for line in per_side)

    notes = [n for n in result.manifest.notes if n.startswith(NO_USAGE_NOTE)]
    calls = result.counts.calls
    assert len(notes) == 1
    assert calls.no_usage == calls.answered > 0
    assert f"{calls.no_usage} of {calls.answered}" in notes[0]
