"""Cost before spending, checked: ``de.estimate`` on a config, then the same run, and the gap between them.

The config is the demo's sample (the bundled tau-bench airline conversations, stratified by task type) on real
model ids, ``openai:gpt-4.1-mini`` as the baseline and ``openai:gpt-4.1`` with the demo's reworded prompt as the
candidate, served by the fake OpenAI server on 127.0.0.1 through the real SDK, priced from the catalogue. The
estimate knows nothing of the fake server: it counts tokens from the recorded conversations as a user's estimate
would (:mod:`delta_eval.estimate`), and the run reports what the server said it used. ``--judges llm`` adds an
LLM stage 2 (gpt-4.1-mini) and stage 3 (gpt-4.1, both orders), estimated from the default funnel.

Prints, per part and in total: the estimate with its range, the actual cost and the relative gap.

    python benchmarks/estimate.py                      # 20 conversations, rule judges
    python benchmarks/estimate.py -n 40 --judges llm --pilot 8   # the funnel's shares from an 8-conversation pilot
    python benchmarks/estimate.py --mode session       # whole sessions: gpt-4.1-mini plays the user
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import delta_eval as de
from delta_eval.demo import CANDIDATE_PROMPT, behaviours, demo_config, demo_conversations
from delta_eval.demo import DemoModels as Models
from delta_eval.estimate import CostEstimate
from delta_eval.judges.config import Judges
from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
from delta_eval.testing.servers.openai import FakeOpenAIServer

BASELINE, CANDIDATE = "openai:gpt-4.1-mini", "openai:gpt-4.1"


READS = ["get_*", "search_*", "list_*", "calculate", "think"]


def config_for(
    server: FakeOpenAIServer, out: Path, *, n: int, seed: int, judges: str, mode: str = "turn"
) -> de.RunConfig:
    """The demo's sample on gpt-4.1-mini (baseline) and gpt-4.1 (candidate, reworded prompt) behind ``server``; in
    session mode gpt-4.1-mini plays the user (its goal summarised from the recording; the fake server answers as the
    simulated user does)."""
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "bench-key-for-the-fake-server"}
    chosen = Judges()
    if judges == "llm":
        chosen = Judges(
            equivalence=EquivalenceJudge(model=BASELINE, provider_options=options),
            judge=PairwiseJudge(model=CANDIDATE, provider_options=options),
            order="both",
        )
    models = Models(
        baseline=de.Variant(name="baseline", model=BASELINE, provider_options=options),
        candidate=de.Variant(
            name="candidate", model=CANDIDATE, system_prompt=CANDIDATE_PROMPT, provider_options=options
        ),
        judges=chosen,
    )
    config = demo_config(out, n=n, seed=seed, models=models)
    if mode == "session":
        # No tool model: a session's tool_model takes no provider options (no base_url for the fake server).
        session = de.Session(user=BASELINE, user_options=options, scripted=False, expected="actions", ignore=READS)
        config = config.model_copy(update={"mode": "session", "session": session, "max_tool_rounds": 10})
    return config


def actual_costs(result: de.RunResult) -> dict[str, float | None]:
    """What the run reports it cost, by the estimate's part names."""
    con = result.connect()
    try:
        rows = con.execute(
            "SELECT side, sum(cost_usd), count(cost_usd) = count(*) FROM replays WHERE side <> 'recorded' GROUP BY side"
        ).fetchall()
    finally:
        con.close()
    costs: dict[str, float | None] = {side: (total if known else None) for side, total, known in rows}
    judging = result.counts.judging
    if "equivalence" in judging:
        costs["stage 2 equivalence"] = judging["equivalence"].cost_usd
    if "judge" in judging or "audit" in judging:
        parts = [judging[k].cost_usd for k in ("judge", "audit") if k in judging]
        costs["stage 3 judge"] = None if None in parts else sum(p for p in parts if p is not None)
    for role, spend in result.counts.simulating.items():  # a session run's user and tool simulators
        costs[role.replace("_", " ")] = spend.cost_usd
    return costs


def compare(
    out: Path,
    *,
    n: int = 20,
    seed: int = 7,
    judges: str = "rule",
    latency_ms: float = 0.0,
    pilot: int = 0,
    mode: str = "turn",
) -> dict[str, Any]:
    """Estimate, then run, the same config; the estimate, the actual costs and the run's result. With ``pilot``,
    a pilot run of that many conversations (another seed) first, whose funnel the estimate assumes."""
    conversations, _ = demo_conversations().load()
    # The demo's behaviours under this config's model names: the candidate rewords, skips and changes calls.
    demo = behaviours(seed, latency_ms, "changed")
    behaviour = {BASELINE.partition(":")[2]: demo["baseline"], CANDIDATE.partition(":")[2]: demo["candidate"]}
    with FakeOpenAIServer(recordings=conversations, behaviour=behaviour) as server:
        config = config_for(server, out, n=n, seed=seed, judges=judges, mode=mode)
        pilot_dir = None
        if pilot:
            pilot_dir = out.parent / "pilot"
            pilot_config = config_for(server, pilot_dir, n=pilot, seed=seed + 1, judges=judges, mode=mode)
            de.run(pilot_config, conversations=demo_conversations(), progress=False)
        estimated = de.estimate(config, conversations=demo_conversations(), pilot=pilot_dir)
        result = de.run(config, conversations=demo_conversations(), progress=False)
    return {"estimate": estimated, "actual": actual_costs(result), "result": result}


def gap_lines(estimated: CostEstimate, actual: dict[str, float | None]) -> list[str]:
    """Per part and in total: estimate (range), actual and the gap relative to the actual."""
    lines = [f"  {'part':22s} {'estimate':>10s} {'range':>19s} {'actual':>10s} {'gap':>7s}"]
    rows = [(p.part, p.cost_usd, p.low_usd, p.high_usd) for p in estimated.parts]
    # Over the parts the estimate has: a rule-based judge stage (no part) calls no model and costs nothing.
    measured = [actual.get(p.part) for p in estimated.parts]
    total_actual = None if None in measured else sum(m for m in measured if m is not None)
    rows.append(("total", estimated.total_usd, estimated.low_usd, estimated.high_usd))
    for name, est, low, high in rows:
        act = total_actual if name == "total" else actual.get(name)
        gap = f"{(est - act) / act:+.1%}" if est is not None and act else "n/a"
        rng = f"{low:.4f}-{high:.4f}" if low is not None and high is not None else "unknown"
        est_s = f"{est:.4f}" if est is not None else "unknown"
        act_s = f"{act:.4f}" if act is not None else "unknown"
        lines.append(f"  {name:22s} {est_s:>10s} {rng:>19s} {act_s:>10s} {gap:>7s}")
    return lines


def main(argv: list[str] | None = None) -> None:
    """Estimate and run, and print the gap."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20, help="conversations sampled (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--judges", choices=["rule", "llm"], default="rule")
    parser.add_argument("--pilot", type=int, default=0, help="run a pilot of this many conversations first")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the fake server's latency per call")
    parser.add_argument("--mode", choices=["turn", "session"], default="turn", help="replay turns or roll sessions")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="delta-eval-estimate-") as tmp:
        figures = compare(
            Path(tmp) / "run",
            n=args.n,
            seed=args.seed,
            judges=args.judges,
            latency_ms=args.latency_ms,
            pilot=args.pilot,
            mode=args.mode,
        )
    print(figures["estimate"])
    print()
    print(f"estimate vs actual ({BASELINE} vs {CANDIDATE} on the fake OpenAI server, {args.judges} judges, "
          f"{args.mode} mode):")  # fmt: skip
    print("\n".join(gap_lines(figures["estimate"], figures["actual"])))


if __name__ == "__main__":
    main()
