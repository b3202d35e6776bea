"""The LLM judges on the demo, through a provider's real SDK against its fake server: how much of the work stages 1
and 2 take off the expensive judge, what each stage costs, and whether judging overlaps replay.

The candidate differs from the baseline only by rewording (``--candidate reword`` of the demo). Every model sits
behind one fake server on 127.0.0.1: the two sides, the stage-2 judge (``judge-small``) and the stage-3 judge
(``judge``, three times slower, like a reasoning model). The judges are priced for illustration as
``gpt-5.4-nano`` and ``claude-sonnet-4-6`` would be, so that the funnel shows what each stage would cost.

Printed, per repeat and as medians:

- the funnel: pairs per stage, judge calls, tokens and cost per stage, and the share of pairs stages 1 and 2 resolve
  before stage 3 (target >= 50%);
- overlap: the share of judge calls answered while replays were still finishing (from ``judgements.answered_at``
  and ``replays.finished_at``), how long judging went on after the last replay, and the run's wall time over that
  of the same run with the rule-based judges (no judge calls; the baseline, measured in the same invocation): near
  1 when judging hides behind replay, about 1 + judge time / replay time if judging were a phase after it.

    python benchmarks/judges.py                         # openai wire, 100 conversations, 3 repeats
    python benchmarks/judges.py --wire anthropic -n 200 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import delta_eval as de
from delta_eval.analysis.report import funnel_lines
from delta_eval.demo import WIRES, demo_config, demo_conversations, wire_models
from delta_eval.pricing import Price, price_for

#: Judge prices for illustration: the stage-2 judge as gpt-5.4-nano, the stage-3 judge as claude-sonnet-4-6.
ILLUSTRATIVE = {"judge-small": "openai:gpt-5.4-nano", "judge": "anthropic:claude-sonnet-4-6"}


def prices(prefix: str) -> dict[str, Price]:
    found = {f"{prefix}:{name}": price_for(model) for name, model in ILLUSTRATIVE.items()}
    return {name: price for name, price in found.items() if price is not None}


def one_run(wire: str, judges: str, n: int, latency_ms: float, out: Path) -> dict[str, Any]:
    prefix = WIRES[wire][0]
    with wire_models(wire, latency_ms=latency_ms, candidate="reword", judges=judges) as models:  # type: ignore[arg-type]
        config = demo_config(out, n=n, models=models).model_copy(update={"prices": prices(prefix)})
        start = time.perf_counter()
        result = de.run(config, conversations=demo_conversations())
        seconds = time.perf_counter() - start
    figures: dict[str, Any] = {"seconds": seconds, "result": result}
    if judges == "llm":
        con = result.connect()
        try:
            tail, calls, during = con.execute(
                """
                WITH r AS (SELECT max(finished_at) AS last FROM replays WHERE side <> 'recorded')
                SELECT epoch(max(answered_at) - (SELECT last FROM r)), count(*),
                       count(*) FILTER (WHERE answered_at < (SELECT last FROM r))
                FROM judgements
                """
            ).fetchone()
            figures["overlap"] = during / calls if calls else 0.0
            figures["tail"] = tail
            figures["judge_calls"] = calls
            figures["funnel"] = funnel_lines(result, con)
        finally:
            con.close()
        counts = result.counts
        decided = counts.pairs - counts.by_stage.get("error", 0)
        early = counts.by_stage.get("deterministic", 0) + counts.by_stage.get("equivalence", 0)
        figures["resolved_early"] = early / decided if decided else 0.0
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wire", choices=list(WIRES), default="openai")
    parser.add_argument("-n", type=int, default=100, help="conversations (default 100)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="median latency of a side's call")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    rows: list[tuple[float, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            rule = one_run(args.wire, "rule", args.n, args.latency_ms, Path(tmp) / f"rule-{k}")
            llm = one_run(args.wire, "llm", args.n, args.latency_ms, Path(tmp) / f"llm-{k}")
            ratio = llm["seconds"] / rule["seconds"]
            rows.append((llm["resolved_early"], llm["overlap"], ratio, llm["tail"]))
            if k == 0:
                print(f"demo, {args.n} conversations, reword-only candidate, {args.wire} SDK against its fake server")
                print("\n".join(llm["funnel"]))
                print()
                print("repeat  resolved by stages 1+2  judge calls during replay  judging after last replay  "
                      "wall LLM judges / rule judges")  # fmt: skip
            print(
                f"{k + 1:6d}  {llm['resolved_early']:22.1%}  {llm['overlap']:25.1%}  {llm['tail']:22.2f} s  "
                f"{llm['seconds']:6.2f} s / {rule['seconds']:6.2f} s = {ratio:.2f}"
            )
    early, overlap, ratio, tail = (statistics.median(col) for col in zip(*rows, strict=True))
    print(
        f"median  {early:22.1%}  {overlap:25.1%}  {tail:22.2f} s  {ratio:28.2f}\n"
        f"target: stages 1+2 resolve >= 50% of pairs ({'met' if early >= 0.5 else 'NOT met'}); judge calls overlap "
        f"replay ({'yes' if overlap > 0.5 else 'NO'}: {overlap:.0%} answered before the last replay finished)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
