"""Is the verdict right? Whole simulated runs with a known truth, and the interval's coverage over a grid.

Three parts, each printing one table:

1. **Decisions** (``--part runs``). A population of conversations (the bundled tau-bench export, each conversation
   replicated with its own random behaviour so the population is large) is replayed in full by ``de.run`` on
   ``simulated:`` models and judges, once per scenario: that census is the truth. Each scenario's sample size is
   what ``de.plan`` asks for (80% power) from a pilot ``de.run`` of 60 conversations. Then, for many sample seeds,
   the sample ``de.run`` would draw (the library's own sampler, weights and turn caps) is decided by
   ``de.decide`` on those conversations' census pairs; the simulated models answer a request the same way in
   every run, so this is the decision ``de.run`` on that sample gives, which a few real ``de.run`` calls per
   scenario check (``de.run check``). Scenarios: ``no-op`` (identical outputs), ``A/A`` (the same model with
   independent sampling noise; the judge labels some losses critical), ``worse`` (a candidate truly worse by at
   least twice the margin), ``one stratum`` (a rendering bug that breaks one kind of task), ``errors`` (a candidate
   with a smaller context window, whose longest turns fail), ``weights`` (Neyman allocation and a cap of 2 turns
   per conversation, on the candidate with the rendering bug). Printed per scenario and sample size: the share of
   runs APPROVED / PARTIAL / REJECTED, how often the interval covers the census truth, and what else the scenario
   shows (the stratum flagged; the bias an unweighted estimate, or one leaving errors out, would have had).

2. **Coverage grid** (``--part grid``): simulated verdict tables (:func:`delta_eval.testing.verdicts`) with a known
   win rate, through ``de.metrics.win_rate`` and ``de.metrics.by_stratum``: the share of 95% intervals that cover
   the truth, for intra-conversation correlation 0 / 0.3 / 0.5 / 0.8, 20 / 50 / 200 / 1000 conversations and true
   win rates 0.1 / 0.3 / 0.5, over all pairs, over judged pairs and per stratum (four strata of 40/30/20/10% of the
   conversations), and for small strata of 4-25 conversations.

3. **Family-wise error** (``--part fwer``): 5 to 20 strata all exactly at the margin (the least favourable null);
   the share of runs where some stratum is flagged worse after the Holm adjustment.

4. **Early stopping** (``--part stop``): conversations fed one by one to the run's ``EarlyStop`` (the anytime-valid
   test ``stop_early`` uses), against the fixed sample ``de.plan`` asks for at 80% power: the median number of
   conversations before the test settles, how often it settles the right way, and how often it says "not worse"
   for a candidate exactly at the margin (its error rate, at most 2.5%).

    python benchmarks/decision_calibration.py                    # everything (about 20 minutes on 2 cores)
    python benchmarks/decision_calibration.py --part grid --grid-reps 200
    python benchmarks/decision_calibration.py --part runs --reps 100 --copies 3
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import delta_eval as de
import delta_eval.metrics.planning
from delta_eval.demo import airline_task_type, demo_conversations
from delta_eval.metrics import by_stratum, win_rate
from delta_eval.metrics.frames import rows_of
from delta_eval.replay.points import pair_weight, replay_points, select_turns
from delta_eval.replay.render import RenderInput
from delta_eval.sampling.plan import sample_source
from delta_eval.schema import Conversation, Message
from delta_eval.testing.verdicts import simulate_verdicts

MARGIN = 0.02
#: The simulated agent's sampling noise: rewording, and now and then a skipped or changed tool call.
NOISE = {"reword_rate": 0.3, "skip_tool_rate": 0.03, "change_args_rate": 0.03}
STRATA = de.Stratified(by=["task_type"], derived={"task_type": airline_task_type})


# -- 1. decisions of whole simulated runs ----------------------------------------------------------------------


def population(copies: int) -> list[Conversation]:
    """The bundled conversations, each replicated ``copies`` times under its own id. A replica's system prompt names
    it, so the simulated models (which draw from the request) behave independently on each replica."""
    out = []
    for conv in demo_conversations():
        for k in range(copies):
            messages = tuple(
                m.model_copy(update={"content": f"{m.content}\n\n(replica {k})"}) if m.role == "system" else m
                for m in conv.messages
            )
            out.append(conv.model_copy(update={"id": f"{conv.id}~{k}", "messages": messages}))
    return out


def _task_type(metadata: dict[str, Any]) -> str:
    return airline_task_type(Conversation(id="x", messages=(), metadata=metadata))


def broken_rendering(data: RenderInput) -> list[Message]:
    """A rendering bug that only hits cancellations: a quarter of their turns lose the last user message's final
    character (the simulated model then finds no recording to follow and answers vaguely)."""
    messages = list(data.messages)
    key = hashlib.sha256(f"{data.conversation_id}#{data.turn_index}".encode()).digest()[0]
    if _task_type(data.metadata) == "cancel_reservation" and key % 4 == 0:
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role == "user" and messages[i].content:
                messages[i] = messages[i].model_copy(update={"content": messages[i].content[:-1]})
                break
    return messages


def agent(seed: int, **extra: Any) -> de.Variant:
    return de.Variant(model="simulated:agent", provider_options={**NOISE, "seed": seed, **extra})


SCENARIOS: dict[str, dict[str, Any]] = {
    "no-op": {"baseline": agent(1), "candidate": agent(1)},
    "A/A": {"baseline": agent(1), "candidate": agent(2)},
    "worse": {"baseline": agent(1), "candidate": agent(2, skip_tool_rate=0.15, change_args_rate=0.07)},
    "one stratum": {"baseline": agent(1), "candidate": agent(2).model_copy(update={"render": broken_rendering})},
    # A model with a smaller context window: the longest turns fail, every time (not retryable).
    "errors": {"baseline": agent(1), "candidate": agent(2, context_window=4300)},
    # Neyman allocation puts more draws where outcomes vary (the broken cancellations), and a cap of 2 turns leaves
    # most turns of long conversations out: the sample is far from self-weighting.
    "weights": {
        "baseline": agent(1),
        "candidate": agent(2).model_copy(update={"render": broken_rendering}),
        "neyman": True,
        "max_turns": 2,
    },
}


def judges() -> de.Judges:
    return de.Judges(equivalence=de.EquivalenceJudge(model="simulated:judge-small"),
                     judge=de.PairwiseJudge(model="simulated:judge"))  # fmt: skip


def config(spec: dict[str, Any], out: Path, cache: Path, sample: de.Stratified | None) -> de.RunConfig:
    return de.RunConfig(
        baseline=spec["baseline"],
        candidate=spec["candidate"],
        judges=judges(),
        out=out,
        cache=cache,
        sample=sample,
        seed=7,
        max_turns_per_conversation=spec.get("max_turns"),
        concurrency=32,
        decision=de.DecisionRule(margin=MARGIN),
    )


class Census:
    """A scenario's population replayed in full: its verdicts and replays by conversation, and the truth."""

    def __init__(self, name: str, convs: list[Conversation], work: Path) -> None:
        self.name, self.spec, self.convs, self.work = name, SCENARIOS[name], convs, work
        self.cache = work / "cache.sqlite"
        full = de.run(config(self.spec, work / "census", self.cache, None), conversations=convs)
        self.verdicts = rows_of(full.table("verdicts"))
        self.replays = rows_of(full.table("replays"))
        self.by_conv: dict[str, list[dict[str, Any]]] = {}
        for v in self.verdicts:
            self.by_conv.setdefault(v["conversation_id"], []).append(v)
        self.replays_by_conv: dict[str, list[dict[str, Any]]] = {}
        for r in self.replays:
            self.replays_by_conv.setdefault(r["conversation_id"], []).append(r)
        # The truth: the rule's estimand over every turn of every conversation (a census needs no weights).
        self.truth = win_rate(self.verdicts, weighted=False).estimate
        self.points = {c.id: list(replay_points(c)) for c in convs}

    def spec_for(self, n: int, seed: int, stratum_sd: dict[str, float] | None) -> de.Stratified:
        return STRATA.model_copy(update={"n": n, "seed": seed, "stratum_sd": stratum_sd or {}})

    def sample(self, spec: de.Stratified) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The verdicts and replays ``de.run`` would write for the sample ``spec`` draws."""
        drawn = sample_source(self.convs, spec).sample
        cap = self.spec.get("max_turns")
        verdicts: list[dict[str, Any]] = []
        replays: list[dict[str, Any]] = []
        for position, (stratum, weight) in drawn.selected.items():
            conv = self.convs[position]
            every = self.points[conv.id]
            kept = select_turns(every, cap, 7)
            w = pair_weight(weight, len(every), len(kept))
            ids = {p.pair_id for p in kept}
            verdicts += [{**v, "stratum": stratum, "weight": w} for v in self.by_conv.get(conv.id, [])
                         if v["pair_id"] in ids]  # fmt: skip
            replays += [r for r in self.replays_by_conv.get(conv.id, []) if r["pair_id"] in ids]
        return verdicts, replays


def decisions(census: Census, reps: int, sizes: Sequence[int], real_checks: int) -> list[dict[str, Any]]:
    """Per sample size: the share of each outcome over ``reps`` sample seeds, and the interval's coverage."""
    rule = de.DecisionRule(margin=MARGIN)
    out = []
    stratum_sd = None
    if census.spec.get("neyman"):
        pilot = de.run(config(census.spec, census.work / "pilot-neyman", census.cache,
                              census.spec_for(60, 99, None)), conversations=census.convs)  # fmt: skip
        stratum_sd = de.plan(pilot).stratum_sd
    for n in sizes:
        outcomes: Counter[str] = Counter()
        covered = 0
        notes: list[float] = []
        for seed in range(1, reps + 1):
            verdicts, replays = census.sample(census.spec_for(n, seed, stratum_sd))
            d = de.decide(verdicts, replays, rule)
            outcomes[d.outcome] += 1
            w = d.non_inferiority.win_rate
            covered += w.ci_low <= census.truth <= w.ci_high
            notes.append(NOTES[census.name][1](d, verdicts, census.truth) if census.name in NOTES else 0.0)
            if seed <= real_checks:
                real = de.run(config(census.spec, census.work / f"check-{n}-{seed}", census.cache,
                                     census.spec_for(n, seed, stratum_sd)), conversations=census.convs)  # fmt: skip
                again = real.decision(rule)
                same = again.outcome == d.outcome and math.isclose(
                    again.non_inferiority.win_rate.estimate or 0, w.estimate or 0, abs_tol=1e-9
                )
                if not same:
                    raise AssertionError(f"{census.name}: de.run on sample seed {seed} decided {again.outcome} "
                                         f"({again.non_inferiority.win_rate.estimate}), the census sample "
                                         f"{d.outcome} ({w.estimate})")  # fmt: skip
        out.append({"n": n, "reps": reps, **{k: outcomes[k] / reps for k in ("APPROVED", "PARTIAL", "REJECTED")},
                    "coverage": covered / reps, "note": sum(notes) / len(notes)})  # fmt: skip
    return out


def _flagged(d: de.Decision, verdicts: list[dict[str, Any]], truth: float) -> float:
    return float(any(s.worse and "cancel" in s.stratum for s in d.strata))


def _unweighted_bias(d: de.Decision, verdicts: list[dict[str, Any]], truth: float) -> float:
    return (win_rate(verdicts, weighted=False).estimate or 0.0) - truth


def _excluded_bias(d: de.Decision, verdicts: list[dict[str, Any]], truth: float) -> float:
    return (win_rate(verdicts, errors="exclude").estimate or 0.0) - truth


#: What else each scenario shows, per sample size: a label and the mean of a figure over the runs.
NOTES: dict[str, tuple[str, Callable[[de.Decision, list[dict[str, Any]], float], float]]] = {
    "one stratum": ("cancellations flagged worse in {:.0%} of runs", _flagged),
    "weights": ("an unweighted estimate would be off by {:+.3f}", _unweighted_bias),
    "errors": ("leaving errors out would be off by {:+.3f}", _excluded_bias),
}


def part_runs(reps: int, copies: int, real_checks: int, only: Sequence[str] | None) -> None:
    convs = population(copies)
    print(f"1. decisions of whole simulated runs: {len(convs)} conversations ({copies} replicas of the tau-bench "
          f"export), margin {MARGIN * 100:g} points, {reps} sample seeds per cell; n = de.plan's sample for 80% "
          "power")  # fmt: skip
    print(f"   {'scenario':12s} {'truth':>7s} {'n':>5s}  {'APPROVED':>8s} {'PARTIAL':>8s} {'REJECTED':>8s} "
          f"{'coverage':>8s}   de.run check")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            if only and name not in only:
                continue
            started = time.perf_counter()
            work = Path(tmp) / name.replace("/", "").replace(" ", "-")
            census = Census(name, convs, work)
            pilot = de.run(config(census.spec, work / "pilot", census.cache, census.spec_for(60, 99, None)),
                           conversations=convs)  # fmt: skip
            planned = min(de.plan(pilot).conversations, len(convs))
            sizes = sorted({max(20, planned // 2), planned, min(len(convs), planned * 2)})
            for row in decisions(census, reps, sizes, real_checks):
                mark = "<- plan" if row["n"] == planned else "       "
                checked = f"{real_checks} identical" if real_checks else "-"
                note = NOTES[name][0].format(row["note"]) if name in NOTES else ""
                print(f"   {name:12s} {census.truth:7.3f} {row['n']:5d}  {row['APPROVED']:8.1%} {row['PARTIAL']:8.1%} "
                      f"{row['REJECTED']:8.1%} {row['coverage']:8.1%}   {checked} {mark}  {note}")  # fmt: skip
            print(f"   {'':12s} ({time.perf_counter() - started:.0f} s)")
            sys.stdout.flush()
    print("   targets at the plan's n: no-op and A/A APPROVED >= 80% and REJECTED <= 2.5%; worse APPROVED <= 2.5%")


# -- 2. coverage grid -------------------------------------------------------------------------------------------

RHOS = (0.0, 0.3, 0.5, 0.8)
SIZES = (20, 50, 200, 1000)
RATES = (0.1, 0.3, 0.5)
#: Equivalent and tie shares that leave a win rate of 10% reachable over all pairs, and typical over judged pairs.
SHAPES = {"all": {"equivalent": 0.15, "ties": 0.05}, "judged": {"equivalent": 0.5, "ties": 0.1}}


def covers(lo: float, hi: float, truth: float) -> bool:
    return lo - 1e-12 <= truth <= hi + 1e-12


def coverage_cell(scope: str, rho: float, n: int, p: float, reps: int) -> float:
    hits = total = 0
    over = "judged" if scope == "judged" else "all"
    for seed in range(reps):
        seed_key = int(hashlib.sha256(f"{scope}:{rho}:{n}:{p}:{seed}".encode()).hexdigest()[:8], 16)
        if scope == "stratum":
            sizes = {h: max(2, round(n * share)) for h, share in zip("abcd", (0.4, 0.3, 0.2, 0.1), strict=True)}
            rows, truth = simulate_verdicts(sizes, win_rate=p, rho=rho, seed=seed_key, **SHAPES["all"])
            for s in by_stratum(rows, MARGIN):
                hits += covers(s.win_rate.ci_low, s.win_rate.ci_high, truth.by_stratum[s.stratum])
                total += 1
        else:
            rows, truth = simulate_verdicts(n, win_rate=p, rho=rho, over=over, seed=seed_key, **SHAPES[over])
            w = win_rate(rows, over=over)
            hits += covers(w.ci_low, w.ci_high, truth.all if over == "all" else truth.judged)
            total += 1
    return hits / total


def small_strata_cell(rho: float, n: int, p: float, reps: int) -> float:
    hits = 0
    for seed in range(reps):
        rows, truth = simulate_verdicts({"s": n}, win_rate=p, rho=rho, seed=seed, **SHAPES["all"])
        [s] = by_stratum(rows, MARGIN)
        hits += covers(s.win_rate.ci_low, s.win_rate.ci_high, truth.by_stratum["s"])
    return hits / reps


def part_grid(reps: int) -> None:
    mc = 1.96 * math.sqrt(0.95 * 0.05 / reps)
    print(f"2. coverage of 95% intervals ({reps} simulated runs per cell; Monte Carlo error about ±{mc:.1%}); "
          "target 93-97%")  # fmt: skip
    header = "   ".join(f"p={p:.1f}" for p in RATES)
    cells: list[float] = []
    for scope in ("all", "judged", "stratum"):
        label = {"all": "all pairs", "judged": "judged pairs", "stratum": "per stratum (4 strata, 40/30/20/10%)"}
        print(f"   {label[scope]}")
        print(f"     {'rho':>4s} {'conversations':>13s}   {header}")
        for rho in RHOS:
            for n in SIZES:
                row = [coverage_cell(scope, rho, n, p, reps) for p in RATES]
                cells += row
                print(f"     {rho:4.1f} {n:13d}   " + "   ".join(f"{c:6.1%}" for c in row))
            sys.stdout.flush()
    print("   small strata (one stratum alone)")
    print(f"     {'rho':>4s} {'conversations':>13s}   {header}")
    for rho in RHOS:
        for n in (4, 8, 12, 25):
            row = [small_strata_cell(rho, n, p, reps) for p in RATES]
            print(f"     {rho:4.1f} {n:13d}   " + "   ".join(f"{c:6.1%}" for c in row))
    inside = sum(0.93 <= c <= 0.97 for c in cells)
    print(f"   grid cells within 93-97%: {inside} of {len(cells)}; lowest {min(cells):.1%}, highest {max(cells):.1%}")


# -- 3. family-wise error ---------------------------------------------------------------------------------------


def part_fwer(reps: int) -> None:
    print(f"3. family-wise error of per-stratum 'worse' flags (Holm), every stratum at the margin "
          f"({0.5 - MARGIN:.0%}), rho 0.5, {reps} runs per cell; target <= 5%")  # fmt: skip
    print(f"     {'strata':>6s} {'conversations each':>18s}   {'runs with a false flag':>22s}")
    for k in (5, 10, 20):
        for n in (10, 40):
            flagged = 0
            for seed in range(reps):
                sizes = {f"s{h:02d}": n for h in range(k)}
                rows, _ = simulate_verdicts(sizes, win_rate=0.5 - MARGIN, rho=0.5, seed=seed, **SHAPES["all"])
                flagged += any(s.worse for s in by_stratum(rows, MARGIN))
            print(f"     {k:6d} {n:18d}   {flagged / reps:22.1%}")
        sys.stdout.flush()


# -- 4. early stopping -----------------------------------------------------------------------------------------


def _stopping_run(p: float, seed: int, limit: int) -> tuple[str | None, int]:
    from delta_eval.stopping import EarlyStop

    rows, _ = simulate_verdicts(limit, win_rate=p, rho=0.3, seed=seed, turns=(1, 20), **SHAPES["all"])
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_conv.setdefault(r["conversation_id"], []).append(r)
    planned = {c: (len(own), 1.0) for c, own in by_conv.items()}
    stop = EarlyStop(MARGIN, 0.05, planned, de.Estimand())
    for c, own in by_conv.items():
        for r in own:
            stop.add(c, r)
        if stop.settled:
            break
    return stop.test.verdict, stop.test.settled_at or limit


def part_stop(reps: int) -> None:
    print(f"4. early stopping against the fixed sample de.plan asks for (80% power), margin {MARGIN * 100:g} points, "
          f"conversations of 1-20 turns, rho 0.3, {reps} runs per row")  # fmt: skip
    pilot, _ = simulate_verdicts(200, win_rate=0.5, rho=0.3, seed=12345, turns=(1, 20), **SHAPES["all"])
    fixed = de.metrics.planning.sample_size(pilot, margin=MARGIN).conversations
    print(f"     fixed design: {fixed} conversations")
    print(f"     {'true win rate':>13s}   {'median conversations':>20s}   {'not worse':>9s}   {'worse':>6s}   "
          f"{'unsettled':>9s}")  # fmt: skip
    for p in (0.5, 0.5 - MARGIN, 0.5 - 2 * MARGIN):
        runs = [_stopping_run(p, seed, limit=6 * fixed) for seed in range(reps)]
        n = sorted(k for _, k in runs)[len(runs) // 2]
        said = Counter(v for v, _ in runs)
        print(f"     {p:13.2f}   {n:20d}   {said['not worse'] / reps:9.1%}   {said['worse'] / reps:6.1%}   "
              f"{said[None] / reps:9.1%}")  # fmt: skip
    print("   targets: at the margin, 'not worse' at most 2.5%; median settling near the fixed design's size")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("runs", "grid", "fwer", "stop", "all"), default="all")
    parser.add_argument("--reps", type=int, default=200, help="sample seeds per scenario and size (part 1)")
    parser.add_argument("--copies", type=int, default=5, help="replicas of each tau-bench conversation (part 1)")
    parser.add_argument("--real-checks", type=int, default=2, help="real de.run calls per cell checked (part 1)")
    parser.add_argument("--scenario", action="append", help="only this scenario (part 1; repeatable)")
    parser.add_argument("--grid-reps", type=int, default=400, help="simulated runs per cell (parts 2 and 3)")
    args = parser.parse_args(argv)
    parts: dict[str, Callable[[], None]] = {
        "runs": lambda: part_runs(args.reps, args.copies, args.real_checks, args.scenario),
        "grid": lambda: part_grid(args.grid_reps),
        "fwer": lambda: part_fwer(args.grid_reps),
        "stop": lambda: part_stop(args.grid_reps),
    }
    for name, fn in parts.items():
        if args.part in (name, "all"):
            started = time.perf_counter()
            fn()
            print(f"   ({time.perf_counter() - started:.0f} s)\n")


if __name__ == "__main__":
    main()
