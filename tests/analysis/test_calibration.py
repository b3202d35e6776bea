from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.analysis.calibration import CLASSES, Agreement, cohen_kappa
from delta_eval.analysis.report import render_report
from delta_eval.demo import demo_config, demo_conversations

labels = st.lists(st.sampled_from(CLASSES), min_size=1, max_size=60)


@given(labels, st.data())
def test_kappa_is_symmetric_bounded_and_one_for_identical_labels(a: list[str], data: st.DataObject) -> None:
    b = data.draw(st.lists(st.sampled_from(CLASSES), min_size=len(a), max_size=len(a)))
    k = cohen_kappa(a, b)
    assert k == cohen_kappa(b, a)
    if k is not None:
        assert -1.0 - 1e-9 <= k <= 1.0 + 1e-9
    same = cohen_kappa(a, a)
    assert same == (None if len(set(a)) == 1 else pytest.approx(1.0))


@given(labels, st.data())
def test_agreement_counts_every_pair_once(a: list[str], data: st.DataObject) -> None:
    b = data.draw(st.lists(st.sampled_from(CLASSES), min_size=len(a), max_size=len(a)))
    agreement = Agreement.of(a, b)
    assert sum(sum(row.values()) for row in agreement.confusion.values()) == len(a)
    assert agreement.agreement == pytest.approx(sum(x == y for x, y in zip(a, b, strict=True)) / len(a))
    assert agreement.ci_low is not None
    assert agreement.ci_high is not None
    assert agreement.ci_low <= agreement.agreement <= agreement.ci_high


def test_kappa_of_a_known_table() -> None:
    # 50 pairs: rater A says candidate 25 times; they agree on 20 + 15; kappa = (0.7 - 0.5) / 0.5
    a = ["candidate"] * 20 + ["candidate"] * 5 + ["baseline"] * 10 + ["baseline"] * 15
    b = ["candidate"] * 20 + ["baseline"] * 5 + ["candidate"] * 10 + ["baseline"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> de.RunResult:
    out = tmp_path_factory.mktemp("calibrate") / "run"
    return de.run(demo_config(out, n=12, latency_ms=0.0), conversations=demo_conversations())


def test_calibrate_against_labels_from_csv_and_parquet(run: de.RunResult, tmp_path: Path) -> None:
    verdicts = run.table("verdicts").select(["pair_id", "outcome", "stratum"]).to_pylist()
    decided = [v for v in verdicts if v["outcome"] != "error"]
    as_label = {v["pair_id"]: "tie" if v["outcome"] == "equivalent" else v["outcome"] for v in decided}
    flip = {"candidate": "baseline", "baseline": "tie", "tie": "candidate"}
    rows = [(p, label if k % 4 else flip[label]) for k, (p, label) in enumerate(as_label.items())]
    disagree = sum(1 for k in range(len(rows)) if k % 4 == 0)
    path = tmp_path / "labels.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pair_id", "label"])
        w.writerows(rows)
        w.writerow(["no-such-pair#0", "tie"])
        w.writerow([rows[0][0], "A is better"])
    cal = de.calibrate(run, path)
    assert cal.overall.pairs == len(rows)
    assert cal.overall.agreement == pytest.approx(1 - disagree / len(rows))
    assert cal.not_in_run == ["no-such-pair#0"]
    assert cal.invalid == [f"{path}, row {len(rows) + 2}, field label: 'A is better' is not one of candidate, "
                           "baseline, tie, judge_wrong"]  # fmt: skip
    assert set(cal.by_stratum) == {v["stratum"] for v in decided}
    assert sum(a.pairs for a in cal.by_stratum.values()) == len(rows)
    text = str(cal)
    assert "kappa" in text
    assert "label \\ verdict" in text
    assert "not in the run: no-such-pair#0" in text

    parquet = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"pair_id": [p for p, _ in rows], "preferred": [label for _, label in rows]}), parquet)
    assert de.calibrate(run.path, parquet).overall == cal.overall
    assert de.calibrate(run, dict(rows)).overall == cal.overall
    with pytest.raises(de.ConfigError, match="no label column"):
        de.calibrate(run, [{"pair_id": "x", "verdict": "tie"}])


def test_an_aa_run_is_the_noise_floor_printed_beside_the_win_rate(run: de.RunResult, tmp_path: Path) -> None:
    base = demo_config(tmp_path / "aa", n=12, latency_ms=0.0)
    aa = de.run(base.model_copy(update={"candidate": base.baseline}), conversations=demo_conversations())
    assert aa.manifest.candidate_model == aa.manifest.baseline_model
    assert aa.connect().execute("SELECT DISTINCT variant FROM replays ORDER BY 1").fetchall() == [
        ("baseline",),
        ("candidate",),
        ("recorded",),
    ]
    report = render_report(run, noise_floor=aa.path)
    floor = aa.win_rate(over="all")
    assert f"A/A noise floor {floor.estimate:6.1%}" in report
    assert f"an A/A run, {aa.path}" in report
    assert "A/A" not in render_report(run)
    # Configured on the run itself, the report finds it without being told.
    configured = demo_config(tmp_path / "with-floor", n=12, latency_ms=0.0).model_copy(update={"noise_floor": aa.path})
    result = de.run(configured, conversations=demo_conversations())
    assert result.manifest.noise_floor == str(aa.path)
    assert f"A/A noise floor {floor.estimate:6.1%}" in render_report(result)
