"""The analysis at scale: the win rate, the decision and ``a.summary()`` over run folders of 200,000 and 1,000,000
verdicts, and ``a.themes()`` over 20,000 judge reasons, each against a baseline measured in the same run.

The run folder is synthetic (written straight as Parquet with the run's schemas, no model involved): verdicts of
1,000,000 pairs from 140,000 conversations in 8 strata, their 3,000,000 replays as a run writes them (each pair's
baseline, candidate and recorded turn, with reply texts, the tool-call checks, a few failed calls and costs: see
:func:`replay_columns`), and 20,000 stage-3 verdicts where the candidate lost, whose reasons name what it did, as the
judges' do. Printed, per size, medians of cold runs
(nothing cached, a fresh connection each) of ``RunResult.win_rate()`` (target: <= 3x the plain query),
``RunResult.decision()`` and ``a.summary()`` (targets: < 1 s at 1M), each as a ratio to a plain DuckDB win-rate
query over the same Parquet files (no interval, no clusters), in wall time and in CPU time (every thread's); the
same again with the weights of a stratified sample, which vary by stratum (every win rate weighted); then
seconds for the themes (<= 60 s) beside one TF-IDF + k-means fit at the chosen k (what choosing k by silhouette
costs on top).

    python benchmarks/analysis.py                         # 200,000 and 1,000,000 pairs, 20,000 reasons
    python benchmarks/analysis.py --pairs 100000 --reasons 2000
    python benchmarks/analysis.py --batched        # also the decision over batches as a run commits them
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import delta_eval as de
from delta_eval.adapters.simulated_judge import behaviour
from delta_eval.store.conversation_key import conversation_key, pair_key
from delta_eval.store.derived import DERIVED, DERIVED_FROM, derive
from delta_eval.store.folder import MARKER, RunFolder, write_json_atomic
from delta_eval.store.manifest import RunManifest
from delta_eval.store.tables import SCHEMAS
from delta_eval.store.tallies import TALLIES, tally

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Figure, record  # the figures and their targets, shared by the benchmarks

#: The targets (issue 20): the win rate at most 3x a plain DuckDB win-rate query; the decision and a cold summary
#: under a second at 1,000,000 verdicts.
WIN_RATE_TARGET = 3.0
SECONDS_TARGET = 1.0

TOOLS = ["get_user_details", "get_reservation_details", "search_direct_flight", "update_reservation_flights",
         "cancel_reservation", "book_reservation", "send_certificate", "calculate"]  # fmt: skip
#: Rows per Parquet row group of the synthetic files: what a run's compacted files have (DuckDB's default).
ROW_GROUP = 122_880
ARGS = ["user_id", "reservation_id", "origin", "date", "cabin", "payment_id", "amount"]


def _table(name: str, columns: dict[str, Any], n: int) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.table(
        {f.name: pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema},
        schema=schema,
    )


def reason(rng: random.Random) -> tuple[str, str]:
    """A stage-3 verdict's summary and reasoning, naming what the losing side did."""
    tool, arg = rng.choice(TOOLS), rng.choice(ARGS)
    calls = [f'{tool}({{"{arg}": "{rng.randrange(100)}"}})']
    kind = rng.random()
    mine = [] if kind < 0.4 else [f'{tool}({{"{arg}": "x"}})'] if kind < 0.8 else [f"{rng.choice(TOOLS)}({{}})"]
    text = "Could you confirm the details?" if kind < 0.25 else ""
    said = behaviour(mine, text, calls)
    return f"Reply A is better: reply B {said}.", f"Reply B {said}; A follows 1 of 1 reference calls, B 0."


#: Words of the replies' texts (the tau-bench airline agent's vocabulary, roughly).
WORDS = (
    "your", "reservation", "flight", "booking", "the", "to", "from", "on", "is", "has", "been", "I", "can", "you",
    "for", "a", "and", "confirm", "cancel", "change", "cabin", "economy", "business", "basic", "passenger",
    "payment", "certificate", "refund", "baggage", "date", "please", "would", "like", "with", "of", "that", "this",
    "not", "available", "details", "user", "id", "number", "total", "amount", "card", "gift", "travel", "insurance",
)  # fmt: skip


def replay_columns(rng: np.random.Generator, ids: list[str], conv: list[str], keys: dict[str, int]) -> dict[str, Any]:
    """The replays of the pairs ``ids`` as a run writes them (measured on ``delta-eval demo``'s): each pair's
    baseline, candidate and recorded (production's) turn, with a reply text of about 300 characters (none of
    two alike: a run's texts are not a dictionary), the tool-call checks of each replayed turn (what the sides'
    metrics and gates read) and whether production acted there, a few failed calls (0.3%), token counts and costs;
    the recorded rows have no latency, cost or checks."""
    pairs = len(ids)
    n = 3 * pairs
    side = np.repeat(np.array(["baseline", "candidate", "recorded"]), pairs)
    replayed = side != "recorded"
    # Texts from a pool with a number of their own: 300 characters each, no two alike.
    pool = [" ".join(rng.choice(WORDS, size=50)).capitalize()[:290] for _ in range(4096)]
    texts = [f"{pool[j]} ({i})." for i, j in enumerate(rng.integers(0, len(pool), n))]
    calls = rng.integers(0, 3, n)
    failed = replayed & (rng.random(n) < 0.003)
    silent = replayed & ~failed & (rng.random(n) < 0.005)
    calls[silent] = 0
    ok = replayed & ~failed
    # Whether production acted at each pair's point: its recorded row's calls, on each side's row.
    acted = np.tile(calls[2 * pairs :] > 0, 3)
    tin, tout = rng.integers(600, 3000, n), rng.integers(20, 400, n)
    model = np.where(side == "baseline", "gpt-4o", np.where(side == "candidate", "gpt-4.1", "recorded"))

    def where(mask: np.ndarray, values: Any) -> list[Any]:
        return [v if m else None for m, v in zip(mask.tolist(), np.asarray(values).tolist(), strict=True)]

    return {
        "pair_id": ids * 3, "conversation_id": conv * 3, "turn_index": [0] * n,
        "conversation_key": [keys[c] for c in conv] * 3, "pair_key": [pair_key(i) for i in ids] * 3,
        "epoch": [1] * n, "side": side.tolist(),
        "variant": model.tolist(), "model": model.tolist(),
        "final_text": [None if s or (c and r < 0.05) else t for t, s, c, r in
                       zip(texts, (silent | failed).tolist(), calls.tolist(), rng.random(n), strict=True)],
        "finish_reason": np.where(calls > 0, "tool_calls", "stop").tolist(),
        "latency_ms": where(replayed & ~failed, rng.uniform(200, 2000, n)),
        "cost_usd": where(replayed, tin * 2.5e-6 + tout * 1e-5),
        "input_tokens": where(replayed, tin), "output_tokens": where(replayed, tout),
        "model_calls": where(replayed, 1 + calls), "cached_calls": where(replayed, np.zeros(n, dtype=int)),
        "hit_tool_cap": [False] * n, "n_tool_calls": where(~failed, calls),
        "invalid_tool_calls": where(ok, ((rng.random(n) < 0.01) & (calls > 0)).astype(int)),
        "matches_recorded": where(ok, rng.random(n) < 0.8),
        "text_instead_of_action": where(ok, (calls == 0) & ~silent & acted),
        "no_decision": where(ok, silent), "recorded_acted": where(replayed, acted),
        "error": [("provider error: 503 Service Unavailable" if f else None) for f in failed.tolist()],
        "error_type": [("ProviderError" if f else None) for f in failed.tolist()],
    }  # fmt: skip


def synthetic_run(out: Path, pairs: int, reasons: int, seed: int = 0, batch_pairs: int | None = None) -> Path:
    """Write a run folder of ``pairs`` verdicts (``reasons`` of them stage-3 with reasons) and their replays: in
    two files, or with ``batch_pairs`` in batches of that many pairs, each a verdicts file and a replays file, as a
    run commits them."""
    rng = random.Random(seed)
    conversations = max(1, pairs // 7)
    conv = [f"c{rng.randrange(conversations)}" for _ in range(pairs)]
    strata = [f"task_type=t{int(c[1:]) % 8}" for c in conv]
    ids = [f"{c}#{i}" for i, c in enumerate(conv)]
    judged = set(rng.sample(range(pairs), min(reasons, pairs)))
    stage, outcome, summary, reasoning = [], [], [], []
    for i in range(pairs):
        if i in judged:
            s, r = reason(rng)
            stage.append("judge")
            outcome.append("baseline")  # every reason is a loss's: the themes run over all of them
            summary.append(s)
            reasoning.append(r)
        else:
            stage.append("deterministic" if rng.random() < 0.7 else "equivalence")
            outcome.append("equivalent")
            summary.append("")
            reasoning.append("")
    folder = RunFolder(out)
    out.mkdir(parents=True)
    write_json_atomic(out / MARKER, {"library": "delta_eval", "format": "delta_eval.run/1"})
    keys = {c: conversation_key(c) for c in set(conv)}  # as the run's writer computes them (store/tables.py)
    verdicts = _table("verdicts", {"pair_id": ids, "conversation_id": conv, "turn_index": [0] * pairs,
                                   "conversation_key": [keys[c] for c in conv],
                                   "pair_key": [pair_key(i) for i in ids],
                                   "epoch": [1] * pairs, "stage": stage, "outcome": outcome, "stratum": strata,
                                   "weight": [1.0] * pairs, "summary": summary, "reasoning": reasoning,
                                   "judge": ["simulated:judge"] * pairs}, pairs)  # fmt: skip
    replays = _table("replays", replay_columns(np.random.default_rng(seed), ids, conv, keys), 3 * pairs)
    commits = out / "_commits"
    commits.mkdir()
    for name in ("verdicts", "replays", *DERIVED_FROM):
        (out / name).mkdir()
    if batch_pairs is None:
        batches = [{"verdicts": verdicts}, {"replays": replays}]
    else:  # a batch holds its pairs' verdicts and both sides' replays
        batches = [{"verdicts": verdicts.slice(i, batch_pairs),
                    "replays": pa.concat_tables([replays.slice(k * pairs + i, batch_pairs) for k in range(3)])}
                   for i in range(0, pairs, batch_pairs)]  # fmt: skip
    for batch, tables in enumerate(batches, start=1):
        tables = {**tables, **derive(tables)}  # as the run's writer derives them with each batch (store/derived.py)
        record: dict[str, Any] = {"batch": batch, "files": {}, "rows": {}, "sizes": {}}
        for name, table in tables.items():
            part = out / name / f"part-{batch:06d}.parquet"
            # In row groups of the size a compacted run's files have (DuckDB's default), which DuckDB reads in
            # parallel: a file of one row group is read by one thread.
            pq.write_table(table, part, compression="zstd", row_group_size=ROW_GROUP)
            rel = f"{name}/{part.name}"
            record["sizes"][rel] = part.stat().st_size
            if name in DERIVED_FROM:  # named apart, as the writer names them
                record.setdefault(DERIVED, {})[name] = [rel]
                continue
            record["files"][name] = [rel]
            record["rows"][name] = table.num_rows
        write_json_atomic(commits / f"{batch:06d}.json", record)
    manifest = RunManifest(status="completed", fingerprint={}, config={}, source="synthetic", baseline="baseline",
                           candidate="candidate", batches=len(batches))  # fmt: skip
    manifest.counts.pairs = pairs
    folder.write_manifest(manifest)
    return out


#: The weights of a stratified sample of the synthetic run's 8 strata drawn in equal numbers from strata of unequal
#: size (a stratum's population over its sample, up to a constant): what a run sampled with ``allocation="equal"``
#: or Neyman's writes.
STRATUM_WEIGHTS = (0.4, 0.7, 1.0, 1.3, 1.6, 2.2, 3.1, 5.0)


def stratify(run: Path) -> None:
    """Give the synthetic run's verdicts the weights of a stratified sample (:data:`STRATUM_WEIGHTS`, by stratum),
    in place, with their tallies counted again: the win rates and the decision then take weighted sums (their
    ``weighted="auto"`` settles on them), another path than equal weights'."""
    import json

    for path in sorted((run / "_commits").glob("*.json")):
        record = json.loads(path.read_text())
        for rel in record["files"].get("verdicts", []):
            table = pq.read_table(run / rel)
            strata = table.column("stratum").to_pylist()
            weights = pa.array([STRATUM_WEIGHTS[int(s.rsplit("t", 1)[1])] for s in strata], pa.float64())
            table = table.set_column(table.schema.get_field_index("weight"), "weight", weights)
            pq.write_table(table, run / rel, compression="zstd", row_group_size=ROW_GROUP)
            record["sizes"][rel] = (run / rel).stat().st_size
            for derived in record.get(DERIVED, {}).get(TALLIES, []):
                pq.write_table(tally(table), run / derived, compression="zstd")
                record["sizes"][derived] = (run / derived).stat().st_size
        write_json_atomic(path, record)


def timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def timed_cpu(fn: Any) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds (every thread's: DuckDB's too) of one call: the CPU figure is
    what a loaded machine disturbs least."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


#: A plain DuckDB win rate over the verdicts' Parquet files (no interval, no clusters): what the others are held to.
PLAIN_SQL = """
SELECT avg(CASE outcome WHEN 'candidate' THEN 1.0 WHEN 'baseline' THEN 0.0 ELSE 0.5 END)
FROM read_parquet('{files}') WHERE outcome IN ('candidate', 'baseline', 'tie', 'equivalent')
"""


def plain_win_rate(run: Path) -> float:
    """The plain-SQL baseline: a fresh connection, one query."""
    import duckdb

    with duckdb.connect() as con:
        row = con.execute(PLAIN_SQL.format(files=run / "verdicts" / "*.parquet")).fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0


def cold_summary(run: Path) -> dict[str, Any]:
    """``a.summary()`` with nothing cached."""
    shutil.rmtree(run / "analysis", ignore_errors=True)
    return de.analyze(run).summary()


def measure(run: Path, pairs: int, repeats: int, figures: str | None = None, *, stratified: bool = False) -> None:
    """Medians of ``repeats`` cold runs of each, interleaved, with their ratios to the plain query; ``stratified``:
    the run's weights vary by stratum (:func:`stratify`), so every win rate is weighted."""
    fns = {
        "plain SQL win rate": lambda: plain_win_rate(run),
        "RunResult.win_rate()": lambda: de.open_result(run).win_rate(),
        # The weighted sums (a stratified sample's, whose weights vary): per conversation, another path.
        "win_rate(weighted=True)": lambda: de.open_result(run).win_rate(weighted=True),
        "RunResult.decision()": lambda: de.open_result(run).decision(),
        "a.summary() (cold)": lambda: cold_summary(run),
    }
    if stratified:  # win_rate() is the weighted one
        del fns["win_rate(weighted=True)"]
    fns["plain SQL win rate"]()  # imports and the first connection are not what is measured
    fns["RunResult.win_rate()"]()
    times: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            wall, used = timed_cpu(fn)
            times[name].append(wall)
            cpu[name].append(used)
    plain = statistics.median(times["plain SQL win rate"])
    targets = {"RunResult.win_rate()": f"target <= 3x plain ({3 * plain:.2f} s)",
               "win_rate(weighted=True)": f"target <= 3x plain ({3 * plain:.2f} s)",
               "RunResult.decision()": "target < 1 s at 1M", "a.summary() (cold)": "target < 1 s at 1M"}  # fmt: skip
    kind = ", weights by stratum" if stratified else ""
    print(f"{pairs:,} verdicts{kind} (median of {repeats}, cold):")
    plain_cpu = statistics.median(cpu["plain SQL win rate"])
    for name, ts in times.items():
        m, c = statistics.median(ts), statistics.median(cpu[name])
        print(
            f"  {name:24s} {m:7.3f} s  ({m / plain:6.1f}x plain SQL)   CPU {c:6.3f} s ({c / plain_cpu:6.1f}x)  "
            f"{targets.get(name, '')}"
        )
    at = f"{pairs:,} verdicts{kind}"
    seconds_bound = SECONDS_TARGET if pairs >= 1_000_000 else None
    win_rate = statistics.median(times["RunResult.win_rate()"])
    found = [Figure("analysis", f"win rate / plain SQL, {at}", win_rate / plain, "x", WIN_RATE_TARGET,
                    note=f"{win_rate:.3f} s vs {plain:.3f} s")]  # fmt: skip
    if not stratified:
        weighted = statistics.median(times["win_rate(weighted=True)"])
        found.append(Figure("analysis", f"weighted win rate / plain SQL, {at}", weighted / plain, "x",
                            WIN_RATE_TARGET, note=f"{weighted:.3f} s vs {plain:.3f} s"))  # fmt: skip
    record(
        figures,
        *found,
        Figure("analysis", f"decision, {at}", statistics.median(times["RunResult.decision()"]), "s", seconds_bound),
        Figure("analysis", f"summary (cold), {at}", statistics.median(times["a.summary() (cold)"]), "s", seconds_bound),
    )  # fmt: skip


def batched(tmp: Path, pairs: int, reasons: int, repeats: int, figures: str | None = None) -> None:
    """The decision over the same verdicts written in batches of a run's default ``flush_every`` pairs (what a run
    of that many pairs leaves while it runs), then over that folder compacted as a completed session leaves it
    (:meth:`RunFolder.compact`), against the two-file folder: each query over a run opens every batch's files."""
    every = de.RunConfig.model_fields["flush_every"].default
    one, many, merged = tmp / "run", tmp / "batched", tmp / "compacted"
    for folder in (many, merged):
        shutil.rmtree(folder, ignore_errors=True)
    synthetic_run(many, pairs, reasons, batch_pairs=every)
    shutil.copytree(many, merged)
    seconds, batches = timed(lambda: RunFolder(merged).compact())
    times: dict[Path, list[float]] = {one: [], many: [], merged: []}
    for _ in range(repeats):
        for run in times:
            times[run].append(timed_cpu(lambda: de.open_result(run).decision())[0])  # noqa: B023
    o = statistics.median(times[one])
    m, c = statistics.median(times[many]), statistics.median(times[merged])
    print(f"  decision, {-(-pairs // every):,} batches of {every:,} pairs  {m:7.3f} s  ({m / o:4.1f}x the same in one "
          f"file, {o:.3f} s)")  # fmt: skip
    print(f"  decision, the same compacted into {len(batches)} batch{'es' if len(batches) != 1 else ''} "
          f"({seconds:.1f} s to compact)  {c:7.3f} s  ({c / o:4.1f}x one file)")  # fmt: skip
    at = f"{pairs:,} verdicts"
    record(
        figures,
        Figure("analysis", f"decision, {at} in batches of {every:,}", m, "s", note=f"{m / o:.1f}x one file"),
        Figure("analysis", f"decision, {at} compacted", c, "s", SECONDS_TARGET if pairs >= 1_000_000 else None,
               note=f"{c / o:.1f}x one file; compacted in {seconds:.1f} s"),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--reasons", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--figures", help="append the figures and their targets to this file (JSON lines)")
    parser.add_argument("--no-themes", action="store_true", help="skip the themes")
    parser.add_argument("--no-stratified", action="store_true",
                        help="skip the figures of the same run with weights that vary by stratum")  # fmt: skip
    parser.add_argument("--batched", action="store_true",
                        help="also the decision over the same verdicts in batches, as a run commits them")  # fmt: skip
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="delta-eval-analysis-"))
    try:
        for pairs in args.pairs:
            shutil.rmtree(tmp / "run", ignore_errors=True)
            seconds, run = timed(lambda: synthetic_run(tmp / "run", pairs, args.reasons))  # noqa: B023
            print(f"synthetic run: {pairs:,} pairs, {3 * pairs:,} replays, {args.reasons:,} reasons "
                  f"written in {seconds:.1f} s")  # fmt: skip
            measure(run, pairs, args.repeats, args.figures)
            if args.batched:
                batched(tmp, pairs, args.reasons, args.repeats, args.figures)
            if not args.no_stratified:
                stratify(run)
                measure(run, pairs, args.repeats, args.figures, stratified=True)
        if args.no_themes:
            return
        shutil.rmtree(run / "analysis", ignore_errors=True)
        a = de.analyze(run)
        t_themes, themes = timed(lambda: a.themes(outcome="baseline"))
        texts = [t for _, t in a._reasons("baseline")]
        k = len(themes)

        def one_fit() -> None:
            from sklearn.cluster import KMeans
            from sklearn.feature_extraction.text import TfidfVectorizer

            KMeans(n_clusters=max(k, 2), n_init=4, random_state=0).fit(TfidfVectorizer().fit_transform(texts))

        t_fit, _ = timed(one_fit)
        print(f"a.themes():              {t_themes:6.2f} s over {len(texts):,} reasons, {k} themes (target <= 60 s)"
              f"   one TF-IDF + k-means fit at k={k}: {t_fit:6.2f} s")  # fmt: skip
        for t in themes[:5]:
            print(f"  #{t['id']} {t['name']}: {t['size']:,} ({100 * t['share']:.0f}%)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
