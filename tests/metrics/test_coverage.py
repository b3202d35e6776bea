"""Simulation: intervals that treat the conversation as a cluster cover a known population win rate; per-turn
Wilson does not. Fixed seeds; no timings."""

from __future__ import annotations

import numpy as np
import pytest

from delta_eval.metrics import clustered_mean, design_wilson_interval, t_interval, wilson_interval

SIZES = {"big": 3000, "mid": 800, "small": 200}  # conversations per stratum
MEANS = {"big": 0.45, "mid": 0.6, "small": 0.3}  # strata differ


def population(seed: int) -> tuple[list[tuple[str, str, float, int]], float]:
    """Conversations with a propensity each (Beta, concentration 2: turns of one conversation agree strongly) and
    2-12 turns; a turn is a candidate win with probability 0.8 q, a baseline win 0.8 (1 - q), a tie 0.2."""
    rng = np.random.default_rng(seed)
    pop = []
    for h, n in SIZES.items():
        q = rng.beta(MEANS[h] * 2, (1 - MEANS[h]) * 2, n)
        turns = rng.integers(2, 13, n)
        pop += [(h, f"{h}{c}", float(q[c]), int(turns[c])) for c in range(n)]
    truth = sum(t * (0.8 * q + 0.1) for _, _, q, t in pop) / sum(t for *_, t in pop)
    return pop, truth


Row = tuple[float, str, str, float]


def draw(pop: list[tuple[str, str, float, int]], rng: np.random.Generator, per_stratum: dict[str, int]) -> list[Row]:
    """Conversations drawn without replacement per stratum; (score, conversation, stratum, weight) per turn."""
    rows: list[Row] = []
    for h, n_h in per_stratum.items():
        members = [p for p in pop if p[0] == h]
        for i in rng.choice(len(members), n_h, replace=False):
            _, cid, q, turns = members[i]
            u = rng.random(turns)
            scores = np.where(u < 0.8 * q, 1.0, np.where(u < 0.8, 0.0, 0.5))
            rows += [(float(s), cid, h, SIZES[h] / n_h) for s in scores]
    return rows


@pytest.mark.parametrize(
    ("allocation", "weighted"),
    [({"big": 112, "mid": 30, "small": 8}, False), ({"big": 50, "mid": 50, "small": 50}, True)],
    ids=["proportional-unweighted", "equal-allocation-weighted"],
)
def test_cluster_intervals_cover_where_per_turn_wilson_falls_short(allocation: dict[str, int], weighted: bool) -> None:
    pop, truth = population(seed=1)
    rng = np.random.default_rng(2)
    reps = 300
    covered = {"design-wilson": 0, "t": 0, "per-turn wilson": 0}
    widths: dict[str, list[float]] = {k: [] for k in covered}
    for _ in range(reps):
        rows = draw(pop, rng, allocation)
        values, clusters, strata, weights = (list(col) for col in zip(*rows, strict=True))
        mean = clustered_mean(values, weights=weights if weighted else None, clusters=clusters, strata=strata)
        assert mean.estimate is not None
        for name, (lo, hi) in {
            "design-wilson": design_wilson_interval(mean),
            "t": t_interval(mean),
            "per-turn wilson": wilson_interval(mean.estimate, mean.n),
        }.items():
            covered[name] += lo <= truth <= hi
            widths[name].append(hi - lo)
    coverage = {k: v / reps for k, v in covered.items()}
    median_width = {k: float(np.median(v)) for k, v in widths.items()}
    print(f"coverage {coverage}, median widths {median_width}")
    assert coverage["design-wilson"] >= 0.94
    assert coverage["t"] >= 0.94
    assert coverage["per-turn wilson"] < 0.90  # turns are not independent: the naive interval is too narrow
    assert median_width["per-turn wilson"] < 0.8 * median_width["design-wilson"]
