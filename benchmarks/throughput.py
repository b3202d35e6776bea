"""Throughput and memory of the pipeline against a bare loop, on the simulated model with zero latency.

The bare loop is what a home-grown script would do with the same model and the same concurrency: read the export,
and for every assistant turn, call the baseline and the candidate, feeding recorded tool results back, with no
cache, no judging and no storage. The pipeline does all of the run: ingest, stratified sampling (here: everything),
replay through cache, limiter and retry, the three judging stages, and atomic Parquet writes. The ratio is the price
of all that per pair.

Each measurement runs in a child process of its own, so its peak RSS is its own; the two alternate, and the
medians are reported (machines are noisy).

    python benchmarks/throughput.py                 # 3 repeats, all 200 conversations, concurrency 16
    python benchmarks/throughput.py --scale 5       # the export repeated 5 times (1,000 conversations)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BEHAVIOURS = {
    "baseline": {"reword_rate": 0.1, "skip_tool_rate": 0.02, "seed": 7},
    "candidate": {"reword_rate": 0.35, "skip_tool_rate": 0.06, "change_args_rate": 0.06, "seed": 7},
}


def scaled_export(scale: int, folder: Path) -> Path:
    """The demo export as JSONL, repeated ``scale`` times with distinct ids."""
    from delta_eval.demo import DEMO_CONVERSATIONS

    records = json.loads(Path(DEMO_CONVERSATIONS).read_text())
    path = folder / f"export-x{scale}.jsonl"
    with path.open("w") as fh:
        for copy in range(scale):
            for r in records:
                fh.write(json.dumps({**r, "copy": copy}) + "\n")
    return path


def source(path: Path) -> Any:
    import delta_eval as de

    return de.read_conversations(
        path,
        messages="traj",
        id="{task_id}/{trial}/{copy}",
        metadata={"actions": "info.task.actions"},
        tools=de.demo.DEMO_TOOLS,
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_pipeline(path: Path, out: Path, concurrency: int) -> dict[str, Any]:
    import delta_eval as de
    import delta_eval.api  # the run's modules (left to first use by `import delta_eval`) off the clock

    config = de.RunConfig(
        out=out,
        baseline=de.Variant(model="simulated:baseline", provider_options=BEHAVIOURS["baseline"]),
        candidate=de.Variant(model="simulated:candidate", provider_options=BEHAVIOURS["candidate"]),
        concurrency=concurrency,
    )
    start = time.perf_counter()
    result = de.run(config, conversations=source(path))
    seconds = time.perf_counter() - start
    return {"pairs": result.counts.pairs, "seconds": seconds, "rss_mb": peak_rss_mb()}


def run_bare(path: Path, concurrency: int) -> dict[str, Any]:
    import anyio

    from delta_eval.calls import ModelRequest
    from delta_eval.replay.points import replay_points
    from delta_eval.replay.tools import RecordedToolSimulator, ToolContext
    from delta_eval.schema import Message
    from delta_eval.testing import RecordingIndex, SimulatedAdapter, SimulatedBehaviour

    start = time.perf_counter()
    conversations, _ = source(path).load()
    index = RecordingIndex()
    index.add(conversations)
    models = [
        SimulatedAdapter(f"simulated:{side}", SimulatedBehaviour(**BEHAVIOURS[side]), index) for side in BEHAVIOURS
    ]
    simulate = RecordedToolSimulator()
    limiter = anyio.CapacityLimiter(concurrency)
    points = [p for c in conversations for p in replay_points(c)]

    async def side(model: SimulatedAdapter, point: Any) -> None:
        messages = list(point.context)
        made = 0
        for _ in range(6):
            reply = (
                await model.generate(ModelRequest(model=model.model, messages=tuple(messages), tools=point.tools))
            ).message
            if not reply.tool_calls:
                return
            messages.append(reply)
            for call in reply.tool_calls:
                result = simulate(call, ToolContext(point=point, position=made))
                made += 1
                messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=result.content))

    async def pair(point: Any) -> None:
        async with limiter, anyio.create_task_group() as tg:
            for model in models:
                tg.start_soon(side, model, point)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for point in points:
                tg.start_soon(pair, point)

    anyio.run(main)
    return {"pairs": len(points), "seconds": time.perf_counter() - start, "rss_mb": peak_rss_mb()}


def child(args: argparse.Namespace) -> None:
    path = Path(args.export)
    if args.child == "pipeline":
        out = run_pipeline(path, Path(args.out), args.concurrency)
    else:
        out = run_bare(path, args.concurrency)
    print(json.dumps(out))


def measure(kind: str, export: Path, concurrency: int, folder: Path, k: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--export",
        str(export),
        "--concurrency",
        str(concurrency),
        "--out",
        str(folder / f"run-{kind}-{k}"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--scale", type=int, default=1, help="repeat the 200-conversation export this many times")
    parser.add_argument("--child", choices=["pipeline", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export = scaled_export(args.scale, folder)
        runs: dict[str, list[dict[str, Any]]] = {"pipeline": [], "bare": []}
        for k in range(args.repeats):
            for kind in ("bare", "pipeline"):
                runs[kind].append(measure(kind, export, args.concurrency, folder, k))
    print(
        f"throughput on simulated: (zero latency), {200 * args.scale} conversations, "
        f"concurrency {args.concurrency}, {args.repeats} repeats (medians)"
    )
    medians = {}
    for kind, rows in runs.items():
        pairs = rows[0]["pairs"]
        rate = statistics.median(r["pairs"] / r["seconds"] for r in rows)
        rss = statistics.median(r["rss_mb"] for r in rows)
        medians[kind] = rate
        each = ", ".join(f"{r['pairs'] / r['seconds']:.0f}" for r in rows)
        print(f"  {kind:9s} {pairs:6d} pairs  {rate:8.1f} pairs/s  peak RSS {rss:7.1f} MB  (runs: {each})")
    print(f"  pipeline / bare throughput ratio: {medians['pipeline'] / medians['bare']:.2f}")


if __name__ == "__main__":
    main()
