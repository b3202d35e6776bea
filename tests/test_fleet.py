"""Several candidates in one run: the baseline of each turn is replayed once, each candidate is judged against it,
each candidate reads back as a run of its own, the leaderboard ranks them, and a finished run that gains a
candidate replays only the new one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.analysis.leaderboard import leaderboard, pareto_front
from delta_eval.cli import main
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderError
from delta_eval.metrics.estimand import Estimand
from delta_eval.store.folder import RunFolder

N = 10


def _variant(base: de.Variant, **changes: object) -> de.Variant:
    return de.Variant.model_validate({**base.model_dump(), **changes})


def _fleet(out: Path, names: tuple[str, ...] = ("warm", "cold", "same")) -> de.RunConfig:
    config = demo_config(out, n=N, latency_ms=0.0)
    made = {
        "warm": _variant(config.the_candidate, name="warm"),
        "cold": _variant(config.the_candidate, name="cold", params={"temperature": 0.9}),
        "same": _variant(config.baseline, name="same"),  # the baseline under another name: an A/A candidate
    }
    return config.model_copy(update={"candidate": None, "candidates": tuple(made[n] for n in names)})


def _answered(result: de.RunResult, model: str) -> int:
    return sum(s.calls[model].answered for s in result.manifest.sessions if model in s.calls)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[de.RunResult, de.RunResult]:
    root = tmp_path_factory.mktemp("fleet")
    single = de.run(demo_config(root / "single", n=N, latency_ms=0.0), conversations=demo_conversations(),
                    progress=False)  # fmt: skip
    fleet = de.run(_fleet(root / "fleet"), conversations=demo_conversations(), progress=False)
    return single, fleet


def test_the_baseline_is_replayed_once_whatever_the_number_of_candidates(
    runs: tuple[de.RunResult, de.RunResult],
) -> None:
    single, fleet = runs
    assert fleet.candidates == ["warm", "cold", "same"]
    # The same sample: the baseline model answered as many calls for three candidates as for one (plus those of
    # the candidate that runs the baseline's model, counted under the same model id).
    assert _answered(fleet, "simulated:baseline") == _answered(single, "simulated:baseline") + _calls_of_same(fleet)
    assert _answered(fleet, "simulated:candidate") == sum(_calls(fleet.of(n)) for n in ("warm", "cold"))
    con = fleet.connect()
    every = con.sql("SELECT count(*), count(DISTINCT candidate) FROM all_verdicts").fetchall()[0]
    assert every == (3 * single.counts.pairs, 3)


def _calls(result: de.RunResult) -> int:
    """The model calls the candidate's replays of this result sent to its provider (not served by the cache)."""
    con = result.connect()
    ((n,),) = con.sql("SELECT sum(model_calls - cached_calls) FROM replays WHERE side = 'candidate'").fetchall()
    return int(n)


def _calls_of_same(fleet: de.RunResult) -> int:
    """The calls of the candidate that runs the baseline's model (counted under the same model id)."""
    return _calls(fleet.of("same"))


def test_each_candidate_reads_back_as_a_run_of_its_own(runs: tuple[de.RunResult, de.RunResult]) -> None:
    single, fleet = runs
    for name in fleet.candidates:
        mine = fleet.of(name)
        verdicts = mine.table("verdicts")
        assert verdicts.num_rows == single.counts.pairs == mine.counts.pairs
        assert mine.counts.pairs_planned == single.counts.pairs_planned
        assert set(verdicts["candidate"].to_pylist()) == {name}
        assert all(p.endswith(f"~{name}") for p in verdicts["pair_id"].to_pylist())
        replays = mine.table("replays")
        assert sorted(set(replays["side"].to_pylist())) == ["baseline", "candidate", "recorded"]
        sides = replays.to_pylist()
        assert {r["variant"] for r in sides if r["side"] == "candidate"} == {name}
        con = mine.connect()
        ((pairs,),) = con.sql("SELECT count(*) FROM pairs WHERE candidate_text IS NOT NULL").fetchall()
        assert pairs == verdicts.num_rows
        assert mine.decision().outcome in ("APPROVED", "PARTIAL", "REJECTED")
    # The candidate that is the baseline under another name gives the same outputs: every pair equivalent.
    same = fleet.of("same").win_rate()
    assert same.estimate == pytest.approx(0.5)
    assert fleet.of("same").counts.by_stage == {"deterministic": single.counts.pairs}
    # The baseline's replay of a turn is one replay, stored with each candidate's pair.
    con = fleet.connect()
    texts = con.sql(
        "SELECT regexp_replace(pair_id, '~.*', '') AS point, count(DISTINCT coalesce(final_text, '')) "
        "FROM all_replays WHERE side = 'baseline' GROUP BY point HAVING count(DISTINCT coalesce(final_text, '')) > 1"
    ).fetchall()
    assert texts == []


def test_the_leaderboard_ranks_the_candidates_with_their_fronts_and_score(
    runs: tuple[de.RunResult, de.RunResult],
) -> None:
    _, fleet = runs
    board = leaderboard(fleet.path, weights={"quality": 1.0, "latency": 0.0, "cost": 0.0})
    assert {e.candidate for e in board.entries} == {"warm", "cold", "same"}
    by_name = {e.candidate: e for e in board.entries}
    for name, e in by_name.items():
        mine = fleet.of(name)
        assert e.win_rate == pytest.approx(mine.win_rate().estimate)
        assert e.outcome == mine.decision().outcome
    best = max(e.win_rate or 0 for e in board.entries)
    assert all((e.score == 1.0) == (e.win_rate == best) for e in board.entries)  # quality alone: the best scores 1
    expected = pareto_front([(e.win_rate, e.cost_per_conversation) for e in board.entries])
    assert [e.front_cost for e in board.entries] == expected
    text = str(board)
    assert all(name in text for name in by_name)
    assert "the decision, not the score, gates a merge" in text


def test_the_report_leads_with_the_leaderboard_and_reports_the_candidate_asked(
    runs: tuple[de.RunResult, de.RunResult], capsys: pytest.CaptureFixture[str]
) -> None:
    _, fleet = runs
    assert main(["report", str(fleet.path), "--candidate", "cold"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("leaderboard: 3 candidates")
    assert "== candidate cold against the baseline" in out
    with pytest.raises(RunFolderError, match="no candidate 'nobody'; it has warm, cold, same"):
        de.RunResult(fleet.path, "nobody")


def test_a_finished_run_that_gains_a_candidate_replays_only_the_new_one(tmp_path: Path) -> None:
    first = de.run(_fleet(tmp_path / "run", ("warm", "cold")), conversations=demo_conversations(), progress=False)
    pairs = first.counts.pairs  # the first candidate's (a result reads one candidate)
    grown = de.run(_fleet(tmp_path / "run", ("warm", "cold", "same")), conversations=demo_conversations(),
                   progress=False)  # fmt: skip
    last = grown.manifest.sessions[-1]
    assert last.resumed_pairs == 2 * pairs  # the two first candidates' pairs stay as they were
    old = last.calls.get("simulated:candidate")
    assert old is None or old.made == 0  # neither earlier candidate is replayed again
    assert last.cache.hits > 0  # the baseline's answers come from the response cache ...
    assert last.cache.misses == _calls_of_same(grown) > 0  # ... only the new candidate calls a model
    assert grown.candidates == ["warm", "cold", "same"]
    assert grown.of("same").counts.pairs == pairs


def test_several_candidates_are_named_and_checked() -> None:
    config = demo_config("runs/x", n=N)
    unnamed = _variant(config.the_candidate, name="")
    named = de.RunConfig.model_validate({**dict(config), "candidate": None, "candidates": [unnamed, unnamed]})
    assert [v.name for v in named.candidates] == ["candidate-1", "candidate-2"]
    assert named.the_candidate.name == "candidate-1"
    assert de.RunConfig.model_validate(dict(named)) == named  # validated again: the same
    one = de.RunConfig.model_validate({**dict(config), "candidate": None, "candidates": [config.the_candidate]})
    assert not one.fleet
    assert one.fingerprint() == config.fingerprint()  # one candidate however given: the same run
    twice = [_variant(unnamed, name="a"), _variant(unnamed, name="a")]
    with pytest.raises(ValueError, match="names must differ"):
        de.RunConfig.model_validate({**dict(config), "candidate": None, "candidates": twice})
    with pytest.raises(ValueError, match="is taken"):
        de.RunConfig.model_validate({**dict(config), "candidate": None,
                                     "candidates": [_variant(unnamed, name="recorded"), unnamed]})  # fmt: skip
    with pytest.raises(ValueError, match="a run needs a candidate"):
        de.RunConfig.model_validate({**dict(config), "candidate": None})


def test_the_readme_config_of_several_candidates_loads(tmp_path: Path) -> None:
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Several candidates", 1)[1].split("\n## ", 1)[0]
    [toml] = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "v2.txt").write_text("You are the airline agent, v2.")
    path = tmp_path / "eval.toml"
    path.write_text('out = "runs/x"\n[baseline]\nmodel = "openai:gpt-4.1"\n\n' + toml)
    config = de.load_config(path)
    assert [v.name for v in config.candidates] == ["gpt-5-mini", "prompt-v2"]
    assert config.candidates[1].system_prompt == "You are the airline agent, v2."  # relative to the config file
    assert config.score == de.ScoreWeights(quality=0.5, latency=0.2, cost=0.3)
    assert config.fleet
    assert config.screen is not None
    assert [g.metric for g in config.screen.gates] == ["latency_p95_s", "error_rate"]


def test_the_html_report_of_several_candidates_draws_the_leaderboard(
    runs: tuple[de.RunResult, de.RunResult], tmp_path: Path
) -> None:
    _, fleet = runs
    page = tmp_path / "r.html"
    assert main(["report", str(fleet.path), "--html", str(page), "--candidate", "warm"]) == 0
    text = page.read_text()
    board = text[text.index("<h2 id=leaderboard>") : text.index("<h2 id=decision>")]
    for name in fleet.candidates:
        assert f"<td>{name}</td>" in board
        assert f'font-size="11">{name}</text>' in board  # a point on each plot
    assert board.count("<svg") == 2  # win rate against cost, and against latency
    assert "of the candidate <b>warm</b>" in text


def test_the_estimate_of_several_candidates_counts_each_one_and_the_baseline_once(tmp_path: Path) -> None:
    one = de.estimate(demo_config(tmp_path / "one", n=N), conversations=demo_conversations())
    several = de.estimate(_fleet(tmp_path / "fleet", ("warm", "cold")), conversations=demo_conversations())
    assert several.pairs == 2 * one.pairs
    assert several.part("baseline").calls == one.part("baseline").calls  # replayed once
    assert several.part("warm").calls == several.part("cold").calls == one.part("candidate").calls
    assert several.part("stage 3 judge").pairs == 2 * one.part("stage 3 judge").pairs  # each candidate judged


def test_screening_leaves_out_a_candidate_that_fails_a_cheap_gate_on_the_first_conversations(tmp_path: Path) -> None:
    config = _fleet(tmp_path / "run", ("warm", "cold"))
    slow = _variant(config.candidates[1], provider_options={**config.candidates[1].provider_options,
                                                             "latency_ms": 60.0, "latency_sigma": 0.1})  # fmt: skip
    screen = {"conversations": 3, "gates": [{"metric": "latency_p95_s", "max": 0.03, "test": "point"}]}
    screened = config.model_copy(update={"candidates": (config.candidates[0], slow)})
    screened = de.RunConfig.model_validate({**dict(screened), "screen": screen})
    result = de.run(screened, conversations=demo_conversations(), progress=False)
    reason = result.manifest.screened_out["cold"]
    assert "failed on the first 3 conversations: latency_p95_s" in reason
    assert "warm" not in result.manifest.screened_out
    full = de.run(_fleet(tmp_path / "full", ("warm",)), conversations=demo_conversations(), progress=False)
    # warm went on to the whole sample; cold stopped at the turns of the first 3 conversations
    assert result.of("warm").counts.pairs == full.counts.pairs
    cold = result.of("cold")
    assert len(set(cold.table("verdicts")["conversation_id"].to_pylist())) == 3
    assert cold.counts.pairs < full.counts.pairs
    assert cold.counts.pairs_planned == cold.counts.pairs  # what it had when screening left it out
    assert result.of("warm").counts.pairs_planned == full.counts.pairs_planned  # the whole sample
    assert any(note.startswith("screening: cold failed") for note in result.manifest.notes)
    board = leaderboard(result.path)
    assert [e.candidate for e in board.entries][-1] == "cold"  # screened out: last, said so
    assert board.entries[-1].outcome == "SCREENED"
    assert "screened out: failed on the first 3" in str(board)


def test_candidates_of_one_run_compare_on_their_turns(runs: tuple[de.RunResult, de.RunResult]) -> None:
    single, fleet = runs
    comparison = de.analyze([fleet.path, single.path])  # the folder of several: one run per candidate
    names = [r["name"] for r in comparison.runs()]
    assert names == ["fleet · warm", "fleet · cold", "fleet · same", "single"]
    # warm is the demo's candidate as the single run had it, on the same sample: the same candidate
    assert [c["runs"] for c in comparison.consistency()] == [["fleet · warm", "single"]]
    con = fleet.connect()
    differ = con.sql(
        "SELECT count(*) FROM (SELECT regexp_replace(pair_id, '~.*$', '') AS point, count(DISTINCT outcome) AS n "
        "FROM all_verdicts GROUP BY point) WHERE n > 1"
    ).fetchall()[0][0]
    # every turn is in all four runs; those where the three candidates disagree differ in the comparison too
    assert comparison.differences(limit=1000)["total"] >= differ > 0


def test_score_weights_not_given_weigh_nothing() -> None:
    assert de.ScoreWeights(quality=1) == de.ScoreWeights(quality=1, latency=0, cost=0)
    with pytest.raises(ValueError, match="a score needs a weight above 0"):
        de.ScoreWeights()


def test_each_candidates_win_rate_from_its_tallies_is_the_one_over_its_verdicts(
    runs: tuple[de.RunResult, de.RunResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fleet = runs
    # The demo samples its strata unevenly: its weights vary (the default is weighted).
    shapes: list[dict[str, Any]] = [{}, {"by": "stratum"}, {"over": "judged", "errors": "exclude"}]
    options = [*shapes, *({**o, "weighted": False} for o in shapes)]
    tallied = {(name, i): fleet.of(name).win_rate(**o) for name in fleet.candidates for i, o in enumerate(options)}
    for e in (Estimand(), Estimand(weighted=False)):
        assert all(fleet.of(name)._tallied(e, None) is not None for name in fleet.candidates)
    assert fleet.of(fleet.candidates[0]).win_rate().weighted
    monkeypatch.setattr(RunFolder, "read_tallies", lambda self: None)  # the verdicts read instead
    for name in fleet.candidates:
        assert fleet.of(name)._tallied(Estimand(), None) is None
        for i, o in enumerate(options):
            assert fleet.of(name).win_rate(**o) == tallied[(name, i)], (name, o)
