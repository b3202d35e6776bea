"""What an object-store run folder costs: the same demo run written to a local folder and to ``s3://`` (moto's S3
server on 127.0.0.1, in a process of its own so that it takes no CPU from the client measured), then the run
opened from the URI on a fresh working copy and opened again.

Printed: wall and client CPU seconds of each run and their ratio (same run of this script, alternating); the S3
requests the run made by kind, per committed batch; the seconds and requests of a first open on a fresh working
copy (everything downloaded) and of a second (one listing, two small reads). On a real store each request costs
a network round trip (tens of milliseconds) that 127.0.0.1 does not show: the request counts are the figure that
carries over.

    python benchmarks/object_store.py                    # the demo's 60 conversations, 3 repeats
    python benchmarks/object_store.py -n 30 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.uris import WORK_DIR_ENV

#: What pyarrow's S3 filesystem reads from the environment to reach the server (and no instance metadata).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip
_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP')


class Server:
    """moto's S3 server in a subprocess; :meth:`requests` counts the requests it logged since the last call."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = log
        self._seen = 0
        moto = Path(sys.executable).with_name("moto_server")
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=self._log_file
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.1)
        self.fs = pafs.S3FileSystem(
            endpoint_override=f"127.0.0.1:{self.port}", scheme="http", region="us-east-1", allow_bucket_creation=True
        )
        self.fs.create_dir("bench")
        self.requests()

    def uri(self, name: str) -> str:
        return f"s3://bench/{name}?endpoint_override=127.0.0.1:{self.port}&scheme=http&region=us-east-1"

    def requests(self) -> Counter[str]:
        """The requests logged since the last call, by kind (a commit record's PUT, a part's GET, ...)."""
        lines = self.log.read_text().splitlines()
        new, self._seen = lines[self._seen :], len(lines)
        out: Counter[str] = Counter()
        for line in new:
            m = _REQUEST.search(line)
            if m is None:
                continue
            path = m[2].split("?", 1)[0]
            kind = ("record" if "/_commits/" in path else "cache" if "/_cache/" in path
                    else "part" if path.endswith(".parquet") else "list" if m[1] == "GET" and "?" in m[2]
                    and "list-type" in m[2] else "other")  # fmt: skip
            out[f"{m[1]} {kind}"] += 1
        return out

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log_file.close()


def timed(fn: Any) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=60, help="conversations sampled (default 60)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    tmp = Path(tempfile.mkdtemp(prefix="de-objstore-"))
    server = Server(tmp / "moto.log")
    try:
        local: list[tuple[float, float]] = []
        remote: list[tuple[float, float]] = []
        requests: Counter[str] = Counter()
        batches = 0
        for i in range(args.repeats):
            os.environ[WORK_DIR_ENV] = str(tmp / f"work-{i}")

            def run(out: str | Path) -> de.RunResult:
                config = demo_config(out, n=args.n, latency_ms=0.0)
                return de.run(config, conversations=demo_conversations(), progress=False)

            wall, cpu, _ = timed(lambda i=i: run(tmp / f"local-{i}"))
            local.append((wall, cpu))
            server.requests()
            wall, cpu, result = timed(lambda i=i: run(server.uri(f"run-{i}")))
            remote.append((wall, cpu))
            requests += server.requests()
            batches += len(list((result.path / "_commits").glob("*.json")))
        med = {k: statistics.median(v) for k, v in {
            "local wall": [w for w, _ in local], "local cpu": [c for _, c in local],
            "s3 wall": [w for w, _ in remote], "s3 cpu": [c for _, c in remote]}.items()}  # fmt: skip
        pairs = de.open_result(tmp / "local-0").counts.pairs
        print(f"demo run, {args.n} conversations ({pairs} pairs), medians of {args.repeats}:")
        print(f"  local folder   {med['local wall']:.2f} s wall, {med['local cpu']:.2f} s CPU")
        ratios = f"x{med['s3 wall'] / med['local wall']:.2f} wall, x{med['s3 cpu'] / med['local cpu']:.2f} CPU"
        print(f"  s3:// (moto)   {med['s3 wall']:.2f} s wall, {med['s3 cpu']:.2f} s CPU  ({ratios})")
        print(f"  S3 requests per run: {sum(requests.values()) / args.repeats:.0f} for {batches / args.repeats:.0f} "
              f"batches ({sum(requests.values()) / batches:.1f} a batch):")  # fmt: skip
        for kind, count in sorted(requests.items()):
            print(f"    {kind:<14} {count / args.repeats:.0f}")
        os.environ[WORK_DIR_ENV] = str(tmp / "fresh")
        uri = server.uri("run-0")
        wall, cpu, _ = timed(lambda: de.open_result(uri))
        first = server.requests()
        print(f"  open on a fresh working copy: {wall:.2f} s wall, {sum(first.values())} requests")
        wall, cpu, _ = timed(lambda: de.open_result(uri))
        again = server.requests()
        print(f"  open again:                   {wall:.2f} s wall, {sum(again.values())} requests "
              f"({', '.join(f'{k} {v}' for k, v in sorted(again.items()))})")  # fmt: skip
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
