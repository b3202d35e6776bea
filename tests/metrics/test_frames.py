"""Tables as the metrics read them: fetch_table's Arrow straight from DuckDB, without touching the process's warning
filters at each call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import duckdb
import pytest

from delta_eval.metrics.frames import fetch_table

ROOT = Path(__file__).resolve().parents[2]


def test_fetching_a_table_swaps_no_warning_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    # catch_warnings() replaces the process's filter list and puts it back: under threads that loses or leaks
    # another thread's filters and warnings, so fetch_table never enters it.
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("fetch_table swapped the warning filters")

    monkeypatch.setattr(warnings, "catch_warnings", refused)
    db = duckdb.connect()
    try:
        table = fetch_table(db, "select ? as n, 'x' as s", [3])
    finally:
        db.close()
    assert table.to_pylist() == [{"n": 3, "s": "x"}]


def test_duckdb_s_copy_warning_is_silenced_for_the_metrics_calls_alone() -> None:
    # In a fresh process whose user makes every warning an error after importing the metrics (as pytest does
    # around each test, and `simplefilter("error")` does), and within a catch_warnings() block the import happened
    # in: fetch_table says nothing, on its relation path and on the path of execute (taken while a caller's result
    # of execute is unfinished), and the same DuckDB call written by the user still warns.
    code = (
        "import json, warnings, duckdb\n"
        "with warnings.catch_warnings():\n    from delta_eval.metrics.frames import fetch_table\n"
        "warnings.simplefilter('error')\n"
        "db = duckdb.connect()\nrows = fetch_table(db, 'select 1 as a').num_rows\n"
        "pending = db.execute('select * from range(3)')\npending.fetchone()\n"
        "rows += fetch_table(db, 'select ? as a', [2]).num_rows\n"
        "try:\n    db.execute('select 1').to_arrow_table()\n    theirs = 'silent'\n"
        "except UserWarning as exc:\n    theirs = str(exc)[:30]\n"
        "print(json.dumps({'rows': rows, 'theirs': theirs}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"rows": 2, "theirs": "Arrow output on a DB-API resul"}
