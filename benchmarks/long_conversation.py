"""One long conversation: the cost of its replay points and requests as it grows, against the way they were built
before (each point a validated copy of the history before it, each request validated again), measured in the same
run.

A conversation of N messages has about N/2.7 assistant turns here (user question, sometimes a tool round, answer);
replaying every turn sends each one its whole history, so what a provider receives grows as N^2 however the library
builds it. What the library adds must not: the points share the conversation's messages (a ``History`` is a view,
not a copy) and a request is not validated again. Printed per size: milliseconds to build all points, then all
requests (each dropped after use, as the pipeline does), both ways, and microseconds per message; the new way's
per-message cost stays flat as N grows where the old way's grows with N.

With ``--replay``, a 2,000- and a 5,000-message conversation are also replayed end to end (simulated models, rule
judges: the test bed of every benchmark), each in a child process, alternating, and the ratio of their median CPU
times (the run is CPU-bound; CPU time is what other processes on the machine disturb least) is printed against the
target of 3 (the 5k one has 2.5x the turns: linear cost per turn makes it 2.5x; each request's
history is still sent whole, so what a provider receives grows as N^2 whatever the library does).

    python benchmarks/long_conversation.py                    # 1k, 5k and 10k messages, 3 repeats (medians)
    python benchmarks/long_conversation.py --replay           # and the 2k vs 5k replay ratio against its target
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import delta_eval as de
import delta_eval.api  # the run's modules, which `import delta_eval` leaves to first use: off every clock
from delta_eval.calls import ModelRequest
from delta_eval.replay.points import _turn, _turn_starts, pair_id, replay_points
from delta_eval.replay.render import build_request
from delta_eval.schema import Conversation, Message, ReplayPoint, ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import Figure, record  # the figures and their targets, shared by the benchmarks


def long_conversation(n: int) -> Conversation:
    """A support conversation of ``n`` messages: questions, answers, a tool round every third question."""
    messages = [Message(role="system", content="You are a support agent. Answer briefly.")]
    k = 0
    while len(messages) < n:
        k += 1
        messages.append(Message(role="user", content=f"Question {k}: what is the status of order {1000 + k}?"))
        if k % 3 == 0:
            call = ToolCall(id=f"call_{k}", name="get_order", arguments=f'{{"order_id": {1000 + k}}}')
            messages.append(Message(role="assistant", tool_calls=(call,)))
            messages.append(Message(role="tool", tool_call_id=call.id, name="get_order", content='{"status": "sent"}'))
        messages.append(Message(role="assistant", content=f"Order {1000 + k} was sent yesterday."))
    return Conversation(id="long", messages=tuple(messages[:n]))


def old_points(conversation: Conversation) -> Iterable[ReplayPoint]:
    """The points as they were built before: each a validated model holding a copy of its history."""
    messages = conversation.messages
    for turn_index, (i, _) in enumerate(_turn_starts(messages)):
        recorded, _ = _turn(messages, i)
        yield ReplayPoint(
            pair_id=pair_id(conversation.id, turn_index),
            conversation_id=conversation.id,
            turn_index=turn_index,
            message_index=i,
            context=messages[:i],
            recorded=recorded,
        )


def old_request(point: ReplayPoint, variant: de.Variant) -> ModelRequest:
    return ModelRequest(model=variant.model, messages=tuple(point.context), tools=point.tools, params=variant.params)


def timed(fn: Callable[[], object]) -> float:
    gc.collect()  # the garbage of the way measured before is not this one's to collect
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(n: int, repeats: int) -> dict[str, float]:
    conv = long_conversation(n)
    variant = de.Variant(model="simulated:x")
    ways: dict[str, Callable[[], object]] = {
        "points": lambda: list(replay_points(conv)),
        "points (before)": lambda: list(old_points(conv)),
        "requests": lambda: [build_request(p, variant).model for p in replay_points(conv)],
        "requests (before)": lambda: [old_request(p, variant).model for p in old_points(conv)],
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, fn in ways.items():  # interleaved, so drift hits every way alike
            times[name].append(timed(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def replay_seconds(n: int) -> tuple[int, float]:
    """Replay every turn of one n-message conversation on simulated models (rule judges), end to end."""
    out = Path(tempfile.mkdtemp(prefix="delta-eval-long-"))
    try:
        config = de.RunConfig(
            baseline=de.Variant(model="simulated:baseline"),
            candidate=de.Variant(model="simulated:candidate", provider_options={"reword_rate": 0.3}),
            judges=de.Judges(equivalence="rule", judge="rule"),
            out=out / "run",
        )
        start = time.perf_counter()
        result = de.run(config, conversations=[long_conversation(n)])
        return result.counts.pairs, time.perf_counter() - start
    finally:
        shutil.rmtree(out, ignore_errors=True)


#: The most a 5k-message conversation's replay may cost against a 2k one's (2.5x the turns).
RATIO_TARGET = 3.0


def replay_ratio(small: int, large: int, repeats: int) -> dict[int, list[dict[str, float]]]:
    """Wall and CPU seconds to replay an n-message conversation end to end, per size, each run in a child process.
    The run is CPU-bound (zero latency), so its CPU time is its cost where other processes share the machine."""
    runs: dict[int, list[dict[str, float]]] = {small: [], large: []}
    for _ in range(repeats):
        for n in runs:  # alternating, so drift hits both sizes alike
            cmd = [sys.executable, __file__, "--child", str(n)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs[n].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--replay", action="store_true", help="also replay 2k and 5k messages end to end")
    parser.add_argument("--replay-sizes", type=int, nargs=2, default=[2000, 5000], help=argparse.SUPPRESS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--figures", help="append the figures and their targets to this file (JSON lines)")
    args = parser.parse_args(argv)
    if args.child:
        replay_seconds(20)  # the first run imports and warms up what every run uses: not the conversation's cost
        cpu = time.process_time()
        pairs, seconds = replay_seconds(args.child)
        print(json.dumps({"pairs": pairs, "seconds": seconds, "cpu": time.process_time() - cpu}))
        return
    print(f"{'messages':>8} {'turns':>6}  {'points ms':>10} {'before':>8}  {'requests ms':>11} {'before':>8}  "
          f"{'us/msg':>7} {'before':>7}")  # fmt: skip
    for n in args.sizes:
        t = measure(n, args.repeats)
        turns = sum(1 for _ in replay_points(long_conversation(n)))
        new, old = t["points"] + t["requests"], t["points (before)"] + t["requests (before)"]
        print(
            f"{n:8d} {turns:6d}  {1000 * t['points']:10.1f} {1000 * t['points (before)']:8.1f}  "
            f"{1000 * t['requests']:11.1f} {1000 * t['requests (before)']:8.1f}  "
            f"{1e6 * new / n:7.1f} {1e6 * old / n:7.1f}"
        )
    if args.replay:
        small, large = args.replay_sizes
        runs = replay_ratio(small, large, args.repeats)
        turns = {n: sum(1 for _ in replay_points(long_conversation(n))) for n in runs}
        median = {n: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "cpu")} for n, rs in runs.items()}
        for n, rs in runs.items():
            each = ", ".join(f"{r['cpu']:.1f}" for r in rs)
            print(f"replay of {n} messages end to end ({turns[n]} turns): {median[n]['cpu']:.1f} s CPU "
                  f"(runs: {each}), {median[n]['seconds']:.1f} s wall")  # fmt: skip
        ratio = median[large]["cpu"] / median[small]["cpu"]
        wall = median[large]["seconds"] / median[small]["seconds"]
        verdict = "ok" if ratio <= RATIO_TARGET else "OVER"
        print(f"{large}/{small} messages: {ratio:.2f}x the CPU time ({wall:.2f}x the wall time) for "
              f"{turns[large] / turns[small]:.2f}x the turns (target <= {RATIO_TARGET:.0f}): {verdict}")  # fmt: skip
        record(args.figures, Figure("long_conversation", f"replay CPU, {large:,} / {small:,} messages", ratio, "x",
                                    RATIO_TARGET, note=f"{turns[large] / turns[small]:.2f}x the turns"))  # fmt: skip


if __name__ == "__main__":
    main()
