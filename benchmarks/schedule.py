"""The schedule alone: how long replaying the sample takes at zero CPU, against the ideal, by the order pairs start.

Each side of a pair is one chain of model calls (a tool round, then the next, then the final text), taken by one of
the run's ``2 x concurrency`` replay workers (a worker per side of ``concurrency`` pairs, as the pipeline has them).
With every call taking the same latency and no CPU at all, the run's length is the schedule's alone; the ideal is
``calls x latency / workers``, every worker busy to the end. A long chain started late is the tail: every other
worker idles while it runs. Simulated here on the recorded turns of the bundled tau-bench export, in event time
(no sleeping, no noise), for three orders: the source's, the pipeline's (:func:`delta_eval.pipeline.longest_first`
over its lookahead window), and all pairs sorted at once.

With ``--run``, the pipeline itself replays the sample on ``simulated:`` models of a fixed latency (rule judges),
once in each order (the source's: the loader's lookahead set to 0), each in a child process, alternating, and the
replay phase's length is printed against the ideal of the calls it made. CPU is not zero there: the gap to the
ideal is the schedule's and the library's work together; the two orders are measured in the same run.

    python benchmarks/schedule.py                 # the 200 demo conversations, concurrency 16
    python benchmarks/schedule.py --scale 5       # the export 5 times over
    python benchmarks/schedule.py --run           # and the real pipeline, 100 ms per call, 3 repeats (medians)
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import delta_eval as de
from delta_eval.pipeline import _LOOKAHEAD, _Pair, longest_first
from delta_eval.replay.points import recorded_calls, replay_points

MAX_TOOL_ROUNDS = 5


def pairs(scale: int, conversations: int) -> list[_Pair]:
    """Every replay point of the first ``conversations`` of the demo export (``scale`` times over), in source
    order."""
    every, _ = de.demo.demo_conversations().load()
    return [_Pair(p, "all", 1.0) for _ in range(scale) for c in every[:conversations] for p in replay_points(c)]


def latencies(pair: _Pair, side: str, sigma: float) -> float:
    """The length of one side's chain, in median latencies: each call log-normal with that median and ``sigma``, as
    the ``simulated:`` model draws them, seeded by the pair and side (every order sees the same calls)."""
    rng = random.Random(f"{pair.point.pair_id}:{side}")
    calls = recorded_calls(pair.point.recorded, MAX_TOOL_ROUNDS)
    return sum(rng.lognormvariate(0.0, sigma) for _ in range(calls))


def makespan(order: Sequence[_Pair], workers: int, sigma: float) -> float:
    """When the last chain ends, in median latencies: each side of each pair, in ``order``, goes to the first free
    worker, as the pipeline's replay workers take them off one stream."""
    free = [0.0] * workers
    end = 0.0
    for pair in order:
        for side in ("baseline", "candidate"):
            start = heapq.heappop(free)
            done = start + latencies(pair, side, sigma)
            heapq.heappush(free, done)
            end = max(end, done)
    return end


def windowed(items: list[_Pair], window: int) -> list[_Pair]:
    """The pipeline's order: each window of ``window`` pairs, longest first."""
    out: list[_Pair] = []
    for k in range(0, len(items), window):
        out += longest_first(items[k : k + window], MAX_TOOL_ROUNDS)
    return out


def measure(scale: int, concurrency: int, conversations: int = 200, sigma: float = 0.5) -> dict[str, float]:
    items = pairs(scale, conversations)
    workers = 2 * concurrency
    calls = 2 * sum(recorded_calls(p.point.recorded, MAX_TOOL_ROUNDS) for p in items)
    ideal = sum(latencies(p, side, sigma) for p in items for side in ("baseline", "candidate")) / workers
    orders: dict[str, Callable[[], list[_Pair]]] = {
        "source order": lambda: items,
        "longest first (pipeline)": lambda: windowed(items, _LOOKAHEAD * concurrency),
        "longest first (all at once)": lambda: longest_first(items, MAX_TOOL_ROUNDS),
    }
    return {
        "pairs": len(items),
        "calls": calls,
        **{name: makespan(f(), workers, sigma) / ideal for name, f in orders.items()},
    }


def run_once(order: str, conversations: int, concurrency: int, latency_ms: float, out: Path) -> dict[str, Any]:
    """One real run in ``order`` (``longest`` or ``source``): the replay phase's seconds and the calls made."""
    from delta_eval import pipeline
    from delta_eval.progress import RunProgress

    if order == "source":
        pipeline._LOOKAHEAD = 0  # pairs go in the loader's order, one conversation at a time
    every, _ = de.demo.demo_conversations().load()
    fixed = {"latency_ms": latency_ms, "latency_sigma": 0.0}
    config = de.RunConfig(
        out=out,
        baseline=de.Variant(model="simulated:baseline", provider_options=fixed),
        candidate=de.Variant(model="simulated:candidate", provider_options={**fixed, "reword_rate": 0.3}),
        judges=de.Judges(equivalence="rule", judge="rule"),
        concurrency=concurrency,
    )
    progress = RunProgress()
    result = de.run(config, conversations=every[:conversations], progress=progress)
    assert progress.replay_started is not None
    seconds = time.monotonic() - progress.replay_started
    manifest = json.loads((result.path / "manifest.json").read_text())
    calls = sum(c["made"] for c in manifest["sessions"][-1]["calls"].values())
    return {"seconds": seconds, "calls": calls, "pairs": result.counts.pairs}


def measure_runs(conversations: int, concurrency: int, latency_ms: float, repeats: int) -> dict[str, list[float]]:
    """Replay phase / ideal of real runs in each order, alternating, each in a child process."""
    ratios: dict[str, list[float]] = {"source": [], "longest": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeats):
            for order in ratios:
                cmd = [sys.executable, __file__, "--child", order, "--conversations", str(conversations),
                       "--concurrency", str(concurrency), "--latency-ms", str(latency_ms),
                       "--out", str(Path(tmp) / f"{order}-{k}")]  # fmt: skip
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                ideal = got["calls"] * latency_ms / 1000 / (2 * concurrency)
                ratios[order].append(got["seconds"] / ideal)
    return ratios


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--conversations", type=int, default=200, help="the first N of the 200")
    parser.add_argument("--sigma", type=float, default=0.5, help="of each call's log-normal latency (0: fixed)")
    parser.add_argument("--run", action="store_true", help="also time real runs of the pipeline in both orders")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="of each simulated call, with --run")
    parser.add_argument("--repeats", type=int, default=3, help="real runs per order, with --run")
    parser.add_argument("--child", choices=["source", "longest"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_once(args.child, args.conversations, args.concurrency, args.latency_ms, Path(args.out))))
        return {}
    got = measure(args.scale, args.concurrency, args.conversations, args.sigma)
    print(f"schedule at zero CPU: {got['pairs']:.0f} pairs, {got['calls']:.0f} calls, {2 * args.concurrency} workers; "
          "run length / ideal (calls x latency / workers)")  # fmt: skip
    for name, ratio in got.items():
        if name not in ("pairs", "calls"):
            print(f"  {name:28s} {ratio:5.2f}x the ideal")
    if args.run:
        runs = measure_runs(args.conversations, args.concurrency, args.latency_ms, args.repeats)
        print(f"real runs, {args.latency_ms:.0f} ms per call, replay phase / ideal (medians of {args.repeats}):")
        for order, ratios in runs.items():
            each = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"  {order + ' order':28s} {statistics.median(ratios):5.2f}x the ideal  (runs: {each})")
        print(f"  longest / source: {statistics.median(runs['longest']) / statistics.median(runs['source']):.2f}")
    return got


if __name__ == "__main__":
    main()
