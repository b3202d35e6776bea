"""What merging a run folder's batches costs on an object store: a folder of many small batches in ``s3://`` (moto's
S3 server on 127.0.0.1, in a process of its own, see :mod:`object_store`) merged into one, its requests sent one
after another (``REQUEST_THREADS = 1``, as before they went out together) and :data:`~delta_eval.store.remote.
REQUEST_THREADS` at a time, alternating in one run of this script.

Printed: the merge's wall seconds each way and their ratio, and the S3 requests it made by kind; first as moto
answers (a few milliseconds of its CPU a request: on a small machine the server is the bound), then with a round
trip of ``--latency-ms`` added to each call the merge makes to the store (a real store's tens of milliseconds;
added in the client, once per call, where pyarrow's ``delete_file`` sends three requests: an underestimate).

    python benchmarks/object_store_merge.py                 # 300 batches, 20 ms, once each way
    python benchmarks/object_store_merge.py --batches 100 --latency-ms 50 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from object_store import CREDENTIALS, Server

import delta_eval as de
from delta_eval.store import remote as remote_module
from delta_eval.store.folder import RunFolder
from delta_eval.store.manifest import RunManifest
from delta_eval.store.remote import RemoteFolder
from delta_eval.uris import WORK_DIR_ENV, working_copy


class Distant:
    """A store each call to which waits ``seconds`` first, as for a round trip (the GIL released meanwhile, as a
    request's wait for the network releases it)."""

    def __init__(self, fs: pafs.FileSystem, seconds: float) -> None:
        self.fs, self.seconds = fs, seconds

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.fs, name)

        def delayed(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self.seconds)
            return call(*args, **kwargs)

        return delayed


def uploaded(uri: str, batches: int) -> RunFolder:
    """A run folder at ``uri`` of ``batches`` batches of three verdicts and an error each, uploaded."""
    folder = RunFolder(working_copy(uri))
    folder.mark()
    remote = RemoteFolder(uri, folder.path)
    remote.sync()
    folder.mirror = remote
    folder.write_manifest(
        RunManifest(status="completed", fingerprint={}, config={}, source="s", baseline="b", candidate="c")  # type: ignore[arg-type]
    )
    for b in range(batches):
        folder.add("verdicts", [de.Verdict(pair_id=f"p{b}-{i}", conversation_id=f"c{b}", turn_index=i, stage="judge",
                                           outcome="tie") for i in range(3)])  # fmt: skip
        folder.add("errors", [de.ErrorRecord(stage="replay", message="m", pair_id=f"p{b}-0")])
        folder.commit()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added to each call to the store (default 20)")
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    tmp = Path(tempfile.mkdtemp(prefix="de-objmerge-"))
    os.environ[WORK_DIR_ENV] = str(tmp / "work")
    server = Server(tmp / "moto.log")
    together = remote_module.REQUEST_THREADS
    ways = [(latency, threads) for latency in (0.0, args.latency_ms) for threads in (1, together)]
    walls: dict[tuple[float, int], list[float]] = {way: [] for way in ways}
    requests: dict[tuple[float, int], Counter[str]] = {way: Counter() for way in ways}
    try:
        for i in range(args.repeats):
            for latency, threads in ways:
                folder = uploaded(server.uri(f"merge-{latency:g}-{threads}-{i}"), args.batches)
                assert isinstance(folder.mirror, RemoteFolder)
                if latency:
                    folder.mirror.fs = Distant(folder.mirror.fs, latency / 1000)  # type: ignore[assignment]
                server.requests()
                remote_module.REQUEST_THREADS = threads
                start = time.perf_counter()
                merged = folder.compact()
                walls[latency, threads].append(time.perf_counter() - start)
                requests[latency, threads] += server.requests()
                assert len(merged) == 1, merged
    finally:
        remote_module.REQUEST_THREADS = together
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"merging {args.batches} batches into one on s3:// (moto), medians of {args.repeats}:")
    for latency in (0.0, args.latency_ms):
        said = "as moto answers" if not latency else f"{latency:g} ms added to each call"
        one, many = (statistics.median(walls[latency, t]) for t in (1, together))
        for threads, wall in ((1, one), (together, many)):
            sent = requests[latency, threads]
            kinds = ", ".join(f"{k} {v / args.repeats:.0f}" for k, v in sorted(sent.items()))
            print(f"  {said}, {threads:>2} at a time: {wall:.2f} s, {sum(sent.values()) / args.repeats:.0f} requests "
                  f"({kinds})")  # fmt: skip
        print(f"  {said}: one at a time / {together} at a time = x{one / many:.2f}")


if __name__ == "__main__":
    main()
