"""What the response-cache key costs per model call, against two baselines measured in the same run.

Every model call computes :meth:`~delta_eval.calls.ModelRequest.cache_key` over its whole context, so the key must
stay cheap as contexts grow. Measured on the requests of real tau-bench turns (the bundled demo export), in the
order a run sends them:

- ``cache_key``: the library's key (versioned, canonical form with defaults left out, pydantic's serialiser per
  message, chained on the history a request shares with the conversation's earlier ones);
- ``plain json``: hashing ``model_dump_json()`` with nothing left out (the spine's key, before the reshape);
- ``sorted dict``: hashing ``json.dumps(canonical(), sort_keys=True)`` (the same canonical form, dumped in Python).

    python benchmarks/cache_key.py              # 40 conversations' turns, 7 repeats (medians)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable

import delta_eval as de
from delta_eval.calls import ModelRequest
from delta_eval.replay.points import replay_points


def plain_json(request: ModelRequest) -> str:
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


def sorted_dict(request: ModelRequest) -> str:
    text = json.dumps(request.canonical(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def library(request: ModelRequest) -> str:
    return request.cache_key(namespace="candidate:x#0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    conversations, _ = de.demo.demo_conversations().load()
    requests = [
        ModelRequest(model="simulated:x", messages=p.context, tools=p.tools)
        for c in conversations[: args.conversations]
        for p in replay_points(c)
    ]
    ways: dict[str, Callable[[ModelRequest], str]] = {
        "cache_key": library,
        "plain json": plain_json,
        "sorted dict": sorted_dict,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, fn in ways.items():  # interleaved, so drift hits all three alike
            start = time.perf_counter()
            for r in requests:
                fn(r)
            times[name].append((time.perf_counter() - start) / len(requests) * 1e6)
    mean_messages = sum(len(r.messages) for r in requests) / len(requests)
    print(f"cache key per call: {len(requests)} tau-bench requests (mean {mean_messages:.0f} messages), medians")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, us in medians.items():
        print(f"  {name:12s} {us:8.1f} us/key   ({us / medians['cache_key']:.2f}x the library's key)")


if __name__ == "__main__":
    main()
