"""benchmarks/viewer.py still runs against the viewer as it is (its figures come from running it, not from here)."""

from __future__ import annotations

import pytest

from tests.viewer.conftest import load_benchmark


def test_the_viewer_benchmark_times_every_kind_of_page(capsys: pytest.CaptureFixture[str]) -> None:
    load_benchmark().main(["--pairs", "400", "--repeats", "1"])
    out = capsys.readouterr().out
    for line in ("first page", "filtered page", "deep page", "text search", "one pair page"):
        assert line in out
