"""The benchmarks still run against the library as it is (their figures are printed by running them, not here)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import delta_eval as de

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first, as an import does: a dataclass of the module looks its module up while it is built.
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_throughput_benchmark_measures_the_same_pairs_both_ways(tmp_path: Path) -> None:
    throughput = load("throughput")
    export = throughput.scaled_export(1, tmp_path)
    small = tmp_path / "small.jsonl"
    small.write_text("".join(export.read_text().splitlines(keepends=True)[:15]))
    pipeline = throughput.run_pipeline(small, tmp_path / "run", concurrency=4)
    bare = throughput.run_bare(small, concurrency=4)
    assert pipeline["pairs"] == bare["pairs"] > 0
    assert pipeline["seconds"] > 0
    assert bare["rss_mb"] > 0


@pytest.mark.slow
def test_cache_key_benchmark_compares_the_same_requests(capsys: pytest.CaptureFixture[str]) -> None:
    cache_key = load("cache_key")
    import sys

    argv = sys.argv
    sys.argv = ["cache_key.py", "--conversations", "2", "--repeats", "1"]
    try:
        cache_key.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    for name in ("cache_key", "plain json", "sorted dict"):
        assert name in out


@pytest.mark.slow
def test_object_store_benchmark_counts_the_requests_of_a_run_and_of_its_opening(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    object_store = load("object_store")
    monkeypatch.setattr("sys.argv", ["object_store.py", "-n", "6", "--repeats", "1"])
    for name in ("DELTA_EVAL_WORK_DIR", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                 "AWS_EC2_METADATA_DISABLED"):  # fmt: skip
        monkeypatch.setenv(name, "")  # the benchmark sets its own: restored when the test ends
    object_store.main()
    out = capsys.readouterr().out
    assert "s3:// (moto)" in out
    assert re.search(r"PUT record +[1-9]", out)
    assert re.search(r"open again: +[0-9.]+ s wall, 5 requests", out)


@pytest.mark.slow
def test_judges_benchmark_measures_funnel_and_overlap(tmp_path: Path) -> None:
    judges = load("judges")
    llm = judges.one_run("openai", "llm", 6, 0.0, tmp_path / "llm")
    assert llm["judge_calls"] > 0
    assert 0.0 <= llm["overlap"] <= 1.0
    assert 0.0 < llm["resolved_early"] <= 1.0
    assert any("judging funnel" in line for line in llm["funnel"])
    assert llm["result"].counts.judging["judge"].cost_usd > 0  # priced for illustration
    rule = judges.one_run("openai", "rule", 6, 0.0, tmp_path / "rule")
    assert "overlap" not in rule
    assert rule["result"].counts.pairs == llm["result"].counts.pairs


@pytest.mark.slow
def test_long_conversation_benchmark_builds_the_same_points_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("long_conversation")
    conv = bench.long_conversation(300)
    assert len(conv.messages) == 300
    new = [p.model_dump() for p in bench.replay_points(conv)]
    old = [p.model_dump() for p in bench.old_points(conv)]
    assert new == old
    bench.main(["--sizes", "200", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "     200 " in out


@pytest.mark.slow
def test_analysis_benchmark_runs_on_a_small_synthetic_run(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("analysis")
    bench.main(["--pairs", "40000", "--reasons", "300", "--repeats", "1", "--batched"])
    out = capsys.readouterr().out
    assert "a.summary() (cold)" in out
    assert "win_rate(weighted=True)" in out
    assert "40,000 verdicts, weights by stratum (median of 1, cold):" in out
    assert "decision, 40 batches of 1,000 pairs" in out
    assert "decision, the same compacted into 1 batch (" in out
    assert "x plain SQL" in out
    assert "a.themes():" in out
    assert " over 300 reasons" in out


def test_the_analysis_benchmarks_stratified_run_is_weighted_and_its_tallies_count_its_verdicts(tmp_path: Path) -> None:
    """The synthetic run given a stratified sample's weights: every win rate is weighted (what the figures of
    ``weights by stratum`` measure), and its tallies still serve, with the figures of the verdicts."""
    bench = load("analysis")
    run = bench.synthetic_run(tmp_path / "run", 3000, 10)
    bench.stratify(run)
    result = de.open_result(run)
    rate = result.win_rate()
    assert rate.weighted
    tallies = result.tallies()
    assert tallies is not None
    assert len(set(tallies.column("weight").to_pylist())) == len(bench.STRATUM_WEIGHTS)
    for part in (run / "verdict_tallies").iterdir():  # a batch without its tallies: its verdicts are read
        part.unlink()
    fresh = de.open_result(run)
    assert fresh.tallies() is None
    assert fresh.win_rate().model_dump() == rate.model_dump()


@pytest.mark.slow
def test_decision_calibration_benchmark_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("decision_calibration")
    bench.main(["--part", "runs", "--reps", "2", "--copies", "1", "--real-checks", "1", "--scenario", "no-op"])
    out = capsys.readouterr().out
    assert "no-op" in out
    assert "1 identical <- plan" in out  # a real de.run on a sample decided as the census shortcut did
    bench.main(["--part", "fwer", "--grid-reps", "2"])
    bench.main(["--part", "stop", "--grid-reps", "2"])
    out = capsys.readouterr().out
    assert "family-wise error" in out
    assert "fixed design:" in out


def test_prompt_cache_benchmark_reads_most_input_from_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    figures = load("prompt_cache").main(["--n", "4", "--latency-ms", "0", "--concurrency", "4"])
    assert "read share" in capsys.readouterr().out
    for f in figures:
        assert f.input_tokens > 0
        if f.caching:
            assert f.read_share >= 0.5, f  # a ratio of tokens, not a timing
            assert f.cost_usd < f.full_price_usd
        else:
            assert f.cache_read_tokens == f.cache_write_tokens == 0
            assert f.cost_usd == pytest.approx(f.full_price_usd)


@pytest.mark.slow
def test_rate_limits_benchmark_keeps_the_cap_full_under_noise_and_stays_under_a_true_limit() -> None:
    rate_limits = load("rate_limits")
    figures = rate_limits.measure(calls=400, repeats=1, max_concurrency=16, rpm=100.0, minute_s=1.0)
    noise, limit = figures["noise"], figures["limit"]
    # Ratios, not timings: under 3% noise the adaptive limiter keeps more calls in flight than halving did, and
    # under a true limit it sends nothing over it.
    assert noise["adaptive"]["mean_in_flight"] > noise["halving"]["mean_in_flight"]
    assert noise["adaptive"]["rate_limited"] > 0
    assert limit["adaptive"]["over_limit"] <= limit["halving"]["over_limit"]
    assert limit["adaptive"]["failed"] == 0
    assert "of ideal" in rate_limits.report(figures, 400, 16)


@pytest.mark.slow
def test_ingest_benchmark_reads_every_format_back_whole(tmp_path: Path) -> None:
    ingest = load("ingest")
    for name in ingest.FORMATS:
        path = ingest.write(name, 30, tmp_path)
        convs, errors, seconds, peak_mb = ingest.measure(name, path)
        assert (convs, errors) == (30 // ingest.FORMATS[name][3], 0), name
        assert seconds > 0
        assert peak_mb > 0


@pytest.mark.slow
def test_fleet_benchmark_counts_the_baseline_once_in_a_run_of_several(tmp_path: Path) -> None:
    fleet = load("fleet")
    got = fleet.measure(4, 0.0, tmp_path)
    base = got["models"]["baseline"]
    # separate runs: the baseline three times and the candidate 'same' once; one run: each once
    assert got["one run"]["calls"][base] * 2 == got["separate"]["calls"][base]
    assert got["pairs"] > 0


@pytest.mark.slow
def test_sampling_memory_benchmark_samples_a_small_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("sampling_memory")
    path = bench.throughput.scaled_export(2, tmp_path)
    got = bench.sample_phase(path, 20)
    assert got["population"] == 400
    assert got["pairs"] > 20
    assert got["peak_mb"] >= got["sample_mb"] >= got["before_mb"] > 0
    rows = bench.main(["--sizes", "200", "400", "--n", "10"])
    assert [row["size"] for row in rows] == [200, 400]
    assert "per source conversation" in capsys.readouterr().out


@pytest.mark.slow
def test_schedule_benchmark_orders_the_same_calls_every_way(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("schedule")
    got = bench.main(["--conversations", "20"])
    ratios = [v for k, v in got.items() if k not in ("pairs", "calls")]
    assert len(ratios) == 3
    assert all(r >= 1.0 - 1e-9 for r in ratios)  # no order beats every worker busy to the end
    assert got["longest first (all at once)"] <= got["source order"]
    assert "x the ideal" in capsys.readouterr().out


@pytest.mark.slow
def test_long_conversation_benchmark_prints_the_replay_ratio_against_its_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load("long_conversation")
    bench.main(["--sizes", "100", "--repeats", "1", "--replay", "--replay-sizes", "100", "200"])
    assert "(target <= 3)" in capsys.readouterr().out


@pytest.mark.slow
def test_ray_scaling_benchmark_compares_the_same_run_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    import delta_eval as de

    # imported by its name: the fake server's process (spawned) imports the benchmark's function again
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    scaling = importlib.import_module("ray_scaling")
    # the sharded path without Ray (the Ray cluster itself is tested in tests/test_ray.py)
    got = scaling.compare(30, 5.0, 16, 1, lambda: de.InProcessExecutor(2))
    one, sharded = got["1 process"], got["sharded"]
    assert one["pairs"] == sharded["pairs"] >= 30
    assert one["calls"] == sharded["calls"] > 0
    assert one["ideal"] > 0
    assert sharded["same_verdicts"] is True
    assert one["client_cpu"] > 0
    assert one["server_cpu"] > 0  # the CPU floor the benchmark prints adds both


@pytest.mark.slow
def test_providers_benchmark_prints_each_figure_against_its_target(capsys: pytest.CaptureFixture[str]) -> None:
    providers = load("providers")
    import sys

    argv = sys.argv
    sys.argv = ["providers.py", "--conversations", "4", "--repeats", "1", "--scenarios", "0:4,50:8", "--processes", "2",
                "--floor"]  # fmt: skip
    try:
        providers.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert out.count("client CPU per call: pipeline") == 2
    assert "pipeline client: the SDK on " in out
    assert "(target <= 1.5:" in out
    assert "pipeline wall time / ideal (calls x 0.05 s / 8" in out
    assert "processes wall time / ideal (calls x 0.05 s / 8" in out
    assert out.count("pipeline on 2 processes: client CPU per call") == 2
    assert "(target <= 2:" in out
    assert "errors 0" in out
    # The run on processes made the same calls as the one on one loop.
    calls = re.findall(r"  (pipeline|processes) +(\d+) calls", out)
    assert len(calls) == 4
    assert {kind: n for kind, n in calls[:2]}["pipeline"] == {kind: n for kind, n in calls[:2]}["processes"]
    # The layers under the pipeline (--floor) made as many calls as it did, the SDK's costing more than HTTP's.
    assert out.count("client CPU per call by layer: the SDK's request and typed answer") == 2
    layers = re.findall(r"  (pipeline|sdk|http) +(\d+) calls .* CPU +([\d.]+) s/1000", out)
    for scenario in (layers[:3], layers[3:]):
        made = {kind: (int(n), float(cpu)) for kind, n, cpu in scenario}
        assert made["pipeline"][0] == made["sdk"][0] == made["http"][0]
        assert made["sdk"][1] > made["http"][1]


@pytest.mark.slow
def test_sessions_benchmark_rolls_sessions_and_turns_of_the_same_conversations(tmp_path: Path) -> None:
    sessions = load("sessions")
    convs = sessions.conversations(4)
    rolled = sessions.run("session", convs, tmp_path / "session", 0.0, 4)
    turns = sessions.run("turn", convs, tmp_path / "turn", 0.0, 4)
    assert rolled["units"] == 4
    assert turns["units"] > rolled["units"]
    assert rolled["errors"] == turns["errors"] == 0
    assert rolled["side_calls"] > turns["side_calls"]
    assert rolled["sources"]["recorded"] > 0


@pytest.mark.slow
def test_fake_servers_benchmark_measures_the_server_on_the_same_answers(capsys: pytest.CaptureFixture[str]) -> None:
    fake_servers = load("fake_servers")
    import sys

    argv = sys.argv
    sys.argv = ["fake_servers.py", "--conversations", "2", "--repeats", "1", "--compare", str(ROOT)]
    try:
        fake_servers.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "responses byte-identical between the two trees: yes" in out
    assert "ms per request" in out


def test_a_figure_is_met_on_its_side_of_the_bound(tmp_path: Path) -> None:
    targets = load("targets")
    at_most = targets.Figure("b", "cpu", 1.6, "ms", 1.5)
    at_least = targets.Figure("b", "throughput", 0.9, "", 0.8, at_least=True)
    context = targets.Figure("b", "bare loop", 6.0, "ms")
    assert (at_most.met, at_least.met, context.met) == (False, True, None)
    assert (at_most.target_text(), at_least.target_text(), context.target_text()) == ("<= 1.5 ms", ">= 0.8", "")
    path = tmp_path / "figures.jsonl"
    targets.record(path, at_most, at_least)
    targets.record(path, context)
    targets.record(None, at_most)  # no --figures: nothing written anywhere
    assert targets.read_figures(path) == [at_most, at_least, context]


@pytest.mark.slow
def test_the_scale_driver_prints_every_benchmarks_figures_beside_their_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scale = load("scale")
    assert scale.main(["--quick"]) == 0
    out = capsys.readouterr().out
    summary = out[out.rindex("benchmark ") :]
    for name in ("providers", "sampling_memory", "analysis", "long_conversation"):
        assert f"\n{name} " in summary, name
    assert "client CPU per call" in summary
    assert "peak RSS, 800 source conversations" in summary
    assert " targets met" in summary
    assert "exit code" not in summary  # every benchmark ran and recorded its figures
