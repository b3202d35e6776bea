"""Fixtures of the run-folder tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from delta_eval.uris import WORK_DIR_ENV
from tests.object_store import S3, s3_server


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3]:
    """A fresh S3 server for the test (stopped at its end); working copies under ``tmp_path/work``."""
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "work"))
    with s3_server(monkeypatch) as server:
        yield server
