"""Peak memory of sampling as the source grows: about 10,000 pairs drawn from 10k, 50k and 100k conversations.

A run reads its whole source to count the population and draw a stratified sample, then reads the drawn
conversations again to estimate the cost and replay them. What that holds must not grow with the source: the
population keeps only what strata, ``where`` and the counts need, and DuckDB reads it where it is (views, not
copies). Each size is measured in a child process of its own, doing what a run does before its first model call
(sample, then estimate the cost of the sample), and its peak RSS is printed against the 300 MB target, with the
RSS of the same child before it read anything as the baseline.

The source is the bundled tau-bench export repeated as JSONL, as ``throughput.py`` builds it (200 conversations of
about 7 assistant turns each, with the task's ``actions`` as metadata), stratified by ``trial``; 1,500 conversations
drawn make about 10,000 pairs whatever the source's size.

    python benchmarks/sampling_memory.py                      # 10k, 50k and 100k conversations (a few minutes)
    python benchmarks/sampling_memory.py --sizes 1000 --n 100  # a quick look
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import throughput
from targets import Figure, record

TARGET_MB = 300.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def sample_phase(path: Path, n: int) -> dict[str, Any]:
    """What a run does before its first model call, on the export at ``path``: sample, count, estimate."""
    import delta_eval as de
    from delta_eval.estimate import estimate_sample
    from delta_eval.pipeline import Stages
    from delta_eval.progress import RunProgress
    from delta_eval.store.folder import RunFolder
    from delta_eval.store.session import Resume

    source = de.read_conversations(
        path,
        messages="traj",
        id="{task_id}/{trial}/{copy}",
        metadata={"trial": "trial", "actions": "info.task.actions"},
        tools=de.demo.DEMO_TOOLS,
    )
    config = de.RunConfig(
        out=path.parent / f"run-{path.stem}",
        baseline=de.Variant(model="simulated:baseline"),
        candidate=de.Variant(model="simulated:candidate"),
        judges=de.Judges(equivalence="rule", judge="rule"),
        sample=de.Stratified(by=["trial"], n=n, seed=1),
    )
    before = peak_rss_mb()
    folder = RunFolder(config.out)
    # population_committed: nothing is written (the run folder's own cost is not sampling's)
    state = Resume(manifest=None, population_committed=True)  # type: ignore[arg-type]
    stages = Stages(config, source, folder, state, RunProgress(), None, None)
    sample = stages.sample()
    sampled = peak_rss_mb()
    estimate = estimate_sample(config, source, sample)
    return {
        "population": stages.progress.population,
        "pairs": estimate.pairs,
        "before_mb": before,
        "sample_mb": sampled,
        "peak_mb": peak_rss_mb(),
    }


def measure(path: Path, n: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(path), "--n", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    parser.add_argument("--n", type=int, default=1500, help="conversations drawn (about 7 pairs each)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--figures", help="append the figures and their targets to this file (JSON lines)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(sample_phase(Path(args.child), args.n)))
        return []
    rows = []
    print(
        f"peak RSS of sampling {args.n:,} conversations (sample, then the cost estimate), target < {TARGET_MB:.0f} MB"
    )
    print(f"{'source':>9} {'pairs':>7}  {'before':>8} {'sampled':>8} {'peak':>8}  target")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            path = throughput.scaled_export(-(-size // 200), Path(tmp))
            row = {"size": size, **measure(path, args.n)}
            path.unlink()
            rows.append(row)
            verdict = "ok" if row["peak_mb"] < TARGET_MB else "OVER"
            print(f"{size:9,d} {row['pairs']:7,d}  {row['before_mb']:6.0f}MB {row['sample_mb']:6.0f}MB "
                  f"{row['peak_mb']:6.0f}MB  {verdict}")  # fmt: skip
            record(args.figures, Figure("sampling_memory", f"peak RSS, {size:,} source conversations",
                                        row["peak_mb"], "MB", TARGET_MB, note=f"{row['pairs']:,} pairs"))  # fmt: skip
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        slope = (last["peak_mb"] - first["peak_mb"]) * 1024 / (last["size"] - first["size"])
        print(f"growth: {slope:.2f} KB of peak RSS per source conversation ({first['size']:,} -> {last['size']:,})")
    return rows


if __name__ == "__main__":
    main()
