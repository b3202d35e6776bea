"""CPU time the fake OpenAI server spends per request, measured from outside on a fixed load.

The load is what the bare ``AsyncOpenAI`` loop of ``benchmarks/providers.py`` sends for the demo export: each
assistant turn, for two models, with its tool rounds (captured once, bodies and the SDK's headers as sent). It is
replayed over keep-alive connections by a raw-socket client (so the client costs little) to the fake server in a
process of its own (``delta-eval fake-server openai``, 0 ms latency), and the server's CPU time (user + system, from
``/proc``) over the requests is its CPU per request.

``--compare DIR`` runs a second copy of the package (DIR holds its ``delta_eval``, e.g. ``git archive`` of an older
commit) the same way, alternating the two, and checks first that both answer every request with the same bytes
(one connection, requests in order, so response ids match): an A/B of a change to the fake servers, in one run.

    python benchmarks/fake_servers.py                               # 3 repeats of the load
    python benchmarks/fake_servers.py --compare /tmp/base --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from providers import run_bare  # noqa: E402 - the bare loop of the other benchmark makes the load
from throughput import scaled_export  # noqa: E402

#: One captured request: path, headers (without host and content-length) and body.
Captured = tuple[str, list[tuple[str, str]], bytes]

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def capture(conversations: int | None) -> list[Captured]:
    """The requests the bare SDK loop makes for the demo export (its first ``conversations``), as the server got
    them."""
    from delta_eval.demo import behaviours, demo_conversations
    from delta_eval.testing.servers.openai import FakeOpenAIServer

    # the server ``delta-eval fake-server openai`` runs
    recordings, _ = demo_conversations().load()
    behaviour = behaviours(latency_ms=0.0)["baseline"].model_copy(update={"reword_rate": 0.0})

    with tempfile.TemporaryDirectory() as tmp:
        export = scaled_export(1, Path(tmp))
        lines = export.read_text().splitlines(keepends=True)[:conversations]
        export.write_text("".join(lines))
        with FakeOpenAIServer(recordings=recordings, behaviour=behaviour) as server:
            run_bare(export, server.base_url, 32)
            requests = list(server.requests)
    out: list[Captured] = []
    for r in requests:
        headers = [(k, "Bearer bench" if k == "authorization" else v) for k, v in r.headers.items()
                   if k not in ("host", "content-length")]  # fmt: skip
        out.append((r.path, headers, r.body))
    return out


def encode(request: Captured) -> bytes:
    path, headers, body = request
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode("latin-1") + b"\r\n" + body


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> bytes:
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:"))
    return head + await reader.readexactly(length)


async def _load(port: int, raws: list[bytes], connections: int) -> list[bytes]:
    """Send every request over ``connections`` keep-alive connections; the responses, in request order."""
    out: list[bytes] = [b""] * len(raws)
    queue = iter(enumerate(raws))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for k, raw in queue:
            out[k] = await _exchange(reader, writer, raw)
        writer.close()
        await writer.wait_closed()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return out


def _cpu_s(pid: int) -> float:
    # /proc/PID/stat: utime and stime are fields 14 and 15, after the command name in parentheses
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


class Server:
    """``delta-eval fake-server openai`` in a process of its own, importing ``delta_eval`` from ``tree``."""

    def __init__(self, tree: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        command = [sys.executable, "-m", "delta_eval", "fake-server", "openai", "--latency-ms", "0"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.port = int(line.split("127.0.0.1:")[1].split("/")[0])

    def cpu_s(self) -> float:
        return _cpu_s(self.proc.pid)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def measure(tree: Path, raws: list[bytes], connections: int) -> float:
    """Server CPU seconds per request over one pass of the load (a fresh server: its seeded draws start over)."""
    server = Server(tree)
    try:
        asyncio.run(_load(server.port, raws[:50], 4))  # warm up: first-call imports and caches
        before = server.cpu_s()
        asyncio.run(_load(server.port, raws, connections))
        return (server.cpu_s() - before) / len(raws)
    finally:
        server.close()


def responses(tree: Path, raws: list[bytes]) -> list[bytes]:
    server = Server(tree)
    try:
        return asyncio.run(_load(server.port, raws, 1))
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conversations", type=int, help="only the first N conversations of the demo export")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--compare", type=Path, help="a second package tree to measure the same way (A/B)")
    parser.add_argument("--load", type=Path, help="keep the captured load in this JSON file (read it if it exists)")
    args = parser.parse_args()
    trees = {"this": ROOT.parent}
    if args.compare is not None:
        trees["compare"] = args.compare.resolve()
    started = time.perf_counter()
    if args.load is not None and args.load.exists():
        captured = [(p, [(k, v) for k, v in h], b.encode()) for p, h, b in json.loads(args.load.read_text())]
    else:
        captured = capture(args.conversations)
        if args.load is not None:
            args.load.write_text(json.dumps([(p, h, b.decode()) for p, h, b in captured]))
    raws = [encode(r) for r in captured]
    print(f"fake OpenAI server CPU per request: {len(raws)} chat requests of the bare SDK loop "
          f"(captured in {time.perf_counter() - started:.1f} s), {args.connections} connections")  # fmt: skip
    if "compare" in trees:
        same = responses(trees["this"], raws) == responses(trees["compare"], raws)
        print(f"  responses byte-identical between the two trees: {'yes' if same else 'NO'}")
    per: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            per[name].append(measure(tree, raws, args.connections))
    for name, rows in per.items():
        each = ", ".join(f"{r * 1000:.2f}" for r in rows)
        print(f"  {name:8s} {statistics.median(rows) * 1000:.2f} ms per request (median; runs {each}) [{trees[name]}]")
    if "compare" in per:
        ratio = statistics.median(per["this"]) / statistics.median(per["compare"])
        print(f"  this / compare: {ratio:.2f}")
    print(json.dumps({name: statistics.median(rows) * 1000 for name, rows in per.items()}))


if __name__ == "__main__":
    main()
