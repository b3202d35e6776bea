"""An S3 server on 127.0.0.1 for the tests of run folders in an object store: moto's, reached through pyarrow's S3
filesystem, started empty by each test that uses it and stopped at its end."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from delta_eval.store.folder import RunFolder
from delta_eval.store.remote import RemoteFolder
from delta_eval.uris import working_copy

__all__ = ["CREDENTIALS", "S3", "mirrored", "s3_server"]

#: What pyarrow's S3 filesystem reads from the environment to talk to the server (and no instance metadata).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class S3:
    """A bucket on a moto S3 server on 127.0.0.1, and pyarrow's filesystem on it."""

    def __init__(self, host: str, port: int) -> None:
        self.query = f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        self.fs = pafs.S3FileSystem(
            endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1", access_key="testing",
            secret_key="testing", allow_bucket_creation=True,
        )  # fmt: skip
        self.fs.create_dir("runs")

    def uri(self, name: str) -> str:
        return f"s3://runs/{name}?{self.query}"

    def files(self, name: str) -> dict[str, int]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"runs/{name}", recursive=True, allow_not_found=True))
        return {i.path.split("/", 2)[2]: int(i.size or 0) for i in infos if i.type == pafs.FileType.File}

    def cache_keys(self, name: str) -> list[str]:
        """The keys of every response-cache row run folder ``name`` uploaded, once per row (a key asked twice and
        uploaded each time is there twice)."""
        keys: list[str] = []
        for rel in self.files(name):
            if rel.startswith("_cache/"):
                with self.fs.open_input_file(f"runs/{name}/{rel}") as f:
                    keys += pq.read_table(f, columns=["key"]).column("key").to_pylist()
        return keys


@contextmanager
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """A fresh S3 server (stopped at the end), this process's environment set to reach it."""
    from moto.server import ThreadedMotoServer

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        # moto keeps its buckets in this process across servers: emptied, so no test sees another's objects
        httpx.post(f"http://{host}:{port}/moto-api/reset").raise_for_status()
        yield S3(host, port)
    finally:
        server.stop()


def mirrored(uri: str) -> tuple[RunFolder, RemoteFolder]:
    """A new run folder in ``uri``'s working copy, each batch it commits uploaded to ``uri``."""
    local = working_copy(uri)
    folder = RunFolder(local)
    folder.mark()
    remote = RemoteFolder(uri, local)
    remote.sync()
    folder.mirror = remote
    return folder, remote
