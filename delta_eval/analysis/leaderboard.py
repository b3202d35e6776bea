"""The leaderboard of several candidates against one baseline: per candidate its decision (under the run's own
rule), win rate with its interval, gates that failed, cost per conversation, latency p50/p95, time to first token,
error and no-decision rates; which candidates are on the Pareto front of quality against cost and against latency;
and, when a team wants one number, a composite score beside (never instead of) the decision.

The candidates come from a run of several (``candidates=[...]``), or from several runs of one candidate each
against the same baseline, or both: each entry is one (run folder, candidate).

The front: a candidate is on the quality/cost front when no other candidate has a win rate at least as high at a
cost at most as low, one of the two strictly (the same for latency, on the p50). A candidate whose cost is unknown
(no prices) is on no cost front. The composite score weighs each criterion after scaling it to [0, 1] across the
candidates (the best 1, the worst 0): quality is the win rate, latency the p50, cost the cost per conversation; a
criterion unknown for some candidate is left out of every score, and the leaderboard says so.

Example::

    board = leaderboard("runs/fleet", weights=ScoreWeights(quality=0.5, latency=0.2, cost=0.3))
    print(board)                  # the table, the fronts, the scores
    board.plot()                  # win rate against cost and against latency, the fronts drawn (matplotlib)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from delta_eval.metrics.score import ScoreWeights
from delta_eval.result import RunResult

__all__ = ["Entry", "Leaderboard", "ScoreWeights", "leaderboard", "pareto_front"]


@dataclass(frozen=True)
class Entry:
    """One candidate's line of the leaderboard (``None``: unknown, e.g. cost without prices)."""

    run: str
    candidate: str
    model: str
    outcome: str
    decided_by: str
    win_rate: float | None
    ci_low: float | None
    ci_high: float | None
    pairs: int
    gates_failed: list[str]
    cost_per_conversation: float | None
    baseline_cost_per_conversation: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    ttft_p50_ms: float | None
    error_rate: float | None
    no_decision_rate: float | None
    screened_out: str | None = None
    front_cost: bool = False
    front_latency: bool = False
    score: float | None = None

    @property
    def fronts(self) -> list[str]:
        """The Pareto fronts the candidate is on: ``cost``, ``latency``, both or none."""
        return [k for k, on in (("cost", self.front_cost), ("latency", self.front_latency)) if on]

    @property
    def rate(self) -> str:
        """The win rate with its interval, as the leaderboard prints it (``n/a`` when unknown)."""
        if self.win_rate is None or self.ci_low is None or self.ci_high is None:
            return "n/a"
        return f"{self.win_rate:.3f} [{self.ci_low:.3f}, {self.ci_high:.3f}]"


@dataclass
class Leaderboard:
    """Every candidate's :class:`Entry`, best decision first (APPROVED, PARTIAL, REJECTED, then those screening
    left out), then by win rate."""

    baseline: str
    entries: list[Entry]
    weights: ScoreWeights | None = None
    notes: list[str] = field(default_factory=list)

    def to_dicts(self) -> list[dict[str, Any]]:
        """JSON-ready rows, one per candidate."""
        return [asdict(e) for e in self.entries]

    def front(self, against: str = "cost") -> list[Entry]:
        """The candidates on the Pareto front of quality against ``cost`` or ``latency``."""
        return [e for e in self.entries if (e.front_cost if against == "cost" else e.front_latency)]

    def __str__(self) -> str:
        head = (f"{'candidate':<20} {'model':<24} {'decision':<9} {'win rate [95% CI]':<22} {'$/conv':>9} "
                f"{'p50 ms':>8} {'p95 ms':>8} {'ttft':>7} {'errors':>7} {'front':<13}"
                + (" score" if self.weights else ""))  # fmt: skip
        lines = [f"leaderboard: {len(self.entries)} candidates against {self.baseline}", head]
        for e in self.entries:
            rate, front = e.rate, ",".join(e.fronts) or "-"
            cost = _num(e.cost_per_conversation, 4)
            lines.append(
                f"{e.candidate[:20]:<20} {e.model[:24]:<24} {e.outcome:<9} {rate:<22} {cost:>9} "
                f"{_num(e.latency_p50_ms, 0):>8} {_num(e.latency_p95_ms, 0):>8} {_num(e.ttft_p50_ms, 0):>7} "
                f"{_pct(e.error_rate):>7} {front:<13}" + (f" {_num(e.score, 3)}" if self.weights else "")
            )
            if e.screened_out:
                lines.append(f"{'':<20}   screened out: {e.screened_out}")
            elif e.gates_failed:
                lines.append(f"{'':<20}   gates failed: {'; '.join(e.gates_failed)}")
        if self.weights is not None:
            w = self.weights
            lines.append(f"score: quality {w.quality:g}, latency {w.latency:g}, cost {w.cost:g} (each scaled to [0, 1] "
                         "across the candidates); the decision, not the score, gates a merge")  # fmt: skip
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def plot(self, axes: Any = None) -> Any:
        """Win rate (with its interval) against cost per conversation and against latency p50, one point per
        candidate, the Pareto fronts drawn; returns the matplotlib figure."""
        import matplotlib.pyplot as plt

        if axes is None:
            fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        else:
            fig = axes[0].figure
        for ax, attr, label, flag in ((axes[0], "cost_per_conversation", "cost per conversation (USD)", "front_cost"),
                                      (axes[1], "latency_p50_ms", "latency p50 (ms)", "front_latency")):  # fmt: skip
            known = [e for e in self.entries if getattr(e, attr) is not None and e.win_rate is not None]
            for e in known:
                assert e.win_rate is not None and e.ci_low is not None and e.ci_high is not None
                ax.errorbar(getattr(e, attr), e.win_rate, yerr=[[e.win_rate - e.ci_low], [e.ci_high - e.win_rate]],
                            fmt="o", capsize=3, color="tab:blue" if getattr(e, flag) else "grey")  # fmt: skip
                ax.annotate(e.candidate, (getattr(e, attr), e.win_rate), textcoords="offset points", xytext=(4, 4))
            front = sorted((e for e in known if getattr(e, flag)), key=lambda e: getattr(e, attr))
            if len(front) > 1:
                ax.plot([getattr(e, attr) for e in front], [e.win_rate for e in front], "--", color="tab:blue")
            if not known:
                ax.text(0.5, 0.5, "unknown", ha="center", transform=ax.transAxes)
            ax.axhline(0.5, color="grey", linewidth=0.8)
            ax.set_xlabel(label)
            ax.set_ylabel("win rate against the baseline")
        fig.tight_layout()
        return fig


def _num(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Which points (quality, cost) are on the front: higher quality and lower cost are better; a point with an
    unknown coordinate is on no front.

    Example:
        >>> pareto_front([(0.55, 1.0), (0.50, 0.5), (0.50, 0.8), (0.45, 2.0), (None, 0.1)])
        [True, True, False, False, False]
    """
    out = []
    for q, c in points:
        if q is None or c is None:
            out.append(False)
            continue
        dominated = any(
            oq is not None and oc is not None and oq >= q and oc <= c and (oq > q or oc < c) for oq, oc in points
        )
        out.append(not dominated)
    return out


def _scaled(values: list[float], higher_is_better: bool) -> list[float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return [1.0] * len(values)
    return [(v - lo) / (hi - lo) if higher_is_better else (hi - v) / (hi - lo) for v in values]


def _entry(result: RunResult, rule: Any) -> Entry:
    d = result.decision(rule)
    m = result.manifest
    screened = m.screened_out.get(result.candidate or "candidate")
    cand, base = d.sides.get("candidate"), d.sides.get("baseline")
    ni = d.non_inferiority
    ttft = [row[0] for row in result.connect().execute(
        "SELECT ttft_ms FROM replays WHERE side = 'candidate' AND ttft_ms IS NOT NULL").fetchall()]  # fmt: skip
    return Entry(
        run=str(result.path),
        candidate=result.candidate or (m.config.get("candidate") or {}).get("name") or "candidate",
        model=m.candidate_model,
        outcome="SCREENED" if screened else d.outcome,  # its decision rests on the screening's few pairs only
        decided_by=f"screened out: {screened}" if screened else d.decided_by,
        screened_out=screened,
        win_rate=ni.win_rate.estimate,
        ci_low=ni.win_rate.ci_low,
        ci_high=ni.win_rate.ci_high,
        pairs=result.counts.pairs,
        gates_failed=[str(g) for g in d.gates if g.passed is False],
        cost_per_conversation=cand.cost_per_conversation if cand else None,
        baseline_cost_per_conversation=base.cost_per_conversation if base else None,
        latency_p50_ms=cand.latency_p50_ms if cand else None,
        latency_p95_ms=cand.latency_p95_ms if cand else None,
        ttft_p50_ms=sorted(ttft)[len(ttft) // 2] if ttft else None,
        error_rate=cand.error_rate.value if cand else None,
        no_decision_rate=cand.no_decision_rate.value if cand else None,
    )


def leaderboard(
    runs: str | Path | RunResult | Sequence[str | Path | RunResult],
    *,
    rule: Any = None,
    weights: ScoreWeights | dict[str, float] | None = None,
) -> Leaderboard:
    """The leaderboard of every candidate of ``runs`` (one run folder of several candidates, or several folders;
    see the module docstring). ``rule`` (a :class:`~delta_eval.metrics.decision.DecisionRule`) decides each
    candidate; default: each run's own. ``weights`` adds a composite score (:class:`ScoreWeights`); default: the
    ``score`` the (first) run was configured with, if any."""
    given = [runs] if isinstance(runs, str | Path | RunResult) else list(runs)
    results: list[RunResult] = []
    for run in given:
        result = run if isinstance(run, RunResult) else RunResult(run)
        results += [result.of(name) for name in result.candidates] if result.candidates else [result]
    if not results:
        raise ValueError("leaderboard: no run given")
    baselines = sorted({r.manifest.baseline for r in results})
    notes = [f"the runs have different baselines: {'; '.join(baselines)}"] if len(baselines) > 1 else []
    entries = [_entry(r, rule) for r in results]
    for attr, flag in (("cost_per_conversation", "front_cost"), ("latency_p50_ms", "front_latency")):
        on = pareto_front([(e.win_rate, getattr(e, attr)) for e in entries])
        entries = [_with(e, **{flag: f}) for e, f in zip(entries, on, strict=True)]
    if weights is None:  # the score the (first) run was configured with, if any
        weights = results[0].manifest.config.get("score")
    w = ScoreWeights.model_validate(weights) if isinstance(weights, dict) else weights
    if w is not None:
        entries, said = _scores(entries, w)
        notes += said
    order = {"APPROVED": 0, "PARTIAL": 1, "REJECTED": 2, "SCREENED": 3}
    entries.sort(key=lambda e: (order.get(e.outcome, 3), -(e.win_rate if e.win_rate is not None else -math.inf)))
    return Leaderboard(baseline=baselines[0], entries=entries, weights=w, notes=notes)


def _with(entry: Entry, **changes: Any) -> Entry:
    return Entry(**{**asdict(entry), **changes})


def _scores(entries: list[Entry], w: ScoreWeights) -> tuple[list[Entry], list[str]]:
    """Each entry's composite score, and notes on the criteria left out."""
    parts: list[tuple[float, list[float]]] = []
    notes = []
    for name, attr, weight, higher in (("quality", "win_rate", w.quality, True),
                                       ("latency", "latency_p50_ms", w.latency, False),
                                       ("cost", "cost_per_conversation", w.cost, False)):  # fmt: skip
        values = [getattr(e, attr) for e in entries]
        if weight == 0:
            continue
        if any(v is None for v in values):
            notes.append(f"{name} is unknown for some candidate: left out of the score")
            continue
        parts.append((weight, _scaled([float(v) for v in values], higher)))
    total = sum(weight for weight, _ in parts)
    if not parts or total == 0:
        return entries, [*notes, "no criterion of the score is known for every candidate: no score"]
    scores = [sum(weight * scaled[i] for weight, scaled in parts) / total for i in range(len(entries))]
    return [_with(e, score=round(s, 4)) for e, s in zip(entries, scores, strict=True)], notes
