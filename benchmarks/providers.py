"""The price of the pipeline on a real SDK: ``de.run`` with ``openai:`` on both sides against a bare ``AsyncOpenAI``
loop, both talking to the same fake OpenAI server in a process of its own.

- bare: what a home-grown script does: for every assistant turn of the export and each of two models, call the
  model through ``AsyncOpenAI`` (a semaphore for concurrency, ``max_retries=0``), feed recorded tool results back
  (the same tool simulation), until the model answers in text. No cache, no judging, no storage.
- pipeline: ``de.run`` on the same export: sampling (everything), replay through the response cache, limiter and
  retry, the three judging stages (rule judges), atomic Parquet writes, the manifest.

Both make the same model calls (the server answers from the recordings, so both follow the same tool rounds). Each
measurement runs in a child process of its own (its CPU time and peak RSS are its own) and the two alternate;
medians are printed, with the ratios:

- at 0 ms server latency and concurrency 64: pipeline requests/s over bare requests/s (target >= 0.8);
- in every scenario: the client's CPU time per call (the child process's user + system time over its calls), of the
  pipeline (target <= 1.5 ms) and of the bare loop, and the fake server's over the same calls (its process's CPU
  time while the client ran: what the server takes from the machine's cores; ``benchmarks/fake_servers.py``
  measures it alone);
- with a latency (200 ms and concurrency 256 by default): each one's wall time over the ideal, calls x latency /
  concurrency (target for the pipeline <= 2), and how many of the slots were busy on average (Little's law).

    python benchmarks/providers.py                            # both scenarios, 3 repeats each
    python benchmarks/providers.py --scenarios 1000:256       # latency_ms:concurrency, any number of them
    python benchmarks/providers.py --processes 2              # and the pipeline on 2 processes (ProcessExecutor)
    python benchmarks/providers.py --floor                    # and what the SDK, and HTTP alone, cost per call

``--floor`` makes as many calls again, each scenario, through two layers of the pipeline's stack alone (the same
event loop, collector thresholds and HTTP client; the first request of every turn of the export, for each model, in
turn, at the same concurrency): ``sdk``, the SDK's ``request()`` as the adapter makes it and the answer read into
its type, no more; ``http``, the same bytes POSTed through aiohttp with no SDK. The pipeline's CPU per call less the
SDK's is what delta_eval adds to a call (cache, limiter, retries, the canonical types, replay, judging, storage); the
SDK's less HTTP's is the SDK's own request machinery.

The pipeline's client runs on the leanest stack installed (printed first): aiohttp's transport under the SDK
(``openai[aiohttp]``), uvloop's event loop (the ``fast`` extra) and fewer garbage collections during the run. On
100 conversations (2,316 calls) at 200 ms / 256, alternating in one window on a loaded 2-core machine, the client
CPU per call went from 3.40-3.54 ms with none of them to 2.75-3.02 with aiohttp, 2.65-2.69 with uvloop too and
2.27-2.35 with the collector's thresholds too (reading the answer with pydantic-core, not the SDK's walk of its
types, saves ~140 us a call more, below the noise of such runs). On the whole export (4,658 calls), one after the
other: 3.93 ms a call before these changes, 2.42 ms with them, 2.79 ms with them but without aiohttp.

A benchmark must survive the machine it measures on: the fake server queues up to 4,096 connections before it
accepts them (asyncio's default of 100 dropped connections on a loaded machine) and the bare loop waits as long for a
connection as the pipeline does (the SDK's default connect timeout of 5 s failed its calls there).

At 200 ms and 256 in flight the ideal is 1,280 calls/s, which a 2-core machine running the client and the fake
server cannot reach (both are CPU-bound near 1 ms a call or more); a latency at which the ideal rate fits the CPU
(1,000 ms) shows whether the pipeline keeps its concurrency, apart from its CPU cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from targets import Figure, record, target  # noqa: E402 - the figures' targets, shared by the benchmarks
from throughput import peak_rss_mb, scaled_export, source  # noqa: E402 - the export helpers of the other benchmark

MODELS = ("baseline", "candidate")

#: The targets (issue 20): pipeline requests/s at least 0.8 of the bare loop's at 0 ms; at most 1.5 ms of client
#: CPU per call; at 200 ms and 256 in flight, a wall time at most twice the ideal, on a 2-core machine that runs
#: the fake server too.
THROUGHPUT_TARGET = 0.8
CPU_TARGET_MS = 1.5
IDEAL_TARGET = 2.0


def client_stack() -> str:
    """What the pipeline's calls run on here: the SDK's HTTP transport and the run's event loop (each the faster one
    where it is installed, see delta_eval.adapters.base.sdk_http_client and delta_eval.sync), and the collector's
    thresholds during a run (delta_eval.gc_thresholds). The bare loop is a plain AsyncOpenAI on asyncio."""
    from delta_eval.gc_thresholds import RUN_THRESHOLDS
    from delta_eval.installed import installed

    transport = "aiohttp" if installed("aiohttp") else "httpx (aiohttp not installed)"
    loop = "uvloop" if installed("uvloop") else "asyncio (uvloop not installed)"
    return f"the SDK on {transport}'s transport, {loop}'s event loop, gc thresholds {RUN_THRESHOLDS}"


def cpu_seconds() -> float:
    """This process's CPU time and that of its children waited for (a ProcessExecutor's shards)."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


def run_pipeline(path: Path, out: Path, base_url: str, concurrency: int, processes: int = 0) -> dict[str, Any]:
    import openai  # noqa: F401 - imported before the clock starts, as the bare loop's is (~0.5 s of CPU)

    import delta_eval as de
    import delta_eval.adapters.openai_chat  # the bare loop imports it before its clock too
    import delta_eval.api  # the run's modules, which `import delta_eval` leaves to first use

    options = {"base_url": base_url, "api_key": "bench"}
    limits = de.ModelLimits(max_concurrency=concurrency)
    config = de.RunConfig(
        out=out,
        baseline=de.Variant(model="openai:baseline", provider_options=options, limits=limits),
        candidate=de.Variant(model="openai:candidate", provider_options=options, limits=limits),
        concurrency=max(1, concurrency // 2),  # each pair keeps up to two calls in flight
        judge_concurrency=8,
    )
    start, cpu, started = time.perf_counter(), cpu_seconds(), time.monotonic()
    # With processes, one event loop per process (de.ProcessExecutor), each with its share of the limits.
    executor = de.ProcessExecutor(workers=processes) if processes else None
    progress = de.RunProgress()  # shown as by default; read for when replaying began
    result = de.run(config, conversations=source(path), executor=executor, progress=progress)
    seconds, ended = time.perf_counter() - start, time.time()
    cpu = cpu_seconds() - cpu
    # Where the wall time above the replays goes: before the first replay began, and after the last one ended.
    last = de.open_run(result.path).execute("SELECT max(finished_at) FROM replays").fetchone()
    return {
        "calls": result.counts.calls.answered,
        "errors": result.counts.errors,
        "seconds": seconds,
        "cpu": cpu,
        "rss_mb": peak_rss_mb(),
        "start_up": (progress.replay_started or started) - started,
        "end": ended - last[0].timestamp() if last and last[0] is not None else 0.0,
    }


def export_points(path: Path) -> list[Any]:
    """Every replay point (assistant turn) of the export at ``path``, in order: what the bare loop and the layers
    of ``--floor`` call the models on."""
    from delta_eval.replay.points import replay_points

    conversations, _ = source(path).load()
    return [p for c in conversations for p in replay_points(c)]


def run_bare(path: Path, base_url: str, concurrency: int) -> dict[str, Any]:
    import anyio
    import openai

    from delta_eval.adapters.openai_chat import encode_messages, encode_tools
    from delta_eval.replay.tools import RecordedToolSimulator, ToolContext
    from delta_eval.schema import Message, ToolCall

    start, cpu = time.perf_counter(), cpu_seconds()
    points = export_points(path)
    simulate = RecordedToolSimulator()
    calls = 0

    async def main() -> None:
        limiter = anyio.Semaphore(concurrency)
        # The pipeline's timeout (600 s) for every phase: the SDK's default connect timeout (5 s) fails calls whose
        # connection a loaded machine accepts late, which measures the machine, not the client.
        bare = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600.0)
        async with bare as client:

            async def turn(model: str, point: Any) -> None:
                nonlocal calls
                messages = encode_messages(point.context)
                tools = encode_tools(point.tools)
                made = 0
                for _ in range(6):
                    async with limiter:
                        reply = await client.chat.completions.create(model=model, messages=messages, tools=tools)
                    calls += 1
                    message = reply.choices[0].message
                    if not message.tool_calls:
                        return
                    messages.append(message.model_dump(exclude_none=True))
                    for c in message.tool_calls:
                        call = ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                        result = simulate(call, ToolContext(point=point, position=made))
                        made += 1
                        messages.append({"role": "tool", "tool_call_id": c.id, "content": result.content})

            async with anyio.create_task_group() as tg:
                for point in points:
                    for model in MODELS:
                        tg.start_soon(turn, model, point)

    anyio.run(main)
    _ = Message  # the canonical types are not needed beyond the encoders
    return {
        "calls": calls,
        "errors": 0,
        "seconds": time.perf_counter() - start,
        "cpu": cpu_seconds() - cpu,
        "rss_mb": peak_rss_mb(),
    }


def run_floor(path: Path, base_url: str, concurrency: int, calls: int, layer: str) -> dict[str, Any]:
    """``calls`` calls through one layer of the pipeline's client stack (see ``--floor``): ``sdk`` or ``http``."""
    import aiohttp
    import anyio
    import httpx2
    import openai
    from openai.types.chat import ChatCompletion

    from delta_eval.adapters.base import sdk_http_client, typed_body
    from delta_eval.adapters.openai_chat import encode_messages, encode_tools
    from delta_eval.adapters.openai_common import post_options
    from delta_eval.sync import run_loop

    bodies = [
        json.dumps({"model": m, "messages": encode_messages(p.context), "tools": encode_tools(p.tools)}).encode()
        for p in export_points(path)
        for m in MODELS
    ]
    bodies = (bodies * -(-calls // len(bodies)))[:calls]
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    start, cpu = time.perf_counter(), cpu_seconds()

    async def main() -> None:
        limiter = anyio.Semaphore(concurrency)
        if layer == "sdk":
            client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600.0,
                                        http_client=sdk_http_client(openai, base_url, timeout=600.0))  # fmt: skip

            async def one(body: bytes) -> None:
                async with limiter:
                    response = await client.request(httpx2.Response, post_options("/chat/completions", body))
                typed_body(ChatCompletion, response.content, model="bench")

            async with client, anyio.create_task_group() as tg:
                for body in bodies:
                    tg.start_soon(one, body)
            return
        url = base_url.rstrip("/") + "/chat/completions"
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(600)) as session:

            async def post(body: bytes) -> None:
                async with limiter, session.post(url, data=body, headers=headers) as response:
                    response.raise_for_status()
                    await response.read()

            async with anyio.create_task_group() as tg:
                for body in bodies:
                    tg.start_soon(post, body)

    run_loop(main)
    return {"calls": len(bodies), "errors": 0, "seconds": time.perf_counter() - start, "cpu": cpu_seconds() - cpu,
            "rss_mb": peak_rss_mb()}  # fmt: skip


def child(args: argparse.Namespace) -> None:
    path = Path(args.export)
    if args.child in ("sdk", "http"):
        out = run_floor(path, args.base_url, args.concurrency, args.calls, args.child)
    elif args.child in ("pipeline", "processes"):
        processes = args.processes if args.child == "processes" else 0
        out = run_pipeline(path, Path(args.out), args.base_url, args.concurrency, processes)
    else:
        out = run_bare(path, args.base_url, args.concurrency)
    print(json.dumps(out))


class Server:
    """The fake OpenAI server in a process of its own (``delta-eval fake-server``)."""

    def __init__(self, latency_ms: float) -> None:
        command = [sys.executable, "-m", "delta_eval", "fake-server", "openai", "--latency-ms", str(latency_ms)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().split(" on ")[1].split(" ")[0]

    def cpu_seconds(self) -> float:
        """The server process's CPU time so far (user + system, from ``/proc``: it is still running)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in clock ticks

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def measure(kind: str, export: Path, base_url: str, concurrency: int, out: Path, processes: int, calls: int = 0
            ) -> dict[str, Any]:  # fmt: skip
    cmd = [sys.executable, __file__, "--child", kind, "--export", str(export), "--base-url", base_url,
           "--concurrency", str(concurrency), "--out", str(out), "--processes", str(processes),
           "--calls", str(calls)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:  # say why, not just that it failed
        raise RuntimeError(f"the {kind} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def scenario(
    latency_ms: float,
    concurrency: int,
    export: Path,
    repeats: int,
    folder: Path,
    processes: int = 0,
    figures: str | None = None,
    floor: bool = False,
) -> dict[str, Any]:
    server = Server(latency_ms)
    runs: dict[str, list[dict[str, Any]]] = {"bare": [], "pipeline": []}
    if processes:
        runs["processes"] = []
    if floor:
        runs.update(sdk=[], http=[])
    try:
        for k in range(repeats):
            for kind in runs:
                before = server.cpu_seconds()
                out = folder / f"run-{latency_ms}-{kind}-{k}"
                # The layers make as many calls as the pipeline did (its median so far).
                calls = int(statistics.median(r["calls"] for r in runs["pipeline"])) if kind in ("sdk", "http") else 0
                run = measure(kind, export, server.base_url, concurrency, out, processes, calls)
                runs[kind].append({**run, "server_cpu": server.cpu_seconds() - before})
    finally:
        server.close()
    print(f"\nserver latency {latency_ms:.0f} ms, concurrency {concurrency}, {repeats} repeats (medians)")
    medians: dict[str, dict[str, float]] = {}
    for kind, rows in runs.items():
        med = {
            "calls": statistics.median(r["calls"] for r in rows),
            "rate": statistics.median(r["calls"] / r["seconds"] for r in rows),
            "seconds": statistics.median(r["seconds"] for r in rows),
            "cpu_per_1000": statistics.median(r["cpu"] / r["calls"] * 1000 for r in rows),
            "server_cpu_per_1000": statistics.median(r["server_cpu"] / r["calls"] * 1000 for r in rows),
            "rss_mb": statistics.median(r["rss_mb"] for r in rows),
            "errors": max(r["errors"] for r in rows),
            # Little's law: calls in flight on average = calls x latency / wall time.
            "busy": statistics.median(r["calls"] * latency_ms / 1000 / r["seconds"] for r in rows),
        }
        medians[kind] = med
        each = ", ".join(f"{r['calls'] / r['seconds']:.0f}" for r in rows)
        print(
            f"  {kind:9s} {med['calls']:7.0f} calls  {med['rate']:7.1f} req/s  {med['seconds']:6.2f} s  "
            f"CPU {med['cpu_per_1000']:5.2f} s/1000 calls  peak RSS {med['rss_mb']:6.1f} MB  errors {med['errors']:.0f}"
            f"  (runs: {each} req/s)"
        )
    pipe, bare = medians["pipeline"], medians["bare"]
    at = f"{latency_ms:g} ms / {concurrency}"
    ratio = pipe["rate"] / bare["rate"]
    print(f"  pipeline / bare: throughput {ratio:.2f}{target(ratio, THROUGHPUT_TARGET, at_least=True)}, "
          f"wall time {pipe['seconds'] / bare['seconds']:.2f}")  # fmt: skip
    cpu_ms = pipe["cpu_per_1000"]  # s per 1,000 calls is ms per call
    print(f"  client CPU per call: pipeline {cpu_ms:.2f} ms{target(cpu_ms, CPU_TARGET_MS)}, bare SDK loop "
          f"{bare['cpu_per_1000']:.2f} ms, pipeline / bare {cpu_ms / bare['cpu_per_1000']:.2f}")  # fmt: skip
    if floor:
        sdk, http = medians["sdk"]["cpu_per_1000"], medians["http"]["cpu_per_1000"]
        record(
            figures,
            Figure("providers", f"SDK request alone CPU per call, {at}", sdk, "ms"),
            Figure("providers", f"HTTP alone (aiohttp) CPU per call, {at}", http, "ms"),
        )
        print(f"  client CPU per call by layer: the SDK's request and typed answer {sdk:.2f} ms, of which HTTP "
              f"(aiohttp alone) {http:.2f} ms; the pipeline adds {cpu_ms - sdk:.2f} ms to the SDK's "
              f"({(cpu_ms - sdk) / cpu_ms:.0%} of its {cpu_ms:.2f} ms)")  # fmt: skip
    print(f"  fake server CPU per call: during the pipeline {pipe['server_cpu_per_1000']:.2f} ms, during the bare loop "
          f"{bare['server_cpu_per_1000']:.2f} ms")  # fmt: skip
    for kind in ("pipeline", "processes"):
        if kind in runs:
            start_up = statistics.median(r["start_up"] for r in runs[kind])
            end = statistics.median(r["end"] for r in runs[kind])
            print(f"  {kind}: {start_up:.2f} s before replaying began (sampling, workers), {end:.2f} s after the last "
                  "replay ended (judging, the last batch, the manifest)")  # fmt: skip
    if "processes" in medians:
        spread = medians["processes"]
        print(f"  pipeline on {processes} processes: client CPU per call {spread['cpu_per_1000']:.2f} ms (every "
              f"process's), wall time / one process's {spread['seconds'] / pipe['seconds']:.2f}")  # fmt: skip
    record(
        figures,
        Figure("providers", f"client CPU per call, {at}", cpu_ms, "ms", CPU_TARGET_MS),
        Figure("providers", f"bare AsyncOpenAI loop CPU per call, {at}", bare["cpu_per_1000"], "ms"),
    )
    if not latency_ms:
        record(figures, Figure("providers", "pipeline / bare throughput", ratio, "", THROUGHPUT_TARGET, at_least=True))
    if latency_ms:
        for kind in [k for k in medians if k in ("bare", "pipeline", "processes")]:  # (not the layers of --floor)
            ideal = medians[kind]["calls"] * latency_ms / 1000 / concurrency
            over = medians[kind]["seconds"] / ideal
            mark = target(over, IDEAL_TARGET) if kind != "bare" else ""
            print(f"  {kind} wall time / ideal (calls x {latency_ms / 1000:g} s / {concurrency} = {ideal:.2f} s): "
                  f"{over:.2f}{mark}, {medians[kind]['busy']:.0f} of {concurrency} slots busy on average")  # fmt: skip
            label = {"bare": "bare loop", "pipeline": "pipeline", "processes": f"pipeline on {processes} processes"}
            bound = None if kind == "bare" else IDEAL_TARGET
            record(figures, Figure("providers", f"{label[kind]} wall time / ideal, {at}", over, "x", bound))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1, help="repeat the 200-conversation export this many times")
    parser.add_argument("--conversations", type=int, help="only the first N conversations of the export")
    parser.add_argument("--child", choices=["pipeline", "bare", "processes", "sdk", "http"], help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also run the pipeline on this many processes, one event loop each (de.ProcessExecutor); 0: not",
    )
    parser.add_argument(
        "--scenarios",
        default="0:64,200:256",
        help="latency_ms:concurrency pairs, comma separated (default 0:64,200:256)",
    )
    parser.add_argument("--figures", help="append the figures and their targets to this file (JSON lines)")
    parser.add_argument("--floor", action="store_true", help="and the client CPU per call of the SDK alone, and HTTP")
    parser.add_argument("--calls", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        export = scaled_export(args.scale, folder)
        lines = export.read_text().splitlines(keepends=True)[: args.conversations]
        export.write_text("".join(lines))
        print(f"providers benchmark: fake OpenAI server in its own process, {len(lines)} conversations")
        print(f"pipeline client: {client_stack()}")
        for item in args.scenarios.split(","):
            latency, concurrency = item.split(":")
            scenario(float(latency), int(concurrency), export, args.repeats, folder, args.processes, args.figures,
                     args.floor)  # fmt: skip


if __name__ == "__main__":
    main()
