"""Sessions per second at a simulated model latency, against turn-level replay of the same conversations.

Both runs use the bundled tau-bench airline conversations, ``simulated:`` models answering after a log-normal
latency of median ``--latency-ms`` (200 by default), the same concurrency and the rule judges. The session run rolls
each conversation forward from its first user message with the simulated user (the user's goal from the task
instruction, write actions expected as the task's gold actions); the turn run replays every assistant turn of the
same conversations. Printed, per run: units (sessions or pairs) per second, model calls per unit (each side, and the
user simulator's), and for sessions where the tool results came from (the recording, or the LLM tool simulator for
calls the recording never made: the candidate changes an argument of 10% of its calls). A session is a chain of
calls, each waiting for the one before: its floor is (calls on its longer side + user calls) x latency, and the
run's floor is the longest chain or all chains spread over ``concurrency`` workers, whichever is longer: the
efficiency is the measured rate over the rate that floor allows.

    python benchmarks/sessions.py                       # 40 conversations, concurrency 16, 200 ms, 3 repeats
    python benchmarks/sessions.py --conversations 10 --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

READS = ["get_*", "search_*", "list_*", "calculate", "think"]


def conversations(n: int) -> list[Any]:
    """The first ``n`` airline conversations (two trials of each task, so both kinds of task are in)."""
    import delta_eval as de

    data = de.demo.DATA
    good, _ = de.read_conversations(
        data / "gpt-4o-airline.json",
        messages="traj",
        id="{task_id}/{trial}",
        metadata={"actions": "info.task.actions", "instruction": "info.task.instruction"},
        tools=data / "airline_tools.json",
    ).load()
    return good[:n]


def run(mode: str, convs: list[Any], out: Path, latency_ms: float, concurrency: int) -> dict[str, Any]:
    """One run; its rate, calls per unit and tool-result sources."""
    import delta_eval as de
    from delta_eval.store.folder import RunFolder
    from delta_eval.store.tables import TABLES

    slow = {"latency_ms": latency_ms, "seed": 7}
    config = de.RunConfig(
        baseline=de.Variant(model="simulated:baseline", provider_options=slow),
        candidate=de.Variant(
            model="simulated:candidate", provider_options={**slow, "reword_rate": 0.2, "change_args_rate": 0.1}
        ),
        mode=mode,
        session={
            "user": "simulated:user",
            "user_options": slow,
            "goal": "instruction",
            "stop_tools": ["transfer_to_human_agents"],
            "expected": "actions",
            "ignore": READS,
            "tool_model": "simulated:tools",  # calls the recording never made get an LLM's result
        },
        max_tool_rounds=10,
        concurrency=concurrency,
        out=out,
    )
    started = time.perf_counter()
    result = de.run(config, conversations=convs, progress=False)
    seconds = time.perf_counter() - started
    replays = [TABLES["replays"].parse(r) for r in RunFolder(out).read("replays").to_pylist()]
    sides = [r for r in replays if r.side != "recorded"]
    units = len({r.pair_id for r in sides})
    calls = result.manifest.sessions[-1].calls
    user_calls = sum(s.answered for name, s in calls.items() if "user" in name)
    sources = Counter(res.source for r in sides for step in r.output.steps for res in step.tool_results)
    by_pair: dict[str, int] = {}
    for r in sides:
        by_pair[r.pair_id] = max(by_pair.get(r.pair_id, 0), r.model_calls)
    # The wall time's floor at this latency: the longest chain of calls, and all chains spread over the workers.
    user_each = user_calls / max(units, 1)
    chains = [(n + user_each) * latency_ms / 1000 for n in by_pair.values()]
    floor_s = max(max(chains, default=0.0), sum(chains) / concurrency)
    return {
        "units": units,
        "seconds": seconds,
        "rate": units / seconds,
        "side_calls": sum(r.model_calls for r in sides) / max(units, 1) / 2,
        "user_calls": user_calls / max(units, 1),
        "sources": sources,
        "bound": units / floor_s if floor_s else float("inf"),
        "errors": len(RunFolder(out).read("errors")),
    }


def main() -> None:
    """Print the figures (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    convs = conversations(args.conversations)
    runs: dict[str, list[dict[str, Any]]] = {"session": [], "turn": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            for mode in ("session", "turn"):  # alternated: the machine's noise falls on both
                runs[mode].append(run(mode, convs, Path(tmp) / f"{mode}-{k}", args.latency_ms, args.concurrency))
    s, t = runs["session"], runs["turn"]
    med = statistics.median
    print(f"{args.conversations} airline conversations, {args.latency_ms:.0f} ms simulated latency, "
          f"concurrency {args.concurrency}, median of {args.repeats}")  # fmt: skip
    print(f"session mode: {med(r['rate'] for r in s):.2f} sessions/s ({s[0]['units']} sessions), "
          f"{s[0]['side_calls']:.1f} agent calls per side per session + {s[0]['user_calls']:.1f} user-simulator "
          f"calls; latency floor {med(r['bound'] for r in s):.2f} sessions/s "
          f"(efficiency {med(r['rate'] / r['bound'] for r in s):.0%})")  # fmt: skip
    print(f"turn mode:    {med(r['rate'] for r in t):.2f} pairs/s ({t[0]['units']} pairs), "
          f"{t[0]['side_calls']:.1f} calls per side per pair")  # fmt: skip
    turns_per_session = t[0]["units"] / max(s[0]["units"], 1)
    per_turn = med(r["rate"] for r in t) / turns_per_session
    print(f"ratio: session mode covers {med(r['rate'] for r in s) / per_turn:.2f}x as many conversations per second "
          f"as turn mode ({turns_per_session:.1f} turn pairs per conversation)")  # fmt: skip
    sources = s[0]["sources"]
    total = sum(sources.values()) or 1
    shares = ", ".join(f"{name} {n / total:.0%} ({n})" for name, n in sources.most_common())
    print(f"session tool results by source: {shares}; error rows: session {s[0]['errors']}, turn {t[0]['errors']}")


if __name__ == "__main__":
    main()
