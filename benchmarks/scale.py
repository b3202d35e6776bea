"""Every figure of the scale targets (issue 20) in one run: each benchmark in a process of its own, then one table
of every figure beside its target.

- ``providers.py``: the client's CPU per call and the wall time over the ideal at 200 ms / 256 in flight, one
  process and two (``de.ProcessExecutor``), beside a bare ``AsyncOpenAI`` loop (targets: <= 1.5 ms, <= 2x), and
  the CPU per call of the layers under the pipeline: the SDK's request alone, HTTP alone (``--floor``);
- ``sampling_memory.py``: peak RSS sampling from 10k / 50k / 100k source conversations (< 300 MB each);
- ``analysis.py``: the win rate over a plain DuckDB query, the decision and a cold summary at 200k and 1M verdicts
  (<= 3x; < 1 s at 1M), and the decision over the same verdicts in a run's batches, then compacted as a completed
  run leaves them;
- ``long_conversation.py --replay``: the replay CPU of a 5,000-message conversation over a 2,000-message one (<= 3);
- with ``--ray``, ``ray_scaling.py``: 2,000 pairs on a local Ray cluster of two workers over their ideal (<= 1.3x),
  and the same Ray run into ``s3://`` (moto on 127.0.0.1) against the one into a local folder.

Each benchmark prints its own lines as it goes (medians, baselines measured in the same run); the table at the end
is their figures as they recorded them (``--figures``, see ``targets.py``). ``--quick`` runs each on small sizes to
see that everything runs (its figures are not the targets' conditions).

    python benchmarks/scale.py                 # the one-machine figures (~15 minutes on 2 cores)
    python benchmarks/scale.py --ray           # and the Ray run
    python benchmarks/scale.py --quick --ray   # a quick look at every benchmark
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Figure, read_figures  # the figures and their targets, shared by the benchmarks

HERE = Path(__file__).resolve().parent

#: Each benchmark's arguments for the issue's conditions, and for a quick look.
FULL: dict[str, list[str]] = {
    "providers": ["--repeats", "3", "--scenarios", "200:256", "--processes", "2", "--floor"],
    "sampling_memory": [],
    "analysis": ["--reasons", "1000", "--no-themes", "--batched"],
    "long_conversation": ["--replay", "--sizes", "1000", "--repeats", "3"],
}
QUICK: dict[str, list[str]] = {
    "providers": ["--repeats", "1", "--conversations", "10", "--scenarios", "20:16", "--processes", "2"],
    "sampling_memory": ["--sizes", "400", "800", "--n", "40"],
    "analysis": ["--pairs", "2000", "--reasons", "50", "--repeats", "1", "--no-themes", "--batched"],
    "long_conversation": ["--replay", "--sizes", "100", "--repeats", "1", "--replay-sizes", "100", "200"],
}
RAY = {
    "full": ["--repeats", "1", "--object-store"],
    "quick": ["--pairs", "60", "--latency-ms", "20", "--concurrency", "32", "--object-store"],
}


def run_all(benchmarks: dict[str, list[str]], figures: Path) -> dict[str, int]:
    """Run each benchmark with its arguments and ``--figures``, its output passed through; each one's exit code."""
    codes: dict[str, int] = {}
    for name, args in benchmarks.items():
        print(f"\n=== {name} {' '.join(args)}", flush=True)
        started = time.monotonic()
        codes[name] = subprocess.run(
            [sys.executable, str(HERE / f"{name}.py"), *args, "--figures", str(figures)]
        ).returncode
        print(f"=== {name}: {time.monotonic() - started:.0f} s, exit code {codes[name]}", flush=True)
    return codes


def table(figures: list[Figure], codes: dict[str, int]) -> str:
    """Every figure beside its target, and which benchmark recorded nothing (it failed: see its output above)."""
    width = max((len(f.name) for f in figures), default=10)
    lines = [f"{'benchmark':<18} {'figure':<{width}} {'value':>10}  {'target':<12} {'':<7} note"]
    for f in figures:
        status = {True: "met", False: "MISSED", None: ""}[f.met]
        value = f"{f.value:.3g}{' ' + f.unit if f.unit else ''}"
        lines.append(f"{f.benchmark:<18} {f.name:<{width}} {value:>10}  {f.target_text():<12} {status:<7} {f.note}")
    with_targets = [f for f in figures if f.met is not None]
    lines.append(f"{sum(bool(f.met) for f in with_targets)} of {len(with_targets)} targets met")
    for name, code in codes.items():
        if code != 0 or not any(f.benchmark == name for f in figures):
            lines.append(f"{name}: exit code {code}, {sum(f.benchmark == name for f in figures)} figures recorded")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: every benchmark runs, not the targets'")
    parser.add_argument("--ray", action="store_true", help="also the Ray run (ray_scaling.py; needs delta-eval[ray])")
    parser.add_argument("--only", nargs="+", choices=[*FULL, "ray_scaling"], help="only these benchmarks")
    args = parser.parse_args(argv)
    benchmarks = dict(QUICK if args.quick else FULL)
    if args.ray or (args.only and "ray_scaling" in args.only):
        benchmarks["ray_scaling"] = RAY["quick" if args.quick else "full"]
    if args.only:
        benchmarks = {name: a for name, a in benchmarks.items() if name in args.only}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figures.jsonl"
        codes = run_all(benchmarks, path)
        figures = read_figures(path)
    print("\n" + table(figures, codes))
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
