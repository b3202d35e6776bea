"""The pair viewer at scale: the pair list of a run folder of 1,000,000 verdicts, page by page, against a plain
DuckDB query measured in the same run.

The run folder is synthetic (written straight as Parquet with the run's schemas, no model involved): 1,000,000
pairs from ~140,000 conversations in 8 strata, their 2,000,000 replays (texts and tool calls) and the
conversations. Timed through the app's test client (httpx, in process: routing, SQL, template): the first page,
a filtered page (outcome and stratum), a deep page (page 10,000 of 20,000) and a text search; each beside the same
rows read by a plain ``SELECT ... LIMIT 100`` on the run's ``pairs`` view. Printed: medians of ``--repeats`` requests
(target: < 300 ms a page), and the one-off time to open the run (the pair index is built then).

    python benchmarks/viewer.py                      # 1,000,000 pairs
    python benchmarks/viewer.py --pairs 100000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from delta_eval.store.folder import MARKER, RunFolder, write_json_atomic
from delta_eval.store.manifest import RunManifest
from delta_eval.store.tables import SCHEMAS

TOOLS = ["get_user_details", "get_reservation_details", "search_direct_flight", "update_reservation_flights",
         "cancel_reservation", "book_reservation", "send_certificate", "calculate"]  # fmt: skip
WORDS = (
    "your",
    "flight",
    "reservation",
    "is",
    "confirmed",
    "refund",
    "baggage",
    "seat",
    "upgrade",
    "economy",
    "business",
    "cancelled",
    "I",
    "can",
    "help",
    "with",
    "that",
    "please",
    "confirm",
    "the",
    "date",
    "of",
    "travel",
    "and",
    "the",
    "passenger",
    "names",
)
OUTCOMES = (("equivalent", "deterministic"), ("equivalent", "equivalence"), ("candidate", "judge"),
            ("baseline", "judge"), ("tie", "judge"), ("error", "error"))  # fmt: skip
OUTCOME_WEIGHTS = (0.55, 0.2, 0.1, 0.1, 0.04, 0.01)


def _table(name: str, columns: dict[str, Any], n: int) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.table(
        {f.name: pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema},
        schema=schema,
    )


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randrange(8, 30)))


def _steps(rng: random.Random, k: int) -> list[dict[str, Any]]:
    steps = []
    for j in range(k):
        tool = rng.choice(TOOLS)
        call = {"id": f"call_{j}", "name": tool, "arguments": json.dumps({"id": rng.randrange(1000)}),
                "arguments_valid": True}  # fmt: skip
        result = {"call_id": f"call_{j}", "name": tool, "content": '{"ok": true}', "source": "recorded"}
        steps.append({"text": None, "tool_calls": [call], "tool_results": [result], "reasoning": None})
    return steps


def synthetic_run(out: Path, pairs: int, seed: int = 0, texts: dict[int, str] | None = None) -> Path:
    """Write a run folder of ``pairs`` verdicts, their baseline and candidate replays, and the conversations.
    ``texts`` replaces the candidate's final text of the pairs at those positions (e.g. with hostile HTML)."""
    rng = random.Random(seed)
    conversations = max(1, pairs // 7)
    conv = [f"c{rng.randrange(conversations)}" for _ in range(pairs)]
    turn: dict[str, int] = {}
    turns = []
    for c in conv:
        turns.append(turn.get(c, 0))
        turn[c] = turns[-1] + 1
    ids = [f"{c}#{t}" for c, t in zip(conv, turns, strict=True)]
    strata = [f"task_type=t{int(c[1:]) % 8}" for c in conv]
    drawn = rng.choices(OUTCOMES, OUTCOME_WEIGHTS, k=pairs)
    outcome = [o for o, _ in drawn]
    stage = [s for _, s in drawn]
    severity = [rng.choice(("minor", "critical", "none")) if o in ("baseline", "candidate") else None for o in outcome]
    preference = [{"candidate": 0.9, "baseline": 0.1, "tie": 0.5}.get(o) for o in outcome]
    error_side = [rng.choice(("baseline", "candidate", "judge")) if o == "error" else None for o in outcome]
    summary = [f"Reply A is better: {_text(rng)}" if s == "judge" else "" for s in stage]
    verdicts = _table("verdicts", {"pair_id": ids, "conversation_id": conv, "turn_index": turns,
                                   "epoch": [1] * pairs, "stage": stage, "outcome": outcome, "stratum": strata,
                                   "severity": severity, "preference": preference, "error_side": error_side,
                                   "confidence": [0.9 if p is not None else None for p in preference],
                                   "weight": [1.0] * pairs, "summary": summary, "reasoning": summary,
                                   "judge": ["simulated:judge"] * pairs, "candidate_scores": ["{}"] * pairs,
                                   "baseline_scores": ["{}"] * pairs, "details": ["{}"] * pairs}, pairs)  # fmt: skip
    baseline_text = [_text(rng) for _ in range(pairs)]
    candidate_text = [b if o == "equivalent" else _text(rng) for b, o in zip(baseline_text, outcome, strict=True)]
    for i, text in (texts or {}).items():
        candidate_text[i] = text
    n = 2 * pairs
    k = [rng.randrange(3) for _ in range(pairs)]
    sides = {
        "pair_id": ids * 2,
        "conversation_id": conv * 2,
        "turn_index": turns * 2,
        "epoch": [1] * n,
        "side": ["baseline"] * pairs + ["candidate"] * pairs,
        "variant": ["baseline"] * pairs + ["candidate"] * pairs,
        "model": ["simulated:baseline"] * pairs + ["simulated:candidate"] * pairs,
        "steps": [_steps(rng, x) for x in k] * 2,
        "final_text": baseline_text + candidate_text,
        "finish_reason": ["stop"] * n,
        "latency_ms": [rng.uniform(200, 2000) for _ in range(n)],
        "cost_usd": [0.001] * n,
        **{name: [0] * n for name in ("cached_input_tokens", "cache_write_tokens", "reasoning_tokens", "cached_calls")},
        "input_tokens": [900] * n,
        "output_tokens": [120] * n,
        "hit_tool_cap": [False] * n,
        "invalid_tool_calls": [0] * n,
        "text_instead_of_action": [False] * n,
        "n_tool_calls": k * 2,
        "model_calls": [x + 1 for x in k] * 2,
    }
    replays = _table("replays", sides, n)
    names = sorted(turn)
    exchange = [
        {"role": "user", "content": "Hi, I need to change my flight."},
        {"role": "assistant", "content": "Sure, which reservation?"},
    ]
    m = len(names)
    conversations_table = _table(
        "conversations",
        {
            "conversation_id": names,
            "source": ["synthetic"] * m,
            "record": names,
            "position": list(range(m)),
            "stratum": [f"task_type=t{int(c[1:]) % 8}" for c in names],
            "weight": [1.0] * m,
            "n_messages": [2 * turn[c] for c in names],
            "n_turns": [turn[c] for c in names],
            "n_pairs": [turn[c] for c in names],
            "metadata": ["{}"] * m,
            "messages": [json.dumps(exchange * turn[c]) for c in names],
            "tools": ["[]"] * m,
            "calls": ["[]"] * m,
        },
        m,
    )
    folder = RunFolder(out)
    out.mkdir(parents=True)
    write_json_atomic(out / MARKER, {"library": "delta_eval", "format": "delta_eval.run/1"})
    commits = out / "_commits"
    commits.mkdir()
    datasets = [("verdicts", verdicts), ("replays", replays), ("conversations", conversations_table)]
    for batch, (name, table) in enumerate(datasets, start=1):
        (out / name).mkdir()
        part = out / name / f"part-{batch:06d}.parquet"
        pq.write_table(table, part, compression="zstd")
        rel = f"{name}/{part.name}"
        record = {"batch": batch, "files": {name: [rel]}, "rows": {name: table.num_rows},
                  "sizes": {rel: part.stat().st_size}}  # fmt: skip
        write_json_atomic(commits / f"{batch:06d}.json", record)
    manifest = RunManifest(status="completed", fingerprint={}, config={}, source="synthetic", baseline="baseline",
                           candidate="candidate", batches=len(datasets))  # fmt: skip
    manifest.counts.pairs = pairs
    folder.write_manifest(manifest)
    return out


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """The median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--run", type=Path, help="keep the synthetic run folder here (reused when it exists)")
    args = parser.parse_args(argv)
    from starlette.testclient import TestClient

    from delta_eval.viewer import RunView, create_app
    from delta_eval.viewer.queries import PAGE_SIZE

    tmp = Path(tempfile.mkdtemp(prefix="delta-eval-viewer-"))
    try:
        start = time.perf_counter()
        if args.run is not None and args.run.exists():
            run = args.run
            print(f"synthetic run: reusing {run}")
        else:
            run = synthetic_run(args.run or tmp / "run", args.pairs)
            print(f"synthetic run: {args.pairs:,} pairs, {2 * args.pairs:,} replays written in "
                  f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        start = time.perf_counter()
        view = RunView(run)
        print(f"open the run (builds the pair index): {time.perf_counter() - start:.1f} s")
        client = TestClient(create_app([view], user="bench"), base_url="http://127.0.0.1")
        client.get("/run/0")  # the decision is computed once, on the first page: not part of a page's time
        deep = max(1, args.pairs // PAGE_SIZE // 2)
        plain = view.result.connect()
        cases = [
            ("first page", "/run/0", "SELECT * FROM pairs ORDER BY conversation_id, turn_index LIMIT 100", []),
            ("filtered page", "/run/0?outcome=baseline&stratum=task_type%3Dt3",
             "SELECT * FROM pairs WHERE outcome = ? AND stratum = ? ORDER BY conversation_id, turn_index LIMIT 100",
             ["baseline", "task_type=t3"]),
            (f"deep page ({deep:,})", f"/run/0?page={deep}",
             f"SELECT * FROM pairs ORDER BY conversation_id, turn_index LIMIT 100 OFFSET {(deep - 1) * PAGE_SIZE}", []),
            ("text search", "/run/0?q=upgrade+economy",
             "SELECT * FROM pairs WHERE candidate_text ILIKE ? OR baseline_text ILIKE ? LIMIT 100",
             ["%upgrade economy%"] * 2),
        ]  # fmt: skip
        print(f"{'pair list':22s} {'viewer (HTTP, ms)':>18s} {'plain SELECT (ms)':>18s}   (medians of {args.repeats})")
        for name, url, sql, params in cases:
            response = client.get(url)
            assert response.status_code == 200, response.text[:300]
            ours = median_ms(lambda url=url: client.get(url), args.repeats)
            theirs = median_ms(lambda sql=sql, params=params: plain.execute(sql, params).fetchall(), args.repeats)
            verdict = "ok" if ours < 300 else "OVER the 300 ms target"
            print(f"{name:22s} {ours:18.1f} {theirs:18.1f}   {verdict}")
        ((first,),) = plain.execute("SELECT pair_id FROM verdicts LIMIT 1").fetchall()
        assert client.get("/run/0/pair", params={"id": first}).status_code == 200
        one = median_ms(lambda: client.get("/run/0/pair", params={"id": first}), args.repeats)
        print(f"{'one pair page':22s} {one:18.1f}")
        view.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
