"""Several candidates in one run, against one run per candidate: the calls each model answered, and the time.

Three candidates of the demo (its changed prompt; the same at temperature 0.9; the baseline's own variant under
another name) against the demo's baseline, on the demo's sample, through the real ``openai`` SDK against the fake
OpenAI server on 127.0.0.1, whose request log counts the calls per model. Baseline: three separate runs, one per
candidate, each with its own response cache, as a team without ``candidates=`` would do. Measured in the same
process, one after the other. In the run of several, the baseline of a turn is replayed once whatever the number
of candidates, so the baseline model answers about a third of the separate runs' baseline calls (plus those of the
candidate 'same', which runs the baseline's variant).

    python benchmarks/fleet.py            # 20 conversations
    python benchmarks/fleet.py -n 40 --latency-ms 20
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import delta_eval as de
from delta_eval.demo import behaviours, demo_config, demo_conversations, demo_models
from delta_eval.testing.servers.openai import FakeOpenAIServer


def served(server: FakeOpenAIServer) -> Counter[str]:
    """Chat completions the server answered, by model."""
    return Counter(str(r.json().get("model")) for r in server.requests if r.path.endswith("/chat/completions"))


def measure(n: int, latency_ms: float, root: Path, seed: int = 7) -> dict[str, Any]:
    """Both ways on one fake server: the calls per model and the seconds of each."""
    conversations, _ = demo_conversations().load()
    out: dict[str, Any] = {}
    with FakeOpenAIServer(recordings=conversations, behaviour=behaviours(seed, latency_ms, "changed")) as server:
        options = {"base_url": server.base_url, "api_key": "bench-key-for-the-fake-server"}
        m = demo_models("openai", options, seed=seed, latency_ms=latency_ms, judges="rule")  # only the sides call
        candidates = [
            m.candidate.model_copy(update={"name": "changed"}),
            de.Variant.model_validate({**m.candidate.model_dump(), "name": "hot", "params": {"temperature": 0.9}}),
            m.baseline.model_copy(update={"name": "same"}),  # the baseline's variant under another name
        ]
        sample = demo_config("unused", n=n, seed=seed).sample
        common: dict[str, Any] = {"baseline": m.baseline, "judges": m.judges, "models": m.models, "sample": sample,
                                  "progress": False}  # fmt: skip
        names = {"baseline": m.baseline.model.split(":", 1)[1], "candidate": m.candidate.model.split(":", 1)[1]}
        before = served(server)
        start = time.perf_counter()
        for c in candidates:
            de.run(conversations=conversations, candidate=c, out=root / f"one-{c.name}", **common)
        out["separate"] = {"seconds": time.perf_counter() - start, "calls": served(server) - before}
        before = served(server)
        start = time.perf_counter()
        fleet = de.run(conversations=conversations, candidates=candidates, out=root / "fleet", **common)
        out["one run"] = {"seconds": time.perf_counter() - start, "calls": served(server) - before}
        out["pairs"] = sum(fleet.of(name).counts.pairs for name in fleet.candidates)
        out["models"] = names
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20, help="conversations sampled")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the fake server's latency per call")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(args.n, args.latency_ms, Path(tmp))
    print(f"three candidates against one baseline, {args.n} conversations, {got['pairs']} pairs in all")
    print(f"{'':<40}{'separate runs':>15}{'one run':>10}{'ratio':>8}")
    for label, model in (("baseline model (baseline + 'same')", got["models"]["baseline"]),
                         ("candidate model ('changed', 'hot')", got["models"]["candidate"])):  # fmt: skip
        a, b = got["separate"]["calls"][model], got["one run"]["calls"][model]
        print(f"{label:<40}{a:>15,}{b:>10,}{(b / a if a else float('nan')):>8.2f}")
    a, b = got["separate"]["seconds"], got["one run"]["seconds"]
    print(f"{'seconds':<40}{a:>15.1f}{b:>10.1f}{b / a:>8.2f}")


if __name__ == "__main__":
    main()
