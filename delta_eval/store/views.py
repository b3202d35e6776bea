"""DuckDB views over a run folder.

:func:`open_run` returns an in-memory DuckDB connection with one view per dataset (``replays``, ``verdicts``,
``judgements``, ``simulator_calls``, ``errors``, ``conversations``, ``strata``, ``media``; see
:mod:`delta_eval.store.tables`) over the committed Parquet files (and ``verdict_tallies``, the verdicts counted,
where they count every one, with ``tallies=True`` or where ``datasets`` names them: see
:mod:`delta_eval.store.tallies`), and three
conveniences:

- ``pairs``: one row per pair, the verdict beside the baseline, candidate and recorded final texts, tool-call
  counts, costs and latencies;
- ``tool_calls``: one row per tool call of every replay (side, step, position, name, arguments, result source);
- ``transcripts``: one row per step of every replay, in order: what the side said, the tools it called, where their
  results came from, and in a session what the user answered and whether it was recorded or simulated (a session's
  two sides side by side: ``WHERE pair_id = ... ORDER BY step_index, side``).

Example:
    >>> con = open_run("runs/demo")                                    # doctest: +SKIP
    >>> con.sql("SELECT stage, outcome, count(*) FROM verdicts GROUP BY ALL").show()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
import weakref
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyarrow as pa

from delta_eval.duckdb_connect import connect
from delta_eval.exceptions import RunFolderError, RunFolderWarning
from delta_eval.sql import quote_ident, quote_literal
from delta_eval.store.derived import DERIVED_FROM, complete
from delta_eval.store.folder import MANIFEST, PER_PAIR, RunFolder, Snapshot, damage_message
from delta_eval.store.remote import local_run
from delta_eval.store.replay_tallies import REPLAY_TALLIES
from delta_eval.store.tables import DATASETS, SCHEMAS
from delta_eval.store.tallies import TALLIES

__all__ = ["open_run", "replay_tallies_of", "tallies_of"]


_PAIRS = """
CREATE VIEW pairs AS
SELECT v.*,
       b.final_text AS baseline_text, c.final_text AS candidate_text, r.final_text AS recorded_text,
       b.n_tool_calls AS baseline_tool_calls, c.n_tool_calls AS candidate_tool_calls,
       r.n_tool_calls AS recorded_tool_calls,
       b.cost_usd AS baseline_cost_usd, c.cost_usd AS candidate_cost_usd,
       b.latency_ms AS baseline_latency_ms, c.latency_ms AS candidate_latency_ms,
       b.hit_tool_cap AS baseline_hit_tool_cap, c.hit_tool_cap AS candidate_hit_tool_cap
FROM verdicts v
LEFT JOIN replays b ON b.pair_id = v.pair_id AND b.side = 'baseline'
LEFT JOIN replays c ON c.pair_id = v.pair_id AND c.side = 'candidate'
LEFT JOIN replays r ON r.pair_id = v.pair_id AND r.side = 'recorded'
"""

_TOOL_CALLS = """
CREATE VIEW tool_calls AS
WITH steps AS (
    SELECT pair_id, conversation_id, turn_index, side, model,
           unnest(steps) AS step, generate_subscripts(steps, 1) AS step_index
    FROM replays
), calls AS (
    SELECT pair_id, conversation_id, turn_index, side, model, step_index,
           unnest(step.tool_calls) AS call, generate_subscripts(step.tool_calls, 1) AS call_index,
           step.tool_results AS results
    FROM steps
)
SELECT pair_id, conversation_id, turn_index, side, model, step_index, call_index,
       call.name AS name, call.arguments AS arguments, call.arguments_valid AS arguments_valid,
       list_filter(results, lambda r: r.call_id = call.id)[1].source AS result_source,
       list_filter(results, lambda r: r.call_id = call.id)[1].content AS result
FROM calls
"""


_TRANSCRIPTS = """
CREATE VIEW transcripts AS
WITH steps AS (
    SELECT pair_id, conversation_id, turn_index, side, model, finish_reason,
           unnest(steps) AS step, generate_subscripts(steps, 1) AS step_index
    FROM replays
)
SELECT pair_id, conversation_id, turn_index, side, model, step_index, step.text AS text,
       list_transform(step.tool_calls, lambda c: c.name) AS tools,
       list_transform(step.tool_results, lambda r: r.source) AS result_sources,
       step."user" AS "user", step.user_source AS user_source, finish_reason
FROM steps
"""


def _held_paths(snapshot: Snapshot) -> dict[str, list[Path]] | None:
    """Paths that open the snapshot's files by their descriptors (Linux's ``/proc/self/fd``), so that DuckDB
    reads the files held open even once a rerun removed their names; ``None`` where there are none, or where
    the snapshot holds too many files to keep them all open (see :meth:`RunFolder.snapshot`)."""
    held = Path("/proc/self/fd")
    fds = [fd for files in snapshot.files.values() for _, fd in files]
    if not held.is_dir() or any(fd < 0 for fd in fds):
        return None
    return {name: [held / str(fd) for _, fd in files] for name, files in snapshot.files.items()}


def _one_schema(files: list[Path]) -> bool:
    """Whether every file has the first one's columns, so a view can read them by position. ``union_by_name``
    (what a folder whose batches were written by versions with other columns needs: a column a batch lacks reads
    as nulls) has DuckDB read every file's footer again each time a query is planned: with hundreds of batches,
    more than the query itself. Read once here instead, 0.2-0.3 ms a file."""
    if len(files) < 2:
        return True
    import pyarrow.parquet as pq

    first = pq.read_schema(files[0])
    return all(pq.read_schema(f).equals(first) for f in files[1:])


def tallies_of(con: Any) -> pa.Table | None:
    """The verdicts' tallies a connection of :func:`open_run` views (made with ``tallies=True``), of the same
    snapshot as its other views: they count every verdict of its ``verdicts`` view, and no other. ``None`` without
    that view (not asked for, or some batch's verdicts are not counted in them)."""
    if not _has_run_view(con, TALLIES):
        return None
    table: pa.Table = con.sql(f"SELECT * FROM {TALLIES}").to_arrow_table()
    return table


def replay_tallies_of(con: Any) -> str | None:
    """The name of the view of the replays' tallies in a connection of :func:`open_run` (made with ``tallies=True``,
    of the same snapshot as its other views: they sum every replay of its ``replays`` view, and no other), or
    ``None`` without that view (not asked for, a candidate's views, or some batch's replays not summed in them)."""
    return REPLAY_TALLIES if _has_run_view(con, REPLAY_TALLIES) else None


def _has_run_view(con: Any, name: str) -> bool:
    """Whether a connection of :func:`open_run` has the run's view ``name`` (in memory: a user's file attached to it
    may hold a view of that name of its own)."""
    found = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND database_name = 'memory' "
                        "AND NOT internal", [name]).fetchall()[0][0]  # fmt: skip
    return bool(found)


def open_run(run_dir: str | Path, database: str | Path = ":memory:", *, candidate: str | None = None,
             datasets: Collection[str] | None = None, tallies: bool = False) -> Any:  # fmt: skip
    """A DuckDB connection with views over the run folder's datasets (see the module docstring).

    In a run of several candidates, ``candidate`` names one: ``verdicts``, ``replays``, ``judgements``, ``errors``
    (and so ``pairs`` and ``tool_calls``) then hold only its pairs against the baseline, as in a run of its own;
    ``all_verdicts`` (and ``all_replays``, ...) keep every candidate's. Without ``candidate`` the views hold every
    candidate's rows, the verdicts' ``candidate`` column saying whose (a pair id ends with ``~`` and its name).

    The views cover the batches committed when it is called, as a snapshot: a rerun dropping or recomputing
    batches meanwhile changes nothing the connection reads (the files are held open for as long as the connection
    lives, where the OS allows; see :func:`_held_paths`). Call it again to see a run that is still going. Damaged
    batches (see :meth:`RunFolder.damage`) are left out, with a :class:`RunFolderWarning` naming each; a rerun of
    the run's command repairs them. A folder that keeps changing while it is opened raises
    :class:`~delta_eval.exceptions.RunFolderChangedError`: opening it again succeeds.

    ``database``: a DuckDB file of your own, to keep what you make of the run (``CREATE TABLE ... AS SELECT ...
    FROM verdicts``): it is attached under its stem (``analysis.duckdb`` as ``analysis``) as the connection's
    default database, so what you create goes there; the run's views stay in memory, found after the file's own
    tables, and the file never holds them (they name this process's open files), so it opens again, with the run
    as it is then. A cursor of the connection (``con.cursor()``) starts in memory: it sees the run's views, and the
    file's tables by their full names (``analysis.main.mine``). The file must not be open in another connection of
    this process meanwhile (an earlier ``open_run`` on it too: close that one first).

    ``datasets``: the views of these datasets alone (default: every one, and the conveniences), for a caller that
    reads one or two (each view reads its files' schemas when it is made: all of them cost more than a win rate's
    query over 200,000 verdicts). ``tallies=True`` (or ``verdict_tallies`` among ``datasets``) adds the view of the
    verdicts' tallies, where they count every verdict of the snapshot (see :func:`tallies_of`), and (so does
    ``replay_tallies`` among ``datasets``) that of the replays' tallies, where they sum every replay of it (see
    :mod:`delta_eval.store.replay_tallies`; :func:`replay_tallies_of`), but never with ``candidate``: they do not
    say whose pair a replay is.
    """
    folder = RunFolder(local_run(run_dir))  # an object-store URI: its working copy, brought up to date
    if not (folder.path / MANIFEST).exists():
        raise RunFolderError(f"{folder.path} is not a delta_eval run folder (no {MANIFEST})")
    folder.manifest()  # a damaged manifest is an error that names it
    # A candidate's views hold its pairs: those of its verdicts. The derived datasets only when asked for; the
    # replays' tallies only of a run's every pair (they do not say whose pair a replay is).
    derived = [TALLIES] + ([REPLAY_TALLIES] if candidate is None else [])
    wanted = [name for name in DATASETS if (datasets is None and name not in DERIVED_FROM)
              or (datasets and name in datasets) or (candidate and name == "verdicts")
              or (tallies and name in derived)]  # fmt: skip
    snapshot = folder.snapshot(wanted)  # the files of the views made, no others
    if snapshot.damage:
        warnings.warn(damage_message(folder.path, snapshot.damage), RunFolderWarning, stacklevel=2)
    try:
        con = connect(":memory:")
    except BaseException:
        snapshot.close()
        raise
    try:
        # Each query over a view reads its files' footers again unless kept: a run of a few hundred batches spent
        # a quarter of its decision there. The files of a snapshot do not change under it.
        con.execute("SET parquet_metadata_cache = true")
        attached = _attach(con, database)
        _make_views(con, snapshot, wanted, candidate=candidate, conveniences=datasets is None)
        if attached is not None:
            _use(con, attached, database)
    except BaseException:
        # (Nothing kept: not the user's file, attached and so locked while the error's traceback lives on.)
        con.close()
        snapshot.close()
        raise
    return con


def _make_views(con: Any, snapshot: Snapshot, wanted: list[str], *, candidate: str | None,
                conveniences: bool) -> None:  # fmt: skip
    """The views of :func:`open_run` over the ``wanted`` datasets' files of ``snapshot``, in ``con``'s in-memory
    database (with the conveniences: ``pairs``, ``tool_calls``, ``transcripts``)."""
    import duckdb

    committed = _held_paths(snapshot)
    if committed is None:  # no way to read a file by its descriptor: by name, as of the snapshot's scan
        committed = {name: [path for path, _ in held] for name, held in snapshot.files.items()}
        snapshot.close()
    else:
        weakref.finalize(con, snapshot.close)  # the files stay readable while the connection does
    for name in DERIVED_FROM:
        if name in wanted and (not complete(snapshot.commits, name) or (candidate and name == REPLAY_TALLIES)):
            wanted.remove(name)  # some rows are not counted in them: no view rather than a wrong one
    for name in wanted:
        files = committed[name]
        apart = candidate is not None and (name in PER_PAIR or name == TALLIES)
        view = quote_ident(f"all_{name}" if apart else name)
        if files:
            paths = ", ".join(quote_literal(str(f)) for f in files)  # a view keeps its text: no bound values
            by_name = "false" if _one_schema(files) else "true"
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM read_parquet([{paths}], union_by_name = {by_name})")
        else:
            # An empty table of the dataset's columns: a table of the database (a registered Arrow table is seen by
            # its own connection alone, not by a cursor of it, which the summary's scans run on).
            empty = quote_ident(f"_{name}_empty")
            con.register("_empty_arrow", SCHEMAS[name].empty_table())
            con.execute(f"CREATE TABLE {empty} AS SELECT * FROM _empty_arrow")
            con.unregister("_empty_arrow")
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM {empty}")
    if candidate is not None:
        mine = quote_literal(candidate)
        con.execute(f"CREATE VIEW verdicts AS SELECT * FROM all_verdicts WHERE candidate = {mine}")
        if TALLIES in wanted:
            con.execute(f"CREATE VIEW {TALLIES} AS SELECT * FROM all_{TALLIES} WHERE candidate = {mine}")
        for name in ("replays", "judgements", "simulator_calls"):
            if name in wanted:
                con.execute(
                    f"CREATE VIEW {name} AS SELECT * FROM all_{name} WHERE pair_id IN (SELECT pair_id FROM verdicts)"
                )
        if "errors" in wanted:
            con.execute("CREATE VIEW errors AS SELECT * FROM all_errors "
                        "WHERE pair_id IS NULL OR pair_id IN (SELECT pair_id FROM verdicts)")  # fmt: skip
    if conveniences:
        con.execute(_PAIRS)
        con.execute(_TOOL_CALLS)
        # A folder written before steps carried the user's answers has no transcripts view.
        with contextlib.suppress(duckdb.BinderException):
            con.execute(_TRANSCRIPTS)


#: Catalog names DuckDB keeps for itself: a database file's stem that is one of them is attached under another name.
_RESERVED = {"memory", "temp", "system", "main", "information_schema", "pg_catalog"}
#: Every view :func:`open_run` can make (lower case, as DuckDB compares names), whatever it is asked for.
_RUN_VIEWS = {*DATASETS, *(f"all_{name}" for name in DATASETS), "pairs", "tool_calls", "transcripts"}
#: The empty tables it makes for a dataset without rows (a version before made them in the user's file).
_EMPTY_TABLES = {f"_{name}_empty" for name in DATASETS}


def _attach(con: Any, database: str | Path) -> str | None:
    """Attach the user's database file ``database`` to the in-memory connection ``con`` (``None``: no file), under
    its stem made an identifier (``analysis.duckdb``: ``analysis``), and return that name. The run's views stay in
    memory: a file that held them would keep paths to this process's open files (``/proc/self/fd``), meaningless
    to any later reader, and a second :func:`open_run` on the file would find them there already."""
    import duckdb

    path = os.fspath(database)
    if not path or path.startswith(":memory:"):
        return None
    name = re.sub(r"\W", "_", Path(path).stem) or "db"
    if name[0].isdigit() or name.lower() in _RESERVED:
        name = f"db_{name}"
    try:
        con.execute(f"ATTACH {quote_literal(path)} AS {quote_ident(name)}")
    except duckdb.ResourceInUseException as exc:
        raise RunFolderError(
            f"{path} is open in another connection of this process (an earlier open_run(..., database=) too): "
            f"close it first (con.close()), then open the run again ({exc})"
        ) from exc
    return name


def _use(con: Any, name: str, database: str | Path) -> None:
    """Make the attached file ``name`` the connection's default database (what the user creates goes there), the
    run's views found after its own objects. What a version before left in the file under the names of the run's
    views and empty tables (they read files of a process long gone) is dropped, with a warning; a table of the
    user's with the name of one of the run's views is an error (it would hide it)."""
    found = con.execute("SELECT table_name, table_type FROM information_schema.tables "
                        "WHERE table_catalog = ? AND table_schema = 'main'", [name]).fetchall()  # fmt: skip
    dropped = []
    for table, kind in found:
        lower = table.lower()  # (DuckDB's names are not case-sensitive)
        if (lower in _RUN_VIEWS and kind == "VIEW") or (lower in _EMPTY_TABLES and kind != "VIEW"):
            what = "VIEW" if kind == "VIEW" else "TABLE"
            con.execute(f"DROP {what} {quote_ident(name)}.main.{quote_ident(table)}")
            dropped.append(table)
        elif lower in _RUN_VIEWS:
            raise RunFolderError(
                f"{database} has a table named {table!r}, which would hide the run's view of that name: rename it "
                "(or open the run without database=)"
            )
    if dropped:
        warnings.warn(
            f"{database}: dropped {', '.join(map(repr, dropped))}, named as the run's views and tables (a version of "
            "delta_eval before made them in the file; they read files of a process long gone)",
            RunFolderWarning,
            stacklevel=3,
        )
    con.execute(f"USE {quote_ident(name)}")
    con.execute(f"SET search_path = '{name}.main,memory.main'")  # (name: letters, digits and underscores)
