"""DuckDB connections as the library opens them: quiet. DuckDB prints a progress bar on the terminal for any query
that runs over two seconds (a merge of millions of replays, sampling a large export), into the output of a run or of
``delta-eval`` in CI, among the library's own progress lines; every connection the library opens has it off.

Example:
    >>> con = connect()
    >>> con.execute("SELECT current_setting('enable_progress_bar')").fetchall()
    [(False,)]
"""

from __future__ import annotations

from typing import Any

__all__ = ["connect"]


def connect(database: str = ":memory:", *, read_only: bool = False) -> Any:
    """A DuckDB connection to ``database`` (in memory by default) that prints no progress bar."""
    import duckdb  # (imported when a connection is wanted: `import delta_eval` stays light)

    con = duckdb.connect(database, read_only=read_only)
    try:
        con.execute("SET enable_progress_bar = false")
    except duckdb.Error:
        # In Jupyter without ipywidgets DuckDB refuses any change of the setting (it cannot draw its bar there).
        pass
    except BaseException:
        con.close()
        raise
    return con
